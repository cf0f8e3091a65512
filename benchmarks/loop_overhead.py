"""The training loop's own cost: `bertkit pretrain`'s tokens/s against the bare MLM step's, same shape, one process.

Issue 33's goal: the CLI trains at >= 90% of the bare step's tokens/s (`benchmarks/pretrain_throughput.py`'s step:
forward on the masked positions, backward, fused AdamW, nothing else) at the same shape and precision. This script
measures both in one process:

1. a BPE tokenizer is trained on the corpus (`bertkit tokenizer train`'s job);
2. the bare step: bertkit's model of exactly the run's shape (the recipe's model with the tokenizer's vocabulary)
   on random masked batches of the run's batch size and block length, half of its steps before the pretraining and
   half after it (drift in the machine's speed hits both alike); tokens/s = tokens / seconds over the timed steps;
3. the real pretraining, in-process through `bertkit.jobs.pretrain` (what `bertkit pretrain` calls), for a fixed
   number of steps, evaluation and checkpoint only at the end; its steady-state tokens/s is read from the run's
   metrics.jsonl, skipping the first window(s) (warm-up, compilation). Two figures: the loop's own `tokens_per_s`
   (time inside its steps: batch preparation, forward, backward, clipping, optimiser) and the wall rate between the
   kept windows' `elapsed` stamps (everything the loop does between them, logging included).

Both sides are means (tokens over seconds); the medians' ratio (median window against the median bare step) is
printed too, since on a shared machine a burst of load in one phase moves the means.

It prints the machine first, then both rates and `ratio CLI/bare` (the loop's own figure; the goal is >= 0.90) and
the wall ratio. Defaults (BERT-mini, batch 32 x 128, 60 steps) take ~1-2 minutes on 2 CPU cores; `--recipe base
--device cuda` measures the BERT-base shape on a GPU. The precision is what `train.precision = "auto"` picks on
the device unless --precision says.

    python benchmarks/loop_overhead.py [--recipe mini] [--batch-size 32] [--block-size 128] [--steps 60]
        [--bare-steps 20] [--log-every 10] [--skip-windows 1] [--precision auto] [--compile] [--device cpu|cuda]
        [--corpus wikitext2/wiki.test.raw] [--vocab-size 16000] [--set train.KEY=VALUE] [--threads N] [--json FILE]
        [--profile DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (parsed before torch is imported: `--device cpu` hides a GPU from the whole process)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="mini", help="the model shape and training settings (a recipe name)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--block-size", type=int, default=128, help="tokens per row (data.block_size)")
    parser.add_argument("--steps", type=int, default=60, help="the pretraining's train.max_steps")
    parser.add_argument("--bare-steps", type=int, default=20, help="timed bare steps, half before and half after")
    parser.add_argument("--log-every", type=int, default=10, help="train.log_every: steps per metrics window")
    parser.add_argument("--skip-windows", type=int, default=1, help="first metrics windows left out (warm-up)")
    parser.add_argument("--precision", default="auto", help="train.precision: auto, fp32, bf16 or fp16")
    parser.add_argument("--compile", action="store_true", help="train.compile = on, and the bare model compiled")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: CUDA where there is one")
    parser.add_argument("--corpus", default="wikitext2/wiki.test.raw", help="a corpus file (data root relative)")
    parser.add_argument("--vocab-size", type=int, default=16000, help="the BPE tokenizer's vocabulary")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="more recipe overrides for the pretraining (its model is the bare step's too)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both (default: torch's; 1 "
                                                                  "is steadier on a CPU shared with other work)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    parser.add_argument("--work", type=Path, default=None, help="keep the tokenizer and run here (default: a "
                                                                  "temporary folder, removed at the end)")
    parser.add_argument("--quiet", action="store_true", help="hide the pretraining's own messages")
    parser.add_argument("--profile", type=Path, default=None,
                        help="then profile a few bare steps and a few of the loop's (a short second run) and write "
                             "where their time goes to this folder (step_profile.py)")
    return parser.parse_args(argv)


def steady_rates(metrics: Path, tokens_per_step: int, skip: int) -> dict[str, float]:
    """From a run's metrics.jsonl: the loop's steady tokens/s over the train windows after the first `skip` (tokens
    over the seconds inside steps), the wall tokens/s between the kept windows' `elapsed` stamps, their mean MFU."""
    records = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    windows = [r for r in records if r.get("kind") == "train"]
    if len(windows) <= skip:
        raise SystemExit(f"{metrics}: {len(windows)} train window(s), {skip} skipped as warm-up: nothing left to "
                         "measure (raise --steps or lower --log-every)")
    kept, before = windows[skip:], windows[skip - 1] if skip else {"step": 0, "elapsed": 0.0}
    steps = [w["step"] - p["step"] for p, w in zip([before, *kept[:-1]], kept)]
    tokens = [n * tokens_per_step for n in steps]
    seconds = sum(t / w["tokens_per_s"] for t, w in zip(tokens, kept))
    wall = kept[-1]["elapsed"] - before["elapsed"]
    mfu = [w["mfu"] for w in kept if "mfu" in w]
    return {"tokens_per_s": sum(tokens) / seconds, "wall_tokens_per_s": sum(tokens) / max(wall, 1e-9),
            "median_tokens_per_s": statistics.median(w["tokens_per_s"] for w in kept),
            "mfu": statistics.mean(mfu) if mfu else float("nan"), "windows": len(kept), "of_windows": len(windows),
            "steps_measured": sum(steps)}


def main(argv: list[str] | None = None) -> None:
    """Tokenizer, bare steps, the pretraining, bare steps again; print (and with --json write) the comparison."""
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # the pretraining job picks CUDA whenever it sees one
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(Path(__file__).resolve().parent))

    import torch
    from pretrain_throughput import masked_batches, mlm_step
    from rich.console import Console

    from bertkit.hardware import autocast, describe_device, resolve_precision
    from bertkit.jobs import pretrain, tokenizer
    from bertkit.nn.model import Model
    from bertkit.paths import resolve_data_path
    from bertkit.recipes import PRETRAIN_READS, load_recipe, with_values
    from bertkit.run.directory import load_config
    from bertkit.tasks.registry import PRETRAINING
    from bertkit.text.tokenizer import load_tokenizer, vocab_span

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here")
    print(describe_device(device), flush=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="bertkit-loop-overhead-"))
    console = Console(stderr=True, quiet=args.quiet)
    try:
        corpus = str(resolve_data_path(args.corpus))
        tok_dir = work / "tokenizer"
        if not (tok_dir / "tokenizer.json").is_file():
            tokenizer.run(tokenizer.TokenizerJob((corpus,), args.vocab_size, tok_dir), console=console)
        sets = [*args.sets, f"train.batch_size={args.batch_size}", f"data.block_size={args.block_size}",
                f"train.log_every={args.log_every}", f"train.eval_every={args.steps}",
                f"train.save_every={args.steps}", f"train.precision={args.precision}",
                f"train.compile={'on' if args.compile else 'off'}"]
        config = load_recipe(args.recipe, sets, PRETRAIN_READS)
        config = with_values(config, {"train.objective": "mlm", "data.corpus": (corpus,),
                                      "train.max_steps": args.steps})
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, max_time=None))  # fixed steps
        vocab = vocab_span(load_tokenizer(tok_dir))
        model_config = dataclasses.replace(config.model, vocab_size=vocab)
        heads = dataclasses.replace(config.heads,
                                    names=tuple(dict.fromkeys(PRETRAINING["mlm"].heads + config.heads.names)))
        precision = resolve_precision(args.precision, device)
        print(f"{args.recipe}: {model_config.n_layers}x{model_config.d_model} vocab {vocab:,}, batch "
              f"{args.batch_size}x{args.block_size}, precision {precision.precision} ({precision.reason}), "
              f"compile {'on' if args.compile else 'off'}", flush=True)

        torch.manual_seed(0)
        bare = Model(model_config, heads).to(device).train()
        if args.compile:
            bare.compile()
        opt = torch.optim.AdamW(bare.parameters(), lr=1e-4, fused=device.type in ("cuda", "cpu"))
        warm = 3 if args.compile else 2
        half = max(1, args.bare_steps // 2)
        batches = [(i.to(device), l.to(device))
                   for i, l in masked_batches(warm + half, args.batch_size, vocab, args.block_size)]
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        bare_times: list[float] = []

        def bare_phase(name: str, warm_steps: int) -> None:
            times = []
            for index, (inputs, labels) in enumerate(batches[:warm_steps] + batches[warm:]):  # untimed first
                sync()
                start = time.perf_counter()
                mlm_step(bare, opt, inputs, labels, autocast(device, precision.precision))
                sync()
                if index >= warm_steps:
                    times.append(time.perf_counter() - start)
            bare_times.extend(times)
            rate = len(times) * args.batch_size * args.block_size / sum(times)
            print(f"bare step ({name}): {rate:,.0f} tok/s over {len(times)} steps", flush=True)

        bare_phase("before the pretraining", warm)

        run = work / "run"
        shutil.rmtree(run, ignore_errors=True)
        start = time.perf_counter()
        result = pretrain.run(pretrain.PretrainJob(config, run, tokenizer=tok_dir, progress=False), console=console)
        job_seconds = time.perf_counter() - start
        bare_phase("after the pretraining", 1)

        stored = load_config(run)
        if stored.model != model_config or stored.heads != heads:
            raise SystemExit(f"the run's model differs from the bare step's: {stored.model} / {stored.heads} vs "
                             f"{model_config} / {heads}")
        if result.precision != precision.precision:
            raise SystemExit(f"the run trained at {result.precision}, the bare step at {precision.precision}")
        tokens_per_step = args.batch_size * args.block_size
        loop = steady_rates(run / "metrics.jsonl", tokens_per_step, args.skip_windows)
        bare_rate = len(bare_times) * tokens_per_step / sum(bare_times)
        bare_median = tokens_per_step / statistics.median(bare_times)
        ratio, wall_ratio = loop["tokens_per_s"] / bare_rate, loop["wall_tokens_per_s"] / bare_rate
        median_ratio = loop["median_tokens_per_s"] / bare_median
        print(f"bare step: {bare_rate:,.0f} tok/s ({len(bare_times)} steps; {bare_median:,.0f} at the median step)")
        print(f"bertkit pretrain: {loop['tokens_per_s']:,.0f} tok/s (its metrics: time inside steps), "
              f"{loop['wall_tokens_per_s']:,.0f} tok/s wall, MFU {loop['mfu']:.1%}; {result.step} steps in "
              f"{job_seconds:.0f} s (tokenizer and data preparation included), windows {loop['windows']} of "
              f"{loop['of_windows']} ({args.skip_windows} skipped as warm-up)")
        print(f"ratio CLI/bare {ratio:.2f} (goal >= 0.90), wall/bare {wall_ratio:.2f}, medians {median_ratio:.2f} "
              "(median window / median bare step: a busy machine moves the means more)", flush=True)
        if args.json is not None:
            args.json.write_text(json.dumps({
                "device": describe_device(device), "recipe": args.recipe, "layers": model_config.n_layers,
                "width": model_config.d_model, "vocab": vocab, "batch_size": args.batch_size,
                "block_size": args.block_size, "precision": precision.precision, "compile": args.compile,
                "bare_tokens_per_s": bare_rate, "cli_tokens_per_s": loop["tokens_per_s"],
                "cli_wall_tokens_per_s": loop["wall_tokens_per_s"], "cli_mfu": loop["mfu"], "ratio": ratio,
                "wall_ratio": wall_ratio, "median_ratio": median_ratio, "steps": result.step,
                "windows": loop["windows"]}, indent=2) + "\n")
        if args.profile is not None:
            profile_both(args.profile, lambda i: mlm_step(bare, opt, *batches[warm + i % half],
                                                           autocast(device, precision.precision)),
                         lambda run_config, out: pretrain.run(pretrain.PretrainJob(run_config, out, tokenizer=tok_dir,
                                                                                   progress=False), console=console),
                         with_values(config, {"train.max_steps": PROFILE_FIRST + PROFILE_STEPS + 2}), work, device)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


PROFILE_FIRST, PROFILE_STEPS = 20, 8  # the loop's profiled steps: after its warm-up, before its end


def profile_both(out: Path, bare_step, pretrain_run, short_config, work: Path, device) -> None:
    """`--profile`: PROFILE_STEPS bare steps, then as many of a short second pretraining's (from its step
    PROFILE_FIRST), each summarised (step_profile.summary) into OUT/profile.txt, traces beside it."""
    import torch
    from step_profile import activities, profile, profile_loop_steps, summary, write_trace

    out.mkdir(parents=True, exist_ok=True)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    texts = []
    with profile(activities=activities(device)) as prof:
        sync()
        start = time.perf_counter()
        for i in range(PROFILE_STEPS):
            bare_step(i)
        sync()
        wall = time.perf_counter() - start
    texts.append(summary(prof, PROFILE_STEPS, wall, "bare step"))
    write_trace(prof, out / "bare.json.gz")
    run = work / "profile-run"
    shutil.rmtree(run, ignore_errors=True)
    with profile_loop_steps(PROFILE_FIRST, PROFILE_STEPS, device, sync) as found:
        pretrain_run(short_config, run)
    if "prof" in found:
        texts.append(summary(found["prof"], PROFILE_STEPS, found["wall_s"], "bertkit pretrain's loop"))
        write_trace(found["prof"], out / "loop.json.gz")
    (out / "profile.txt").write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    print("\n".join(text.splitlines()[0] for text in texts), flush=True)
    print(f"profiles: {out / 'profile.txt'}", flush=True)


if __name__ == "__main__":
    main()
