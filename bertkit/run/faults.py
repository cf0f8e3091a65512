"""Fault points for the reliability tests: with BERTKIT_FAULT=NAME[@N] this process kills itself (SIGKILL, as a
power cut or the OOM killer would) the Nth time (default: the first) it reaches the point NAME. Without the
variable, as always outside those tests, a point costs one environment lookup.

Points: `metrics-append` (half a metrics.jsonl line written), `commit:FILE` (a file written and fsynced under its
temporary name, not yet renamed to FILE).
"""

from __future__ import annotations

import os
import signal

_reached: dict[str, int] = {}


def fault_point(name: str) -> None:
    """Die here if BERTKIT_FAULT names this point (and this is the Nth time it is reached)."""
    spec = os.environ.get("BERTKIT_FAULT")
    if not spec:
        return
    target, _, nth = spec.partition("@")
    if target != name:
        return
    _reached[name] = _reached.get(name, 0) + 1
    if _reached[name] == int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
