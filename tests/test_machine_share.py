"""tests/machine_share.py, the lock that gives a test marked `alone` the machine under pytest-xdist: it waits for
the running tests, and holds back the ones that arrive while it waits."""

import fcntl
import threading
import time

from machine_share import machine_share


def _turnstile_taken(folder) -> bool:
    with open(folder / "turnstile.lock", "a") as turnstile:
        try:
            fcntl.flock(turnstile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        return False


def _until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_an_alone_test_waits_for_the_running_test_and_holds_back_the_next(tmp_path):
    """Three test bodies as threads (flocks taken through separate opens exclude each other within one process too):
    `a` runs; `alone` arrives and waits for it; `b` arrives after `alone` and waits for it, although `a`'s shared
    hold would have let it in at once."""
    events, a_may_end = [], threading.Event()

    def body(name: str, alone: bool, until: threading.Event | None = None) -> None:
        with machine_share(tmp_path, alone):
            events.append(f"{name} in")
            if until is not None:
                until.wait(10)
            events.append(f"{name} out")

    a = threading.Thread(target=body, args=("a", False, a_may_end))
    a.start()
    _until(lambda: "a in" in events)
    lone = threading.Thread(target=body, args=("alone", True))
    lone.start()
    _until(lambda: _turnstile_taken(tmp_path))  # it waits for the machine, keeping the turnstile
    b = threading.Thread(target=body, args=("b", False))
    b.start()
    time.sleep(0.2)
    assert events == ["a in"]  # neither got in while `a` runs: `b` waits behind `alone`
    a_may_end.set()
    for thread in (a, lone, b):
        thread.join(10)
    assert events == ["a in", "a out", "alone in", "alone out", "b in", "b out"]


def test_ordinary_tests_share_the_machine(tmp_path):
    inside = []

    def other() -> None:
        with machine_share(tmp_path, alone=False):
            inside.append("other")

    with machine_share(tmp_path, alone=False):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(5)
        assert inside == ["other"]  # it got in while this one holds the machine
