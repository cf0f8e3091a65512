"""The batch prefetcher: the next step's batch is prepared on the host while the current step runs.

A step's batch is a pure function of its number (`Objective.batch`), so preparing step s + 1 in a background thread
while the device trains step s changes nothing but the wait. Calls stay in step order (one worker), so a streamed
corpus reads on in order too. An error raised while preparing a batch surfaces when that batch is asked for; a
batch prepared for a step the run never reaches (a time budget ended it first) is dropped unseen.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Generic, TypeVar

T = TypeVar("T")


class Prefetcher(Generic[T]):
    """`get(step, ahead)` returns `make(step)` (ready if it was prefetched) and starts `make(ahead)` in the
    background; `enabled=False` makes every batch on the spot (the same results)."""

    def __init__(self, make: Callable[[int], T], enabled: bool = True):
        self.make = make
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bertkit-prefetch") if enabled else None
        self.pending: tuple[int, Future] | None = None

    def get(self, step: int, ahead: int | None) -> T:
        """The batch of `step`; with `ahead`, that step's batch is begun in the background."""
        ready = None
        if self.pending is not None:
            pending_step, future = self.pending
            self.pending = None
            if pending_step == step:
                ready = future
            else:  # another step than prefetched (never in a plain run): let it finish, keep calls in order
                future.exception()
        value = ready.result() if ready is not None else self.make(step)
        if ahead is not None and self.pool is not None:
            self.pending = (ahead, self.pool.submit(self.make, ahead))
        return value

    def close(self) -> None:
        """Wait for a batch still being prepared (its result or error is dropped) and stop the worker."""
        if self.pool is not None:
            if self.pending is not None:
                self.pending[1].exception()
                self.pending = None
            self.pool.shutdown(wait=True)
