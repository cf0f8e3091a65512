"""`bertkit` as the CI machine runs it, for the tests' subprocesses (`cli_process`, `torchrun_process`): the CPU's
native-bf16 flags hidden, so `precision = "auto"` means fp32 as on CI (AVX2), whatever CPU runs the tests. The
in-process tests get the same through conftest's `_precision_as_on_ci`.

    python tests/as_on_ci.py ARGS    # = python cli.py ARGS on a CPU without AVX512-BF16 / AMX
"""

from bertkit import hardware
from bertkit.cli import run

# This machine's CPU flags without the ones that make bf16 native.
FLAGS_AS_ON_CI = frozenset(hardware.cpu_flags() - hardware._NATIVE_BF16_FLAGS)

if __name__ == "__main__":
    hardware.cpu_flags = lambda: set(FLAGS_AS_ON_CI)
    run()
