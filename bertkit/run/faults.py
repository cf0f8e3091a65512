"""Fault points for the reliability tests: with BERTKIT_FAULT=NAME[@N] this process kills itself (SIGKILL, as a
power cut or the OOM killer would) the Nth time (default: the first) it reaches the point NAME. Without the
variable, as always outside those tests, a point costs one environment lookup.

Points: `metrics-append` (half a metrics.jsonl line written), `commit:FILE` (a file written and fsynced under its
temporary name, not yet renamed to FILE).

Slow points, for the time-budget tests: with BERTKIT_SLOW=NAME:SECONDS[@N] the Nth time (default: the first) this
process reaches NAME it sleeps SECONDS first, as a compilation or a GPU's warm-up would stall it. Point:
`train-step` (inside a training step's timing).
"""

from __future__ import annotations

import os
import signal
import time

_reached: dict[str, int] = {}


def _due(variable: str, name: str) -> str | None:
    """The argument of the point `name` when `variable` names it (NAME[:ARG][@N]) and this is its Nth time
    (default: the first); else None."""
    spec = os.environ.get(variable)
    if not spec:
        return None
    target, _, nth = spec.partition("@")
    target, _, argument = target.partition(":") if variable == "BERTKIT_SLOW" else (target, "", "")
    if target != name:
        return None
    key = f"{variable}:{name}"
    _reached[key] = _reached.get(key, 0) + 1
    return argument if _reached[key] == int(nth or 1) else None


def fault_point(name: str) -> None:
    """Die here if BERTKIT_FAULT names this point (and this is the Nth time it is reached)."""
    if _due("BERTKIT_FAULT", name) is not None:
        os.kill(os.getpid(), signal.SIGKILL)


def slow_point(name: str) -> None:
    """Sleep here if BERTKIT_SLOW names this point (and this is the Nth time it is reached)."""
    seconds = _due("BERTKIT_SLOW", name)
    if seconds is not None:
        time.sleep(float(seconds))
