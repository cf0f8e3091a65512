"""The machine as a read/write lock between the test processes of one pytest-xdist run (tests/conftest.py's
`_machine_share`): an ordinary test shares the machine, a test marked `alone` (one that judges what a wall-clock
budget bought) holds it alone, so the other worker waits between its tests."""

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def machine_share(folder: Path, alone: bool) -> Iterator[None]:
    """Hold the machine, shared or (`alone`) exclusively, for the block. Two flocks in `folder`, which every process
    of the run sees: a test first takes the turnstile, then the machine, then lets go of the turnstile. A test that
    waits for the machine keeps the turnstile meanwhile, so that no new test starts before it (writer preference:
    the other worker's back-to-back tests cannot starve an `alone` one)."""
    with open(folder / "turnstile.lock", "a") as turnstile, open(folder / "machine.lock", "a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)
