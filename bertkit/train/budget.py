"""The time-budget planner (`train.max_time`): how many steps fill the budget, fitted from steady-state timing only.

A run's first steps pay one-off costs that later steps do not: torch.compile's compilation (15 s and more), a GPU's
context, kernel autotuning and first allocator growth, a recompilation when a shape first changes, the first
evaluation. A plan fitted to them collapses a run to a handful of steps. So the planner times the run in chunks (a
few steps and at least ~0.5% of the budget each, closed only where the loop has waited for the device, so a GPU's
queued work is inside the chunk that launched it) and trusts none of it until the time per step has stopped
falling: a chunk within 10% of the one before. Until then the run keeps the step cap it started with and only the
budget's hard stop can end it; once steady, the number of steps is fitted to the rest of the budget from the
latest chunks' time per step (their median: one chunk slowed by a stall, the machine's other work or a garbage
collection, is not the run's speed), and re-fitted after every chunk while the estimate moves by more than 0.5% (a
run that speeds up later, e.g. once a compiler stops recompiling, is extended to its budget). A run that reaches its
fitted end with more than END_SLACK of the budget left over after its final evaluation is re-fitted there, not
ended: a slow chunk had shrunk the plan faster than the next chunk could restore it (a 4 s test run under a busy
machine ended at 45% of its budget). If the step time never settles, a quarter of the budget spent fits it anyway
from the latest chunk (never from the first).

Time outside training steps is planned too: evaluations (the median of the latest ones since the steady state
began; before those, the warm-up ones; before any, the objective's estimate),
checkpoints and logging (as measured since the steady state began), and the final evaluation inside the budget.
"""

from __future__ import annotations

import statistics

from bertkit.config import BUDGET_STEPS, TrainConfig
from bertkit.train.state import TrainState

MIN_CHUNK_STEPS = 3  # steps in a timing chunk, at least
MIN_CHUNK_SECONDS = 0.2  # and training seconds in it, at least (or CHUNK_SHARE of the budget, if more)
CHUNK_SHARE = 0.005
STEADY_RATIO = 0.9  # a chunk's time per step at >= 90% of the chunk before: the step time has stopped falling
FORCE_FIT_SHARE = 0.25  # fit from the latest chunk once this share of the budget is spent, steady or not
REFIT_TOLERANCE = 0.005  # re-fit when the fitted total moves by more than this share
KEPT_CHUNKS = 8
RECENT_CHUNKS = 3  # the step time is the median of this many latest chunks
END_SLACK = 0.05  # a fitted end with more of the budget left than this share (final evaluation counted) re-fits


class BudgetPlanner:
    """Fits `state.total_steps` to `cfg.max_seconds` (no-op without a time budget). `observe` after every step."""

    def __init__(self, cfg: TrainConfig, eval_cost_steps: float):
        self.cfg = cfg
        self.eval_cost_steps = eval_cost_steps  # an evaluation in training-step units, before one is measured
        self.origin: tuple | None = None  # (step, elapsed) where this process began timing (a resume's own start)

    def observe(self, state: TrainState, synced: bool) -> str | None:
        """Account step `state.step`; `synced`: the loop waited for the device in it (a chunk may close only
        there). Returns the line to print when the plan is first fitted, else None."""
        if not self.cfg.max_seconds or not synced:
            return None
        if state.step >= state.total_steps:
            self._not_yet(state)
            return None
        start = state.chunk
        if self.origin is None:
            self.origin = start[:2]
        steps, seconds = state.step - start[0], state.step_seconds - start[2]
        if steps < MIN_CHUNK_STEPS or seconds < max(MIN_CHUNK_SECONDS, CHUNK_SHARE * self.cfg.max_seconds):
            return None
        state.chunk_times = (list(state.chunk_times) + [seconds / steps])[-KEPT_CHUNKS:]
        state.chunk = state.point()
        if state.calibrated:
            self.fit(state, first=False)
            return None
        times = state.chunk_times
        steady = len(times) >= 3 and times[-1] >= STEADY_RATIO * times[-2]  # the first chunk never counts
        if not steady and (len(times) < 2 or state.elapsed < FORCE_FIT_SHARE * self.cfg.max_seconds):
            # the schedule (not the run's end) follows a provisional plan from the latest chunk: a warmup spread
            # over the step cap (10^8 steps for `bertkit ablate`) would keep the rate at ~0 until the fit
            state.schedule_steps = provisional_total(state, self.cfg)
            return None
        state.calibrated, state.calibrated_at = True, start  # the steady window begins with the last chunk
        state.schedule_steps = 0  # from here the schedule follows the fitted total
        state.chunk_times = times[-1:]  # the step time is estimated from steady chunks only
        per_step = self.fit(state, first=True)
        how = ("after" if steady else "still falling after") + (f" {start[0] - self.origin[0]:,} warm-up steps in "
                                                                f"{start[1] - self.origin[1]:.1f} s")
        timing = f"{per_step:.4g} s per step at steady state, {how}"
        if state.total_steps >= self.cfg.max_steps:  # the step cap (train.max_steps, or the epochs) comes first
            return (f"train.max_time {self.cfg.max_time}: the run's cap of {state.total_steps:,} steps ends it before "
                    f"the budget ({timing})")
        return (f"train.max_time {self.cfg.max_time}: {state.total_steps:,} steps fit the budget ({timing}; re-fitted "
                "as it runs)")

    def _not_yet(self, state: TrainState) -> None:
        """At the fitted end: re-fit where more than END_SLACK of the budget would be left after the final
        evaluation (the step cap still ends the run)."""
        if not state.calibrated or state.total_steps >= self.cfg.max_steps:
            return
        left = self.cfg.max_seconds - state.elapsed - self._eval_cost(state, self._per_step(state))
        if left > END_SLACK * self.cfg.max_seconds:
            self.fit(state, first=True)

    @staticmethod
    def _per_step(state: TrainState) -> float:
        """Steady seconds per training step: the median of the latest chunks (the mean since the steady state
        began where no chunk has closed yet)."""
        recent = state.chunk_times[-RECENT_CHUNKS:]  # the latest steady chunks: a change of speed is followed
        if recent:
            return statistics.median(recent)
        step0, _, seconds0 = state.calibrated_at[:3]
        return (state.step_seconds - seconds0) / max(1, state.step - step0)

    def _eval_cost(self, state: TrainState, per_step: float) -> float:
        """Seconds an evaluation takes: the median of the latest ones since the steady state began, else of the
        warm-up ones, else the objective's estimate in steps."""
        evals = state.evaluations - state.calibrated_at[3]
        times = list(state.eval_times)
        if evals and times:
            return statistics.median(times[-min(evals, len(times)):])
        if evals:  # a checkpoint written before eval_times was kept: the mean since the steady state began
            return (state.eval_seconds - state.calibrated_at[4]) / evals
        if state.evaluations:  # only warm-up evaluations so far: the best measure there is
            return statistics.median(times) if times else state.eval_seconds / state.evaluations
        return self.eval_cost_steps * per_step

    def fit(self, state: TrainState, first: bool) -> float:
        """Set `state.total_steps` so the rest of the budget is filled; returns the steady seconds per step."""
        step0, elapsed0, seconds0, _, eval_seconds0 = state.calibrated_at
        steps = max(1, state.step - step0)
        per_step = self._per_step(state)
        eval_cost = self._eval_cost(state, per_step)
        other = ((state.elapsed - elapsed0) - (state.step_seconds - seconds0)
                 - (state.eval_seconds - eval_seconds0)) / steps  # checkpoints, logging: per step
        remaining = self.cfg.max_seconds - state.elapsed - eval_cost  # the final evaluation inside the budget
        extra = int(max(0.0, remaining) / (per_step + max(0.0, other) + eval_cost / self.cfg.eval_every))
        total = min(self.cfg.max_steps, max(state.step + 1, state.step + extra))  # never past the cap
        if first or abs(total - state.total_steps) > REFIT_TOLERANCE * state.total_steps:
            state.total_steps = total
        return per_step


def provisional_total(state: TrainState, cfg: TrainConfig) -> int:
    """While a budget is not yet fitted, the total the schedule follows (`state.schedule_steps`): the steps the rest
    of the budget holds at the latest chunk's time per step. 0 (the schedule follows the run's total) without a
    budget, once fitted, or before a chunk is timed."""
    if not cfg.max_seconds or state.calibrated or not state.chunk_times:
        return 0
    remaining = max(0.0, cfg.max_seconds - state.elapsed)
    return min(cfg.max_steps, state.step + 1 + int(remaining / state.chunk_times[-1]))


def planned_total(state: dict, cfg: TrainConfig) -> int:
    """The number of steps a resumed run goes to. Unchanged limits keep the checkpoint's plan; a larger (or
    smaller) `max_steps` or `max_time` re-plans it: to `max_steps` without a time budget, else from the run's
    steady-state seconds per step (everything included) to fill the new budget. The schedule follows the new total
    from the resumed step on (so an extended linear decay rises back to the rate a run planned that long would
    have at that step)."""
    step, total = state.get("step", 0), state.get("total_steps", 0)
    planned_steps, planned_seconds = state.get("max_steps", cfg.max_steps), state.get("max_seconds", cfg.max_seconds)
    if planned_steps == cfg.max_steps and (planned_seconds or 0.0) == (cfg.max_seconds or 0.0):
        return total
    if not cfg.max_seconds or not state.get("calibrated") or step == 0:
        return cfg.max_steps
    elapsed = state.get("elapsed", 0.0)
    step0, elapsed0 = (list(state.get("calibrated_at") or [0, 0.0]) + [0, 0.0])[:2]
    per_step = (elapsed - elapsed0) / (step - step0) if step > step0 else elapsed / step  # warm-up left out
    return max(step, min(cfg.max_steps, step + int((cfg.max_seconds - elapsed) / per_step)))


def plan_text(cfg: TrainConfig, steps_per_epoch: float, global_batch: int) -> str:
    """How long a run is planned to go, for its opening line: a step count (and epochs), or under a
    `max_time` budget the cap the budget may not pass (the loop fits the real count once its steps are steady)."""
    if not cfg.max_time:
        return f"{cfg.max_steps:,} steps of {global_batch} ({cfg.max_steps / steps_per_epoch:.2f} epochs)"
    if cfg.epochs is None and cfg.max_steps >= BUDGET_STEPS:  # no limit but the budget (`bertkit ablate`, a
        # `--max-time` given with no step count)
        return f"steps of {global_batch}: as many as the {cfg.max_time} budget allows"
    return (f"steps of {global_batch}: as many as the {cfg.max_time} budget allows, at most {cfg.max_steps:,} "
            f"({cfg.max_steps / steps_per_epoch:.2f} epochs)")
