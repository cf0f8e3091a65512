"""MLM pretraining throughput: bertkit vs transformers.BertForMaskedLM, same config, same batches, one run.

Each case builds both models with the same shape (post-norm BERT, GELU, learned positions, vocab 16k, rows of 128
tokens unless --seq-len says otherwise), feeds them identical masked batches (15%, 80/10/10), and times full training
steps (forward, backward, AdamW) alternating ours and HF's step by step, so drift in the machine's speed hits both
alike. Prints one line per case ending in `ratio X.XX` (bertkit tokens/s ÷ HF tokens/s), bertkit's model TFLOP/s
and MFU (`bertkit.nn.flops` against `bertkit.hardware.peak_flops`: a GPU's datasheet, or the best measured GEMM at
that precision on this CPU), and the peak RSS of the process. The first line names the machine, the second the
precisions and why.

The default precision is what `train.precision = "auto"` picks on the device (`bertkit.hardware.resolve_precision`:
bf16 on recent GPUs and on CPUs with native bf16, fp32 elsewhere: an AVX2-only CPU emulates bf16, ~40x slower).
`--compile` trains bertkit's model through `Module.compile()` (what `train.compile = "on"` does; HF's stays eager)
and also prints the compilation's one-off cost: the warm-up steps' time beyond what they take once compiled.

Levers (issue 33), each off by default so that a row says what it turned on:
  --select bool|positions|bucket  how the MLM head finds the masked tokens: a boolean mask on the device (the
      device must count them: a host round-trip, and a graph break under compile), their flat positions counted
      on the host (what `bertkit pretrain` does), or those positions padded to a multiple of 128 with ignored
      targets (a handful of static shapes: no dynamic-shape code, and CUDA graphs can record each)
  --compile-mode MODE              torch.compile's mode (reduce-overhead: CUDA graphs; max-autotune-no-cudagraphs)
  --fuse-qkv / --no-fuse-qkv       one q/k/v matrix product in training, or three (bertkit.nn.attention.FUSE_QKV;
                                   by default one on a GPU, three on a CPU, as bertkit trains)
  --vocab N[,N]                    the vocabulary (16000 = 250 x 64; BERT's 30522 is not a multiple of 64)
  --dropout P[,P]                  hidden and attention dropout, both models (BERT's 0.1; bertkit's budget recipes
                                   pretrain with 0, as Cramming does: a fraction of an epoch does not overfit)
  --norm fp32|autocast[,...]       bertkit's LayerNorms as autocast runs them (fp32 in, fp32 out: the residual
                                   stream between them is fp32), or in autocast's dtype (bf16 in and out, statistics
                                   still fp32 inside the kernel: a bf16 residual stream, half the bytes of the
                                   memory-bound LayerNorm and residual kernels; not in bertkit's model, a lever)
  --inductor-config KEY=VALUE[,...][;...]  torch._inductor.config settings for bertkit's compiled model (names as
                                   in torch, dotted for sub-configs; values Python literals, tuples too), e.g.
                                   coordinate_descent_tuning=True: each pointwise and reduction kernel's block
                                   sizes tuned by measurement (what the max-autotune modes add beside their Triton
                                   GEMMs; minutes more to compile). Sets separated by ';' run one case each, in one
                                   process ('none': inductor's defaults), so a setting is compared without the
                                   drift between processes
  --no-peer                        bertkit alone (a lever row compares with the baseline row of the same call)
A comma list of vocabularies, dropouts or norms (a ';' list of inductor settings) runs one case per value, in one
process (the later cases reuse the compile caches of the earlier ones: their compile cost reads lower).
`--profile DIR` then profiles a few of bertkit's steps per case: device kernel time by kind (matrix products,
attention, fused elementwise, optimiser, loss, other) against the wall time, one line each; the full operator
tables go to DIR. Where transformers' model runs out of device memory at a batch, its line says so and bertkit's
figures stand.

    python benchmarks/pretrain_throughput.py [--steps 20] [--batch-size 32] [--seq-len 128] [--cases 4x256,4x512]
                                             [--precisions fp32,bf16] [--device cpu|cuda] [--compile]
                                             [--compile-mode MODE] [--select bool|positions|bucket] [--fuse-qkv]
                                             [--vocab 16000] [--dropout 0.1] [--norm fp32]
                                             [--inductor-config 'none;KEY=VALUE'] [--no-peer]
                                             [--profile DIR]
    LD_PRELOAD=libtcmalloc_minimal.so.4 python benchmarks/pretrain_throughput.py   # steadier CPU timings
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import itertools
import os
import re
import resource
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from bertkit.config import HeadsConfig, ModelConfig  # noqa: E402
from bertkit.hardware import describe_device, peak_flops, resolve_precision  # noqa: E402
from bertkit.nn import attention  # noqa: E402
from bertkit.nn.flops import train_flops  # noqa: E402
from bertkit.nn.model import Model  # noqa: E402
from bertkit.text.collate import IGNORE_INDEX, masked_positions, mlm_mask, step_generator  # noqa: E402

VOCAB, SEQ = 16000, 128
BUCKET = 128  # --select bucket: masked-token counts rounded up to a multiple of this


def _models(layers: int, width: int, device: str, vocab: int = VOCAB, dropout: float = 0.1, peer: bool = True):
    """bertkit's MLM model and (with `peer`) transformers' BertForMaskedLM of the same shape; without the peer
    transformers is not even imported (~3 s a process on 2 CPU cores) and its weights take no device memory."""
    heads = width // 64
    ours = Model(ModelConfig(vocab_size=vocab, d_model=width, n_layers=layers, n_heads=heads, d_ff=4 * width,
                             max_len=512, dropout=dropout, attention_dropout=dropout),
                 HeadsConfig(names=("mlm",))).to(device).train()
    if not peer:
        return ours, None
    from transformers import BertConfig, BertForMaskedLM

    hf = BertForMaskedLM(BertConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers,
                                    num_attention_heads=heads, intermediate_size=4 * width,
                                    hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                                    attn_implementation="sdpa")).to(device).train()
    return ours, hf


def masked_batches(n: int, batch_size: int, vocab: int = VOCAB, seq: int = SEQ,
                   ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """n random MLM batches (15% masks, 80/10/10) of (batch_size, seq) over ids 5..vocab-1 (0-4 are bertkit's
    special tokens, [CLS] = 2 first), each a pure function of its index."""
    out = []
    for step in range(n):
        g = step_generator(0, step)
        ids = torch.randint(5, vocab, (batch_size, seq), generator=g)
        ids[:, 0] = 2
        out.append(mlm_mask(ids, (0, 1, 2, 3, 4), 4, vocab, 0.15, g))
    return out


def mlm_step(model, opt, inputs, labels, cast=contextlib.nullcontext()):
    """One bertkit MLM training step: forward (under `cast`) on the masked positions only, backward, optimiser step."""
    selected = labels != IGNORE_INDEX
    with cast:
        logits = model(inputs, mlm_select=selected).logits
        loss = torch.nn.functional.cross_entropy(logits.float(), labels[selected])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def positions_step(model, opt, inputs, selection, cast=contextlib.nullcontext(), dynamic: bool = True):
    """`mlm_step` with the selection counted on the host as `bertkit pretrain` does
    (`bertkit.text.collate.masked_positions`): (positions, targets) on the device."""
    positions, targets = selection
    if dynamic:  # one compiled graph for every count, as bertkit's MLM objective marks them
        torch._dynamo.maybe_mark_dynamic(positions, 0)
        torch._dynamo.maybe_mark_dynamic(targets, 0)
    with cast:
        logits = model(inputs, mlm_select=positions).logits
        loss = torch.nn.functional.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _hf_step(model, opt, inputs, labels):
    model(input_ids=inputs, labels=labels).loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


@dataclasses.dataclass(frozen=True)
class Levers:
    """What a case turns on beyond the eager baseline (see the module docstring)."""

    compile_backend: str | None = None  # None: eager
    compile_mode: str | None = None
    select: str = "bool"  # bool | positions | bucket
    fuse_qkv: bool | None = None  # None: bertkit's default on the device (one product on a GPU, three on a CPU)
    vocab: int = VOCAB
    peer: bool = True
    dropout: float = 0.1  # BERT's, hidden and attention alike
    norm: str = "fp32"  # fp32 | autocast (AutocastLayerNorm)
    inductor: tuple[tuple[str, object], ...] = ()  # torch._inductor.config settings while compiling

    def label(self) -> str:
        """bertkit's name in the result line: what it ran with."""
        parts = [] if self.compile_backend is None else [f"compiled ({self.compile_backend}"
                                                           + (f", {self.compile_mode})" if self.compile_mode else ")")]
        parts += [f"select {self.select}"] if self.select != "bool" else []
        parts += ["fused qkv"] if self.fuse_qkv else []
        parts += [f"dropout {self.dropout:g}"] if self.dropout != 0.1 else []
        parts += ["norms in autocast's dtype"] if self.norm == "autocast" else []
        parts += [f"inductor {key}={value!r}" for key, value in self.inductor]
        return "bertkit" + (" " + ", ".join(parts) if parts else "")


class AutocastLayerNorm(nn.LayerNorm):
    """LayerNorm in autocast's dtype: under bf16 autocast, bf16 in and out (the kernel keeps its statistics in fp32),
    so a post-norm model's residual stream is bf16, not fp32; outside autocast, nn.LayerNorm exactly."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., D) -> (..., D)"""
        kind = x.device.type
        if not torch.is_autocast_enabled(kind):
            return super().forward(x)
        dtype = torch.get_autocast_dtype(kind)
        weight = None if self.weight is None else self.weight.to(dtype)
        bias = None if self.bias is None else self.bias.to(dtype)
        with torch.autocast(kind, enabled=False):
            return F.layer_norm(x.to(dtype), self.normalized_shape, weight, bias, self.eps)


def autocast_norms(model: nn.Module) -> int:
    """Every nn.LayerNorm of `model` made an AutocastLayerNorm in place (same parameters); how many."""
    norms = [m for m in model.modules() if type(m) is nn.LayerNorm]
    for module in norms:
        module.__class__ = AutocastLayerNorm
    return len(norms)


def inductor_settings(text: str) -> tuple[tuple[str, object], ...]:
    """'KEY=VALUE[,KEY=VALUE]' as (name, value) pairs: each name one of torch._inductor.config's (dotted for its
    sub-configs, e.g. triton.cudagraphs), each value a Python literal; ValueError naming what is wrong."""
    import torch._inductor.config as inductor

    if text.strip().lower() == "none":
        return ()
    known = inductor.get_config_copy()  # every setting by the (dotted) name inductor.patch takes
    pairs = []
    # split at the commas that start the next KEY=, so a value may be a tuple or list: a=(1, 2),b=3
    for item in filter(None, (part.strip() for part in re.split(r",(?=\s*[A-Za-z_][\w.]*\s*=)", text))):
        key, sep, raw = (part.strip() for part in item.partition("="))
        if not sep:
            raise ValueError(f"{item!r} is not KEY=VALUE")
        if key not in known:
            raise ValueError(f"{key!r} is not a setting of torch._inductor.config")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            raise ValueError(f"{key}: {raw!r} is not a Python literal (True, 4, 'name')") from None
        pairs.append((key, value))
    return tuple(pairs)


def run_case(layers: int, width: int, precision: str, steps: int, batch_size: int, device: str,
             levers: Levers = Levers(), warm: int = 2, profile_dir: Path | None = None, seq: int = SEQ) -> str:
    """One shape at one precision: bertkit's step (with `levers`) and HF's (unless `levers.peer` is off) on
    (batch_size, seq) batches, alternated for `warm` untimed and `steps` timed steps; the result line (and with
    `profile_dir`, a profile of bertkit's step after it). `levers.fuse_qkv` None: what bertkit does on `device`
    (one product on a GPU)."""
    if levers.fuse_qkv is None:
        default = attention.FUSE_QKV if attention.FUSE_QKV is not None else device.startswith("cuda")
        levers = dataclasses.replace(levers, fuse_qkv=default)
    default_qkv, attention.FUSE_QKV = attention.FUSE_QKV, levers.fuse_qkv
    # inductor's settings patched for the whole case: compilation happens lazily, in the first (untimed) steps
    patched = contextlib.nullcontext()
    if levers.inductor:
        import torch._inductor.config as inductor

        patched = inductor.patch(dict(levers.inductor))
    try:
        with patched:
            return _timed_case(layers, width, precision, steps, batch_size, device, levers, warm, profile_dir, seq)
    finally:
        attention.FUSE_QKV = default_qkv


def _timed_case(layers: int, width: int, precision: str, steps: int, batch_size: int, device: str,
                levers: Levers, warm: int, profile_dir: Path | None, seq: int) -> str:
    """`run_case` with q/k/v set as `levers.fuse_qkv` says."""
    torch.manual_seed(0)
    ours, hf = _models(layers, width, device, levers.vocab, levers.dropout, levers.peer)
    if levers.norm == "autocast":
        autocast_norms(ours)
    if levers.compile_backend is not None:
        # dynamo's cache is per code object (Model.forward): a fresh model of the same shape passes every guard of
        # the case before, so without a reset a case differing only in inductor's settings (lever-tuning) re-ran the
        # earlier case's graph and compiled nothing ("compile 0.0 s"). The on-disk FX cache survives the reset
        torch._dynamo.reset()
        ours.compile(backend=levers.compile_backend, mode=levers.compile_mode)
    opts = {name: torch.optim.AdamW(m.parameters(), lr=1e-4, fused=True)
            for name, m in (("ours", ours), ("hf", hf)) if m is not None}
    host = masked_batches(steps + warm, batch_size, levers.vocab, seq)
    batches = [(i.to(device), l.to(device)) for i, l in host]
    bucket = BUCKET if levers.select == "bucket" else 0
    selections = [tuple(t.to(device) for t in masked_positions(labels, bucket)) for _, labels in host]
    autocast = (torch.autocast(device, dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext())
    times: dict[str, list[float]] = {"ours": [], "hf": []}
    first: list[float] = []  # bertkit's warm-up steps (with a compile: the compilation, recompilations included)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def ours_step(index: int, inputs: torch.Tensor, labels: torch.Tensor) -> None:
        if levers.select == "bool":
            mlm_step(ours, opts["ours"], inputs, labels)
        else:
            positions_step(ours, opts["ours"], inputs, selections[index], dynamic=levers.select == "positions")

    hf_oom = False  # transformers' model did not fit at this batch: bertkit's figures stand alone
    for index, (inputs, labels) in enumerate(batches):
        for name in ("ours", "hf") if levers.peer and not hf_oom else ("ours",):
            sync()
            start = time.perf_counter()
            with autocast:
                if name == "ours":
                    ours_step(index, inputs, labels)
                else:
                    try:
                        _hf_step(hf, opts["hf"], inputs, labels)
                    except torch.OutOfMemoryError:
                        hf_oom = True
            if hf_oom and hf is not None:  # its weights, states and failed step freed (the error is gone) for ours
                hf, opts["hf"] = None, None
                torch.cuda.empty_cache()
                continue
            sync()
            if index >= warm:  # the first steps warm up allocators and kernels (and compile)
                times[name].append(time.perf_counter() - start)
            elif name == "ours":
                first.append(time.perf_counter() - start)
    profile_text = "" if profile_dir is None else \
        _profile(profile_dir, levers, f"{layers}x{width} v{levers.vocab} b{batch_size} {precision}",
                 lambda i: ours_step(warm + i % steps, *batches[warm + i % steps]), autocast, sync,
                 torch.device(device))
    tokens = batch_size * seq
    ours_tps = tokens / statistics.median(times["ours"])
    params = sum(p.numel() for p in ours.parameters()) / 1e6
    # model FLOPs of the task (the MLM head on masked positions only, as bertkit computes it), per token
    masked = statistics.mean(int((labels != IGNORE_INDEX).sum()) for _, labels in batches)
    per_token = train_flops(ours.config, "mlm", batch_size, seq, masked=round(masked)) / tokens
    peak = peak_flops(torch.device(device), precision)
    achieved = ours_tps * per_token
    cost = "" if levers.compile_backend is None else \
        f"; compile cost {max(0.0, sum(first) - warm * tokens / ours_tps):.1f} s (first {warm} steps)"
    if hf_oom:
        peer = "transformers out of device memory at this batch"
    elif levers.peer:
        hf_tps = tokens / statistics.median(times["hf"])
        peer = f"transformers {hf_tps:,.0f} tok/s, ratio {ours_tps / hf_tps:.2f}"
    else:
        peer = "transformers not run (--no-peer)"
    vocab = "" if levers.vocab == VOCAB else f" vocab {levers.vocab}"
    return (f"{layers}x{width} ({params:.1f}M){vocab} {precision} batch {batch_size}x{seq} {device}: "
            f"{levers.label()} {ours_tps:,.0f} tok/s, {peer}; "
            f"bertkit {per_token / 1e6:.1f} MFLOP/token = {achieved / 1e12:.3g} TFLOP/s, "
            f"MFU {achieved / peak.flops:.0%} of {peak.flops / 1e12:.3g} TFLOP/s ({peak.source.split(' on ')[0]})"
            f"{cost}{profile_text}")


PROFILE_STEPS = 4


def _profile(out: Path, levers: Levers, case: str, step, autocast, sync, device: torch.device) -> str:
    """PROFILE_STEPS more of bertkit's steps under torch.profiler: the kernel time by kind, as a line to append
    to the result; the operator tables into OUT/CASE-LEVERS.txt."""
    from step_profile import activities, kinds_line, profile, summary

    out.mkdir(parents=True, exist_ok=True)
    with profile(activities=activities(device)) as prof:
        sync()
        start = time.perf_counter()
        with autocast:
            for i in range(PROFILE_STEPS):
                step(i)
        sync()
        wall = time.perf_counter() - start
    title = f"{case} {levers.label()}"
    name = "-".join("".join(c for c in word if c.isalnum() or c == ".") for word in title.split())
    (out / f"{name}.txt").write_text(summary(prof, PROFILE_STEPS, wall, title) + "\n", encoding="utf-8")
    return "\n  profile: " + kinds_line(prof, PROFILE_STEPS, wall)


def main() -> None:
    """Every case at every precision (default: what auto picks here), one line each, then the peak RSS."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--cases", default="4x256,4x512")
    parser.add_argument("--precisions", default=None,
                        help="comma-separated, e.g. fp32,bf16 (default: what train.precision = auto picks here)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile", action="store_true", help="train bertkit's model through Module.compile()")
    parser.add_argument("--compile-backend", default="inductor",
                        help="torch.compile backend with --compile (aot_eager: the plumbing without codegen)")
    parser.add_argument("--compile-mode", default=None,
                        help="torch.compile mode with --compile (reduce-overhead: CUDA graphs)")
    parser.add_argument("--select", choices=("bool", "positions", "bucket"), default="bool",
                        help="how the MLM head finds the masked tokens (see the module docstring)")
    qkv = parser.add_mutually_exclusive_group()
    qkv.add_argument("--fuse-qkv", action="store_true", default=None,
                     help="one q/k/v matrix product in training (bertkit's default on a GPU)")
    qkv.add_argument("--no-fuse-qkv", dest="fuse_qkv", action="store_false",
                     help="three q/k/v matrix products in training (bertkit's default on a CPU)")
    parser.add_argument("--vocab", default=str(VOCAB),
                        help="the vocabulary size, or a comma list: one case each (default 16000)")
    parser.add_argument("--dropout", default="0.1",
                        help="hidden and attention dropout of both models, or a comma list: one case each "
                             "(default 0.1, BERT's)")
    parser.add_argument("--norm", default="fp32",
                        help="bertkit's LayerNorms in fp32 (as autocast runs them) or 'autocast' (in autocast's "
                             "dtype: a bf16 residual stream), or a comma list: one case each")
    parser.add_argument("--inductor-config", default="none", metavar="KEY=VALUE[,...][;...]",
                        help="torch._inductor.config settings while bertkit's model compiles (with --compile); "
                             "';' separates sets, each its own case ('none': the defaults)")
    parser.add_argument("--profile", type=Path, default=None,
                        help="then profile a few of bertkit's steps per case: kernel time by kind, tables to DIR")
    parser.add_argument("--no-peer", action="store_true", help="do not run transformers' model")
    parser.add_argument("--seq-len", type=int, default=SEQ,
                        help=f"tokens per row (default {SEQ}, BERT's first pretraining phase; at most 512)")
    parser.add_argument("--warm", type=int, default=None, help="untimed first steps (default 2; 3 with --compile)")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"{describe_device(device)}, LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r}", flush=True)
    if args.precisions is None:
        choice = resolve_precision("auto", device)
        precisions, why = [choice.precision], choice.reason
    else:
        precisions, why = args.precisions.split(","), "as given (--precisions)"
    print(f"precision {','.join(precisions)} ({why}); bertkit "
          + (f"compiled ({args.compile_backend})" if args.compile else "eager"), flush=True)
    if not 2 <= args.seq_len <= 512:
        parser.error(f"--seq-len: 2 to 512 (the models' position tables), not {args.seq_len}")
    warm = args.warm if args.warm is not None else (3 if args.compile else 2)
    norms = args.norm.split(",")
    if not set(norms) <= {"fp32", "autocast"}:
        parser.error(f"--norm: fp32 or autocast, not {args.norm!r}")
    try:
        inductor_sets = [inductor_settings(part) for part in args.inductor_config.split(";")]
    except ValueError as error:
        parser.error(f"--inductor-config: {error}")
    if any(inductor_sets) and not args.compile:
        parser.error("--inductor-config configures compilation: it needs --compile")
    for case in args.cases.split(","):
        layers, width = (int(x) for x in case.split("x"))
        for precision in precisions:
            for vocab in (int(v) for v in args.vocab.split(",")):
                for dropout, norm, inductor in itertools.product([float(p) for p in args.dropout.split(",")],
                                                                 norms, inductor_sets):
                    levers = Levers(args.compile_backend if args.compile else None,
                                    args.compile_mode if args.compile else None, args.select,
                                    args.fuse_qkv, vocab, not args.no_peer, dropout, norm, inductor)
                    print(run_case(layers, width, precision, args.steps, args.batch_size, args.device, levers,
                                   warm, args.profile, args.seq_len), flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:,.0f} MB")


if __name__ == "__main__":
    main()
