"""`bertkit` as the CI machine runs it, for the tests' subprocesses (`cli_process`, `torchrun_process`, ...): the CPU's
native-bf16 flags hidden, so `precision = "auto"` means fp32 as on CI (AVX2), whatever CPU runs the tests. The
in-process tests get the same through conftest's `_precision_as_on_ci`.

    python tests/as_on_ci.py ARGS    # = python cli.py ARGS on a CPU without AVX512-BF16 / AMX
"""

import sys
from pathlib import Path

# Run as a script, this file puts tests/ first on sys.path: put the checkout ahead of it, so that the subprocess
# runs the same bertkit as the tests (cli.py and `-m bertkit` did), not whichever one is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bertkit import hardware  # noqa: E402

# This machine's CPU flags without the ones that make bf16 native.
FLAGS_AS_ON_CI = frozenset(hardware.cpu_flags() - hardware._NATIVE_BF16_FLAGS)

if __name__ == "__main__":
    from bertkit.cli import run

    hardware.cpu_flags = lambda: set(FLAGS_AS_ON_CI)
    run()
