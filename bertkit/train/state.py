"""What a run carries between steps and across a resume besides weights, optimiser and RNG: `TrainState`."""

from __future__ import annotations

from dataclasses import dataclass, field

KEPT_EVALS = 5  # evaluation times kept for the budget planner (it plans with their median)

# (step, elapsed, step_seconds, evaluations, eval_seconds): a point of a run that timing windows start from
TimingPoint = tuple[int, float, float, int, float]


@dataclass
class TrainState:
    """Everything besides weights, optimiser and RNG that a resumed run needs to continue exactly."""

    step: int = 0  # optimiser steps taken = global batches consumed
    total_steps: int = 0
    schedule_steps: int = 0  # the total the learning-rate schedule follows while the budget is not fitted (0: total)
    calibrated: bool = False  # a time budget's step count has been fitted from steady-state timing
    calibrated_at: TimingPoint = (0, 0.0, 0.0, 0, 0.0)  # where the steady state began (the planner's window)
    step_seconds: float = 0.0  # time inside training steps (no evaluations, checkpoints or logging), summed
    evaluations: int = 0
    eval_seconds: float = 0.0  # time inside evaluations, summed
    eval_times: list = field(default_factory=list)  # the latest evaluations' seconds each (the planner's median)
    elapsed: float = 0.0  # training seconds, summed over resumes
    chunk: TimingPoint = (0, 0.0, 0.0, 0, 0.0)  # where the budget planner's current timing chunk began
    chunk_times: list = field(default_factory=list)  # seconds per step of the planner's last timing chunks
    skipped_steps: int = 0  # non-finite steps skipped in total
    bad_in_row: int = 0
    reloads: int = 0
    window: dict = field(default_factory=dict)  # sums since the last log line
    best_value: float | None = None  # best validation metric so far (train(metric=...))
    best_step: int = 0
    best_metric: str = ""  # what best_value measures ("": a checkpoint written before it was recorded)
    best_loss: float | None = None  # the best evaluation's val_loss, which breaks a tie on the metric
    stale_evals: int = 0  # evaluations since the metric last improved (early stopping)
    stopped_early: bool = False
    budget_spent: bool = False  # stopped by train.max_time before total_steps: finished under these limits
    # the limits total_steps was planned for: a resume with other limits re-plans (planned_total)
    max_steps: int = 0
    max_seconds: float | None = None
    precision: str = ""  # what the run trains at (train.precision resolved; auto differs between machines)
    # processes at the run's first launch: with its batch_size and accumulation_steps, the global batch a resume
    # with another process count keeps (train/elastic.py); 0 in a checkpoint written before it was recorded
    processes: int = 0
    # a streamed corpus (data.streaming): where the next step's batch comes from in the stream (objective.position)
    stream: dict = field(default_factory=dict)

    @classmethod
    def restore(cls, saved: dict) -> "TrainState":
        """The state a checkpoint stored (keys it does not know are dropped; a timing point written before it had
        five entries is padded)."""
        known = set(cls.__dataclass_fields__)
        values = {k: v for k, v in saved.items() if k in known}
        for key in ("calibrated_at", "chunk"):
            if key in values:
                values[key] = tuple(values[key]) + (0, 0.0, 0.0, 0, 0.0)[len(values[key]):]
        return cls(**values)

    def point(self) -> TimingPoint:
        """Now, as a timing point."""
        return (self.step, self.elapsed, self.step_seconds, self.evaluations, self.eval_seconds)
