"""Ctrl-C during training: the step in progress finishes, a checkpoint of it is written and the run stops with a
line saying how to go on (`--resume` then continues exactly); a second Ctrl-C stops at once, losing the steps since
the last checkpoint, as every Ctrl-C did before 2026-11-28 (with the default save_every of 500 or 200 steps, often
the whole run). One process only: the processes of a distributed run would have to agree on the step to stop at,
a collective every step; there Ctrl-C stops at once, as before."""

from __future__ import annotations

import signal
import threading


class Interrupt:
    """A context that turns the first SIGINT into `requested` (checked by the loop after each step) and lets a
    second one raise KeyboardInterrupt where it lands. Does nothing where `enabled` is false, off the main thread
    (where signal handlers cannot be set), or where SIGINT is not Python's default: a caller that ignores it (a
    script's `bertkit pretrain … &`) or handles it its own way keeps that (a review, 2026-11-28)."""

    def __init__(self, enabled: bool):
        self.requested = False
        self.enabled = enabled and threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is signal.default_int_handler
        self._previous = None

    def __enter__(self) -> Interrupt:
        if self.enabled:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self.enabled and not self.requested:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum, frame) -> None:
        # a flag only: the loop writes the checkpoint between steps, where the state is whole
        self.requested = True
        signal.signal(signal.SIGINT, self._previous)  # a second Ctrl-C: the default, at once


__all__ = ["Interrupt"]
