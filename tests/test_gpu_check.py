"""`bash benchmarks/gpu_check.sh --smoke`: the GPU check's every step at tiny sizes on the CPU, so that the script a
CUDA machine runs once cannot rot between the sessions that have one."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bertkit.errors import BertkitError
from bertkit.paths import find_dataset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_check import ROWS  # noqa: E402


@pytest.mark.slow
@pytest.mark.data
def test_the_smoke_run_fills_every_row_of_the_table_and_nothing_fails(tmp_path):
    try:
        for name in ("wikitext2", "stsb", "sst2", "imdb"):
            find_dataset(name)
    except BertkitError:
        pytest.skip("the --smoke data root is cut from ../shared/data, which is not here")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHON": sys.executable, "OUT": str(tmp_path / "out"),
           "TMPDIR": str(tmp_path)}
    env.pop("BERTKIT_DATA", None)
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--smoke"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, check=False)
    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| check | status |"), done.stdout + done.stderr
    for label, _ in ROWS:
        assert any(line.startswith(f"| {label} |") for line in table), f"no row {label!r}:\n{done.stdout}"
    rows = json.loads((tmp_path / "out" / "gpu_check.json").read_text())["rows"]
    assert [r["row"] for r in rows] == [label for label, _ in ROWS]
    bad = [r for r in rows if r["status"] != "OK"]
    assert not bad, "\n".join(f"{r['row']}: {r['status']}: {r['result']}" for r in bad) + "\n" + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert {"gpu_check.md", "gpu_check.json", "gpu_check.log"} <= {p.name for p in (tmp_path / "out").iterdir()}
