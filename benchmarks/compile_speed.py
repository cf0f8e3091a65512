"""Does `torch.compile` pay on this machine? Training steps and embedding, eager vs compiled, in one run.

Training: two copies of the same model (same initial weights) train on identical masked batches (MLM, 15%), the
compiled one through `Module.compile()` (inductor; what `train.compile = "on"` does). The compiled copy's first
steps pay the compilation; the script prints that one-off cost, the steady tokens/s of both (median of steps timed
alternately, so drift in the machine's speed hits both alike), the ratio, and the break-even: the number of steps
a run must take before the compiled run is ahead (compile seconds ÷ seconds saved per step) — what `auto` decides
by. Embedding: `SentenceEncoder.encode` of STS-B sentences (length-sorted batches of every length: dynamic shapes),
eager vs compiled, after one warm-up pass that compiles. The first line names the machine.

    python benchmarks/compile_speed.py [--cases 2x128,4x256] [--steps 30] [--batch-size 32] [--embed-model runs/minilm]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from bertkit.config import HeadsConfig, ModelConfig  # noqa: E402
from bertkit.hardware import describe_device  # noqa: E402
from bertkit.nn.model import Model  # noqa: E402
from bertkit.text.collate import IGNORE_INDEX  # noqa: E402
from pretrain_throughput import SEQ, VOCAB, masked_batches  # noqa: E402


def _step(model: Model, opt: torch.optim.Optimizer, inputs: torch.Tensor, labels: torch.Tensor) -> float:
    start = time.perf_counter()
    selected = labels != IGNORE_INDEX
    logits = model(inputs, mlm_select=selected).logits
    torch.nn.functional.cross_entropy(logits.float(), labels[selected]).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def train_case(layers: int, width: int, steps: int, batch_size: int, warm: int) -> str:
    torch.manual_seed(0)
    eager = Model(ModelConfig(vocab_size=VOCAB, d_model=width, n_layers=layers, n_heads=max(1, width // 64),
                              d_ff=4 * width, max_len=SEQ, positions="rotary", dropout=0.0, attention_dropout=0.0,
                              ), HeadsConfig(names=("mlm",))).train()
    compiled = copy.deepcopy(eager)
    compiled.compile()
    opts = {name: torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
            for name, m in (("eager", eager), ("compiled", compiled))}
    batches = masked_batches(warm + steps, batch_size)
    times: dict[str, list[float]] = {"eager": [], "compiled": []}
    first: list[float] = []  # the compiled copy's warm-up steps: compilation (and recompilation) included
    for index, (inputs, labels) in enumerate(batches):
        for name, model in (("eager", eager), ("compiled", compiled)):
            seconds = _step(model, opts[name], inputs, labels)
            if index >= warm:
                times[name].append(seconds)
            elif name == "compiled":
                first.append(seconds)
    tokens = batch_size * SEQ
    eager_s, compiled_s = statistics.median(times["eager"]), statistics.median(times["compiled"])
    compile_cost = sum(first) - warm * compiled_s  # beyond what the warm-up steps would cost once compiled
    saved = eager_s - compiled_s
    even = f"{compile_cost / saved:,.0f} steps" if saved > 0 else "never (compiled is not faster)"
    return (f"train {layers}x{width} batch {batch_size}x{SEQ}: eager {tokens / eager_s:,.0f} tok/s, compiled "
            f"{tokens / compiled_s:,.0f} tok/s, ratio {eager_s / compiled_s:.2f}; compile cost {compile_cost:.0f} s "
            f"(first {warm} steps); break-even after {even}")


def embed_case(run: Path, count: int) -> str:
    from embed_throughput import real_sentences

    from bertkit.embedding import SentenceEncoder

    texts = real_sentences(count)
    results = {}
    for name in ("eager", "compiled"):
        encoder = SentenceEncoder(run, precision="fp32")
        if name == "compiled":
            encoder.model.compile(dynamic=True)
        start = time.perf_counter()
        encoder.encode(texts)  # warm-up: compiles
        warm = time.perf_counter() - start
        start = time.perf_counter()
        encoder.encode(texts)
        results[name] = (len(texts) / (time.perf_counter() - start), warm)
    (eager_rate, _), (compiled_rate, compiled_warm) = results["eager"], results["compiled"]
    return (f"embed {run.name} ({len(texts):,} STS-B sentences): eager {eager_rate:,.0f} sent/s, compiled "
            f"{compiled_rate:,.0f} sent/s, ratio {compiled_rate / eager_rate:.2f}; first pass with compilation "
            f"{compiled_warm:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="2x128,4x256")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warm", type=int, default=3, help="compiled warm-up steps (compilation included)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--embed-model", type=Path, default=None, help="an encoder run (e.g. runs/minilm)")
    parser.add_argument("--embed-count", type=int, default=2000)
    args = parser.parse_args()
    print(describe_device(torch.device("cpu")), flush=True)
    for case in args.cases.split(","):
        if case:
            layers, width = (int(x) for x in case.split("x"))
            print(train_case(layers, width, args.steps, args.batch_size, args.warm), flush=True)
    if args.embed_model is not None:
        print(embed_case(args.embed_model, args.embed_count), flush=True)


if __name__ == "__main__":
    main()
