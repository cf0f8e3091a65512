"""Data-parallel vs sharded training, per process: tokens/s and memory for 1 process, 2 processes with DDP and 2
with FSDP2 (`train.sharding = "fsdp"`), one run, printed as ratios.

Each case is a real launch (`torchrun --nproc_per_node P` of this script in worker mode) that builds the model,
prepares it through `bertkit.train.loop.make_accelerator` (Accelerate: DDP or its FSDP2 plugin) and trains masked-LM
steps the way the loop does (forward, backward scaled by world / masked tokens, clipping, fused AdamW) on the same
global batches. Per process it reports:
  - state MB: the bytes this process holds of parameters, gradients and AdamW's two moments (local shards under
    FSDP) after the last step — the part sharding divides (FSDP2 ≈ 1/P of DDP's);
  - RSS MB at the end and its peak: the process's resident memory (Python, torch, activations and what the
    allocator keeps included); the peak also holds the whole model every process builds before it is sharded;
  - tokens/s over all processes (median step after warm-up).
On 2 cores each of the 2 processes gets one thread and the single process two: the tokens/s ratios say what the
communication costs here, not what a GPU node would see. The first line names the machine.

    python benchmarks/scaling.py [--layers 4] [--width 512] [--batch-size 16] [--steps 8] [--warmup 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from bertkit.config import HeadsConfig, ModelConfig  # noqa: E402
from bertkit.hardware import describe_device  # noqa: E402
from bertkit.nn.model import Model  # noqa: E402
from bertkit.text.collate import IGNORE_INDEX  # noqa: E402
from pretrain_throughput import SEQ, VOCAB, masked_batches  # noqa: E402

CASES = (("1 process", 1, "none"), ("2 processes, DDP", 2, "none"), ("2 processes, FSDP2", 2, "fsdp"))


def _rss_mb() -> float:
    """Peak resident memory of this process so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _current_rss_mb() -> float:
    """Resident memory now (Linux /proc; freed memory the allocator keeps still counts)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _local_bytes(tensor: torch.Tensor | None) -> int:
    if tensor is None:
        return 0
    local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
    return local.numel() * local.element_size()


def worker(args: argparse.Namespace) -> None:
    """One process of a case: train, then append this process's figures to args.report (JSON lines)."""
    from bertkit.train.accelerator import make_accelerator

    accelerator = make_accelerator("fp32", args.sharding)
    world, rank = accelerator.num_processes, accelerator.process_index
    torch.manual_seed(0)
    model = Model(ModelConfig(vocab_size=VOCAB, d_model=args.width, n_layers=args.layers,
                              n_heads=max(1, args.width // 64), d_ff=4 * args.width, max_len=SEQ,
                              positions="rotary", dropout=0.0, attention_dropout=0.0),
                  HeadsConfig(names=("mlm",))).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    ddp_model, prepared = accelerator.prepare(model, optimizer)
    batches = masked_batches(args.warmup + args.steps, args.batch_size)  # global batches
    rows = args.batch_size // world
    times = []
    for inputs, labels in batches:
        start = time.perf_counter()
        mine = slice(rank * rows, (rank + 1) * rows)
        selected = labels[mine] != IGNORE_INDEX
        logits = ddp_model(inputs[mine], mlm_select=selected).logits
        loss = torch.nn.functional.cross_entropy(logits.float(), labels[mine][selected], reduction="sum")
        accelerator.backward(loss * (world / int((labels != IGNORE_INDEX).sum())))
        accelerator.clip_grad_norm_(ddp_model.parameters(), 1.0)
        prepared.step()
        prepared.zero_grad(set_to_none=False)  # keep the gradients allocated: they count as state
        times.append(time.perf_counter() - start)
    state = sum(_local_bytes(p) + _local_bytes(p.grad) for p in model.parameters())
    state += sum(_local_bytes(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v))
    record = {"rank": rank, "world": world, "sharding": args.sharding, "state_mb": state / 2 ** 20,
              "peak_rss_mb": _rss_mb(), "end_rss_mb": _current_rss_mb(),
              "tokens_per_s": args.batch_size * SEQ / statistics.median(times[args.warmup:])}
    with open(args.report, "a", encoding="utf-8") as file:
        file.write(json.dumps(record) + "\n")


def launch(processes: int, sharding: str, args: argparse.Namespace, report: Path) -> list[dict]:
    """One case as its own launch; its processes' records."""
    report.unlink(missing_ok=True)
    threads = max(1, (os.cpu_count() or 1) // processes)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
               "--master_port", str(29400 + os.getpid() % 500), __file__, "--worker", "--sharding", sharding,
               "--report", str(report)] if processes > 1 else [sys.executable, __file__, "--worker", "--sharding",
                                                               sharding, "--report", str(report)]
    command += ["--layers", str(args.layers), "--width", str(args.width), "--batch-size", str(args.batch_size),
                "--steps", str(args.steps), "--warmup", str(args.warmup)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    return [json.loads(line) for line in report.read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=16, help="global batch (rows of SEQ tokens)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sharding", default="none", help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    print(f"machine: {describe_device(torch.device('cpu'))}; {os.cpu_count()} cores; torch {torch.__version__}")
    print(f"model: {args.layers} x {args.width}, vocab {VOCAB}, global batch {args.batch_size} x {SEQ} tokens, "
          f"fp32, {args.steps} timed steps after {args.warmup}")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, processes, sharding in CASES:
            records = launch(processes, sharding, args, Path(tmp) / "report.jsonl")
            results[name] = {key: max(r[key] for r in records) for key in ("state_mb", "end_rss_mb", "peak_rss_mb")}
            results[name]["tokens_per_s"] = statistics.mean(r["tokens_per_s"] for r in records)
    print(f"{'case':<22}{'state MB/process':>18}{'RSS MB/process at end':>23}{'peak RSS MB':>13}{'tokens/s':>11}")
    for name, r in results.items():
        print(f"{name:<22}{r['state_mb']:>18,.1f}{r['end_rss_mb']:>23,.0f}{r['peak_rss_mb']:>13,.0f}"
              f"{r['tokens_per_s']:>11,.0f}")
    one, ddp, fsdp = (results[name] for name, _, _ in CASES)
    ratio = {key: fsdp[key] / ddp[key] for key in fsdp}
    print(f"FSDP2 / DDP per process: parameter+gradient+optimizer state {ratio['state_mb']:.2f}x, RSS at end "
          f"{ratio['end_rss_mb']:.2f}x, peak RSS {ratio['peak_rss_mb']:.2f}x, tokens/s {ratio['tokens_per_s']:.2f}x")
    print(f"2 processes DDP / 1 process: tokens/s {ddp['tokens_per_s'] / one['tokens_per_s']:.2f}x")


if __name__ == "__main__":
    main()
