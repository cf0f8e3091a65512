"""The training loop's parts, each alone: the budget planner on made-up timings, the device window, the prefetcher,
the step's on-device skip of non-finite updates, the evaluator's best tracking, and the checkpoint policy."""

import threading

import pytest
import torch

from bertkit.config import TrainConfig
from bertkit.errors import BertkitError
from bertkit.train import budget, checkpointing
from bertkit.train.budget import BudgetPlanner
from bertkit.train.prefetch import Prefetcher
from bertkit.train.state import KEPT_EVALS, TrainState
from bertkit.train.window import DeviceWindow


class _Accelerator:
    """What DeviceWindow.flush reads of an Accelerator (one process)."""

    num_processes = 1


def _simulate(cfg: TrainConfig, step_times, eval_seconds=0.0, planner=None) -> tuple[TrainState, list]:
    """Run the planner over made-up step times (a callable step -> seconds) as the loop would: the hard stop at
    the budget, an evaluation every eval_every steps costing eval_seconds (or a callable step -> seconds).
    Returns the state and printed lines."""
    planner = planner or BudgetPlanner(cfg, eval_cost_steps=1.0)
    state = TrainState(total_steps=cfg.max_steps, max_steps=cfg.max_steps, max_seconds=cfg.max_seconds)
    lines = []
    while state.step < state.total_steps:
        seconds = step_times(state.step)
        state.step += 1
        state.step_seconds += seconds
        state.elapsed += seconds
        line = planner.observe(state, synced=True)
        if line:
            lines.append(line)
        last = state.step >= state.total_steps or state.elapsed >= cfg.max_seconds
        if state.step % cfg.eval_every == 0 or last:
            took = eval_seconds(state.step) if callable(eval_seconds) else eval_seconds
            state.evaluations += 1
            state.eval_seconds += took
            state.eval_times = (state.eval_times + [took])[-KEPT_EVALS:]
            state.elapsed += took
        if last:
            break
    return state, lines


def test_a_slow_first_step_is_never_fitted():
    """A compilation-like 15 s first step of a 45 s budget, then 50 ms steps: the plan fills the 30 s left (the
    old planner fitted 2 steps), and the run ends inside 90-105% of its budget."""
    cfg = TrainConfig(max_steps=10 ** 8, max_time="45s", eval_every=100)
    state, lines = _simulate(cfg, lambda step: 15.0 if step == 0 else 0.05)
    assert state.calibrated and len(lines) == 1 and "warm-up" in lines[0]
    assert 0.9 * 45 <= state.elapsed <= 1.05 * 45
    assert state.step == state.total_steps and 500 < state.total_steps < 620


def test_warm_up_over_several_steps_and_evaluations_are_planned():
    """Step times that fall over the first 40 steps (autotuning, a recompile) and 1 s evaluations every 50 steps:
    fitted once steady, with the evaluations' measured cost; the final evaluation lands inside the budget."""
    cfg = TrainConfig(max_steps=10 ** 8, max_time="60s", eval_every=50)
    state, _ = _simulate(cfg, lambda step: 0.02 + 0.5 * 0.85 ** step, eval_seconds=1.0)
    assert state.calibrated and state.calibrated_at[0] > 5  # the falling steps are left out
    assert state.step == state.total_steps and 0.9 * 60 <= state.elapsed <= 1.05 * 60


def test_the_plan_follows_a_change_of_speed():
    """Steps that get twice as fast half-way: the re-fit extends the run to the budget."""
    cfg = TrainConfig(max_steps=10 ** 8, max_time="30s", eval_every=10 ** 6)
    state, _ = _simulate(cfg, lambda step: 0.1 if step < 100 else 0.05)
    assert state.step == state.total_steps and state.elapsed >= 0.95 * 30


@pytest.mark.parametrize("at", [20, 30, 60, 150])
def test_one_slow_step_or_evaluation_does_not_end_a_run_early(at):
    """A 1.5 s stall in one step, or in one evaluation, of a 4 s budget of 10 ms steps (a busy machine, a garbage
    collection): the plan follows the median of the latest chunks and evaluations, and a fitted end with much of
    the budget left re-fits; the run still trains 90-105% of its budget (it ended at 45% before)."""
    cfg = TrainConfig(max_steps=100_000, max_time="4s", eval_every=20)
    for steps, evals in ((lambda s: 1.5 if s == at else 0.01, 0.02),
                         (lambda s: 0.01, lambda s: 1.5 if s == at - at % 20 + 20 else 0.02)):
        state, _ = _simulate(cfg, steps, evals)
        assert state.calibrated and state.step == state.total_steps
        assert 0.9 * 4 <= state.elapsed <= 1.05 * 4, (at, state.step, state.elapsed)


def test_a_fitted_end_that_leaves_the_final_evaluation_its_time_is_kept():
    """Evaluations that really take 30% of the budget each: the fitted end leaves the final one its time, and the
    re-fit at the end does not push the run past its budget."""
    cfg = TrainConfig(max_steps=100_000, max_time="10s", eval_every=200)
    state, _ = _simulate(cfg, lambda s: 0.01, 3.0)
    assert state.step == state.total_steps and state.elapsed <= 1.05 * 10


def test_a_budgeted_run_never_passes_its_step_cap():
    """A cap the budget would exceed (train.max_steps, or epochs): the plan stops at it, re-fits included."""
    cfg = TrainConfig(max_steps=12, max_time="60s", eval_every=10 ** 6)
    state, _ = _simulate(cfg, lambda step: 0.3)
    assert state.step == state.total_steps == 12


def test_the_schedule_follows_a_provisional_plan_until_the_fit():
    """Before the fit the run keeps its cap (10^8 steps), but the schedule follows the latest chunk's estimate:
    a warmup spread over 10^8 steps would hold the rate at ~0."""
    cfg = TrainConfig(max_steps=10 ** 8, max_time="60s", eval_every=10 ** 6)
    planner = BudgetPlanner(cfg, 1.0)
    state = TrainState(total_steps=cfg.max_steps, max_steps=cfg.max_steps, max_seconds=60.0)
    for seconds in [5.0] + [0.5] * 3 + [0.1] * 3:  # chunks of 3 steps: warm-up, then still falling
        state.step, state.step_seconds, state.elapsed = state.step + 1, state.step_seconds + seconds, \
            state.elapsed + seconds
        planner.observe(state, synced=True)
    assert not state.calibrated and state.total_steps == 10 ** 8
    assert 0 < state.schedule_steps < 10 ** 4


def test_nothing_ends_a_run_before_its_steps_are_steady():
    """Until the step time has settled the run keeps its cap; a time that keeps falling is fitted once a quarter
    of the budget is spent, from the latest chunk."""
    cfg = TrainConfig(max_steps=10 ** 8, max_time="20s", eval_every=10 ** 6)
    planner = BudgetPlanner(cfg, 1.0)
    state = TrainState(total_steps=cfg.max_steps, max_steps=cfg.max_steps, max_seconds=cfg.max_seconds)
    falling = lambda step: 1.0 * 0.8 ** (step // 3)  # noqa: E731  every chunk 20% faster than the one before
    while not state.calibrated:
        seconds = falling(state.step)
        state.step, state.step_seconds, state.elapsed = state.step + 1, state.step_seconds + seconds, \
            state.elapsed + seconds
        line = planner.observe(state, synced=True)
        assert state.calibrated or state.total_steps == 10 ** 8
    assert "still falling" in line and state.elapsed >= 0.25 * 20


def test_chunks_close_only_where_the_device_was_waited_for():
    cfg = TrainConfig(max_steps=10 ** 8, max_time="10s")
    planner = BudgetPlanner(cfg, 1.0)
    state = TrainState(total_steps=cfg.max_steps, max_seconds=10.0)
    for _ in range(20):
        state.step, state.step_seconds, state.elapsed = state.step + 1, state.step_seconds + 0.1, state.elapsed + 0.1
        planner.observe(state, synced=False)
    assert state.chunk_times == []
    planner.observe(state, synced=True)
    assert state.chunk_times == [pytest.approx(0.1)]


def test_a_resume_re_plans_from_steady_steps():
    """A longer budget on resume: the seconds per step come from the steady window, not the warm-up."""
    saved = {"step": 100, "total_steps": 100, "calibrated": True, "max_steps": 10 ** 8, "max_seconds": 20.0,
             "elapsed": 20.0, "calibrated_at": [10, 15.0, 0, 0, 0]}  # 15 s of warm-up, then 90 steps in 5 s
    cfg = TrainConfig(max_steps=10 ** 8, max_time="40s")
    assert budget.planned_total(saved, cfg) == 100 + int(20 / (5 / 90))


def test_the_device_window_sums_finite_steps_and_counts_bad_runs():
    window, state = DeviceWindow(torch.device("cpu")), TrainState()
    yes, no = torch.tensor(True), torch.tensor(False)
    window.add(yes, {"loss": torch.tensor(2.0), "flops": 10.0}, {"norm": 4.0, "time": 0.5, "steps": 1.0})
    window.add(no, {"loss": torch.tensor(float("nan")), "flops": 10.0}, {"norm": 4.0, "time": 0.5, "steps": 1.0})
    window.add(no, {"loss": torch.tensor(float("inf")), "flops": 10.0}, {"norm": 4.0, "time": 0.5, "steps": 1.0})
    assert window.flush(state, _Accelerator()) == 2
    assert state.window == {"loss": 2.0, "flops": 10.0, "norm": 4.0, "time": 0.5, "steps": 1.0}
    assert state.skipped_steps == 2 and state.bad_in_row == 2
    window.add(no, {"loss": torch.tensor(float("nan"))}, {"steps": 1.0})  # the run of bad steps goes on
    assert window.flush(state, _Accelerator()) == 1 and state.bad_in_row == 3
    window.add(yes, {"loss": torch.tensor(1.0)}, {"steps": 1.0})  # ... and ends
    assert window.flush(state, _Accelerator()) == 0
    assert state.bad_in_row == 0 and state.skipped_steps == 3 and state.window["loss"] == 3.0
    assert window.flush(state, _Accelerator()) == 0  # nothing new: nothing read
    resumed = DeviceWindow(torch.device("cpu"), bad_in_row=2)  # a checkpoint taken inside a run of bad steps
    resumed.add(no, {"loss": torch.tensor(float("nan"))}, {"steps": 1.0})
    resumed.flush(state, _Accelerator())
    assert state.bad_in_row == 3


def test_the_prefetcher_gives_the_same_batches_in_order_from_another_thread():
    calls, threads = [], set()

    def make(step):
        calls.append(step)
        threads.add(threading.current_thread().name)
        return step * 10

    fetch = Prefetcher(make)
    assert [fetch.get(s, s + 1 if s < 4 else None) for s in range(5)] == [0, 10, 20, 30, 40]
    fetch.close()
    assert calls == [0, 1, 2, 3, 4] and any(name.startswith("bertkit-prefetch") for name in threads)
    plain = Prefetcher(make, enabled=False)
    assert plain.get(7, 8) == 70 and plain.pending is None


def test_a_prefetch_error_surfaces_at_its_step_and_an_unused_one_is_dropped():
    def make(step):
        if step == 2:
            raise BertkitError("corpus too small")
        return step

    fetch = Prefetcher(make)
    assert fetch.get(0, 1) == 0 and fetch.get(1, 2) == 1
    with pytest.raises(BertkitError, match="corpus too small"):
        fetch.get(2, None)
    fetch.get(0, 2)  # a prefetch the run never asks for (its budget ended first) ...
    fetch.close()  # ... is dropped without a word


def test_fused_adamw_skips_a_flagged_update_on_the_device():
    """The mechanism Stepper relies on: found_inf set leaves weights, moments and the step count as they were."""
    p = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([p], lr=0.1, fused=True)
    p.grad = torch.full((3,), float("nan"))
    optimizer.found_inf = torch.tensor(1.0)
    optimizer.step()
    assert torch.equal(p.detach(), torch.ones(3)) and int(optimizer.state[p]["step"]) == 0
    p.grad = torch.ones(3)
    optimizer.found_inf = torch.tensor(0.0)
    optimizer.step()
    assert not torch.equal(p.detach(), torch.ones(3)) and int(optimizer.state[p]["step"]) == 1


def test_the_checkpoint_policy():
    cfg = TrainConfig(save_every=5, max_bad_steps=2)
    state = TrainState(step=5)
    assert checkpointing.due(cfg, state, last=False)
    state.step = 6
    assert not checkpointing.due(cfg, state, last=False) and checkpointing.due(cfg, state, last=True)


def test_too_many_bad_steps_without_a_checkpoint_stop_with_a_clear_line(tmp_path):
    cfg = TrainConfig(max_bad_steps=2)
    state = TrainState(step=7, bad_in_row=2)
    with pytest.raises(BertkitError, match="2 non-finite steps in a row at step 7 .no checkpoint to reload"):
        checkpointing.recover(cfg, state, tmp_path, None, None, None, True)
