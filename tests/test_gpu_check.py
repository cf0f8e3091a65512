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
from gpu_check import ROWS, THROUGHPUT, break_even  # noqa: E402


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


def test_break_even_is_the_compile_cost_over_the_time_each_compiled_step_saves():
    # the H200 line of 2026-11-27: 128 x 128 tokens a step, eager 418,573 tok/s, compiled 504,363 after 34.5 s
    line = ("12x768 (110.1M) bf16 batch 128x128 cuda: bertkit compiled (inductor) 504,363 tok/s, transformers "
            "405,005 tok/s, ratio 1.25; bertkit 570.2 MFLOP/token = 288 TFLOP/s, MFU 27% of 989 TFLOP/s "
            "(datasheet: NVIDIA H200 bf16); compile cost 34.5 s (first 3 steps)")
    match = THROUGHPUT.search(line)
    saved = 16384 / 418_573 - 16384 / 504_363  # s per step
    steps = 34.5 / saved
    assert break_even(match, 418_573) == f"; break-even {steps:,.0f} steps ({steps * 16384 / 418_573:.0f} s eager)"
    assert "5,182 steps (203 s" in break_even(match, 418_573)
    assert break_even(match, 600_000) == ""  # compiled slower than eager: it never pays
    assert break_even(match, None) == ""
