"""Kill campaign: `kill -9` a tiny pretraining at random moments (and at the fault points: mid metrics line, before
results.json, mid checkpoint commit), resume each, and count what went wrong against one uninterrupted run.

    python benchmarks/kill_resume.py --kills 20 --out runs/kill-campaign

Prints one row per kill (when, the checkpoint it resumed from, whether every logged loss and the final results equal
the straight run's) and the totals: corrupt checkpoints, failed resumes, inexact resumes, leftovers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from conftest import repeated_corpus  # noqa: E402  (the bundled sample corpus, numbered copies)

ARGS = ["--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set", "batch_size=4",
        "--set", "min_frequency=1", "--set", "log_every=2", "--set", "eval_every=20", "--set", "save_every=10",
        "--set", "keep_checkpoints=2", "--no-progress", "--max-steps", "80"]
FAULTS = ["metrics-append@5", "metrics-append@17", "commit:results.json", "commit:model.safetensors",
          "commit:latest", "commit:state.json"]


def bertkit(*args, env=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertkit", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}, **kw)


def curve(run: Path) -> list:
    from bertkit.run.metrics import read_metrics

    return [(r["step"], r["kind"], r.get("loss"), r.get("val_loss")) for r in read_metrics(run)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20, help="random-moment kills (plus one per fault point)")
    parser.add_argument("--out", type=Path, default=Path("runs/kill-campaign"))
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    shutil.rmtree(opts.out, ignore_errors=True)
    opts.out.mkdir(parents=True)
    os.environ["BERTKIT_CACHE"] = str(opts.out / "cache")
    corpus = repeated_corpus(opts.out / "corpus.txt", 20)
    args = [*ARGS, "--corpus", corpus]
    started = time.perf_counter()
    assert bertkit("pretrain", *args, "--out", opts.out / "straight").returncode == 0
    straight_seconds = time.perf_counter() - started
    reference = curve(opts.out / "straight")
    results = json.loads((opts.out / "straight" / "results.json").read_text())
    rng = random.Random(opts.seed)
    plan = [("random", rng.uniform(0.3, 1.05) * straight_seconds) for _ in range(opts.kills)] + \
        [("fault", f) for f in FAULTS]
    totals = {"kills": 0, "failed resumes": 0, "inexact": 0, "leftovers": 0, "killed after the end": 0}
    print(f"straight run: {straight_seconds:.1f} s, {len(reference)} metrics lines")
    for i, (kind, when) in enumerate(plan):
        run = opts.out / f"killed-{i}"
        if kind == "random":
            proc = subprocess.Popen([sys.executable, "-m", "bertkit", "pretrain", *map(str, args), "--out", str(run)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(when)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            label = f"random at {when:5.1f} s"
        else:
            bertkit("pretrain", *args, "--out", run, env={"BERTKIT_FAULT": when})
            label = f"fault {when}"
        totals["kills"] += 1
        finished = (run / "results.json").is_file()
        totals["killed after the end"] += finished
        latest = (run / "checkpoints" / "latest").read_text() if (run / "checkpoints" / "latest").is_file() \
            else "none"
        resumed = bertkit("pretrain", *args, "--out", run, "--resume") if (run / "config.json").is_file() \
            else bertkit("pretrain", *args, "--out", run)  # killed before the run existed: start again
        ok = resumed.returncode == 0
        exact = ok and curve(run) == reference and json.loads((run / "results.json").read_text()) == results
        left = [p.name for p in run.rglob("*") if ".tmp" in p.name or ".old-" in p.name]
        totals["failed resumes"] += not ok
        totals["inexact"] += ok and not exact
        totals["leftovers"] += bool(left)
        error = next((line for line in resumed.stderr.splitlines() if line.startswith("error:")), "")
        print(f"{i:3d} {label:34s} latest {latest:8s} {'finished' if finished else 'running ':8s} "
              f"resume {'ok' if ok else 'FAILED'} {'exact' if exact else 'INEXACT'} {error}"
              + (f" left {left}" if left else ""), flush=True)
    print("totals: " + ", ".join(f"{k} {v}" for k, v in totals.items()))


if __name__ == "__main__":
    main()
