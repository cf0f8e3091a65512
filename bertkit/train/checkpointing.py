"""The loop's checkpoint policy: when a checkpoint is written, what a resume restores, and the reload after too many
non-finite steps. Files and their atomic writes are `bertkit.run.checkpoints`'s."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch
from accelerate import Accelerator
from rich.console import Console

from bertkit.config import TrainConfig
from bertkit.errors import BertkitError
from bertkit.nn.model import Model
from bertkit.run.checkpoints import (best_metric, drop_best, newer_best, is_sharded_checkpoint, latest_checkpoint,
                                     load_checkpoint, rng_state, save_checkpoint, save_shards, set_rng_state)
from bertkit.run.directory import RESULTS_FILE, record_train
from bertkit.train.budget import planned_total, provisional_total
from bertkit.train.optim import rate_at
from bertkit.train.evaluator import plain
from bertkit.train.sharding import all_finite, broadcast_path
from bertkit.train.state import TrainState


def due(cfg: TrainConfig, state: TrainState, last: bool) -> bool:
    """Whether a checkpoint is written after the step just taken: every `save_every` steps and at the end."""
    return state.step % cfg.save_every == 0 or last


def own_seed(seed: int, process: int, step: int = 0) -> int:
    """The torch seed of process `process` > 0 starting at `step`: every process was seeded alike (set_seed), so
    each but the main one takes its own stream, or the halves of a global batch draw the same dropout masks."""
    return (seed * 1_000_003 + process + step * 7_919) % 2 ** 63


def restore(checkpoint: Path, cfg: TrainConfig, model: Model, optimizer, scheduler, objective,
            accelerator: Accelerator, run_dir: Path, console: Console) -> TrainState:
    """Load a checkpoint into model / optimiser / scheduler / RNG (after `prepare`: a sharded model takes its own
    shards) and return its state, re-planned for `cfg`'s limits; a streamed corpus seeks to its position."""
    main = accelerator.is_main_process
    if accelerator.is_fsdp2 and not is_sharded_checkpoint(checkpoint):
        raise BertkitError(f"{checkpoint}: was written without sharding; resume it with --set "
                           "train.sharding=none (a sharded checkpoint resumes either way)")
    saved, rngs = load_checkpoint(checkpoint, model, optimizer, scheduler, accelerator.scaler)
    state = TrainState.restore(saved)
    total = planned_total(saved, cfg)
    if total < state.step:  # it was accepted, reporting "step 20 of 15", and config.json then contradicted results
        raise BertkitError(f"{run_dir}: the run is at step {state.step} already ({checkpoint.name}), past "
                           f"train.max_steps = {cfg.max_steps}; resume with a limit of at least {state.step} "
                           "(--max-steps), or without one")
    if cfg.max_seconds is not None and cfg.max_seconds != state.max_seconds and state.elapsed >= cfg.max_seconds:
        # a budget given on a resume counts the run's whole training time: one it has spent already stopped the run
        # after a step, without a word, and stayed in its config (a first-use review, 2026-11-28)
        raise BertkitError(f"{run_dir}: the run has trained {state.elapsed:,.1f} s already ({checkpoint.name}), past "
                           f"train.max_time = {cfg.max_time} (a budget counts the run's whole training time); resume "
                           f"with a --max-time above {state.elapsed:,.1f}s, or without one")
    if total != state.total_steps:
        if main:
            console.print(f"re-planned: {state.total_steps} -> {total} steps (train.max_steps {cfg.max_steps}"
                          + (f", train.max_time {cfg.max_time}" if cfg.max_time else "") + ")")
        state.total_steps, state.stopped_early, state.budget_spent, state.stale_evals = total, False, False, 0
        # a provisional schedule total saved before the budget was fitted (a run that reached its step cap first)
        # belongs to the old plan: kept, an extension without a budget followed it past its end at rate 0 for good
        state.schedule_steps = provisional_total(state, cfg)
        # the optimiser came back with the old plan's rate for the next step (an extended finished linear decay:
        # 0, so that step changed nothing): the new plan's rate at this step, as the schedule gives it from here
        factor = rate_at(cfg, scheduler.last_epoch, state.schedule_steps or state.total_steps)
        scheduler._last_lr = [base * factor for base in scheduler.base_lrs]  # what get_last_lr() logs
        for group, rate in zip(optimizer.param_groups, scheduler._last_lr):
            group["lr"] = rate
    state.max_steps, state.max_seconds = cfg.max_steps, cfg.max_seconds
    # a process that did not exist before (an elastic resume with more processes) takes the last one's stream, then
    # its own torch stream: the last one's would draw its dropout masks in step with that process
    set_rng_state(rngs[min(accelerator.process_index, len(rngs) - 1)])
    if accelerator.process_index >= len(rngs):
        torch.manual_seed(own_seed(cfg.seed, accelerator.process_index, state.step))
    state.processes = state.processes or len(rngs)  # a checkpoint from before the record: one state per process
    if state.stream and hasattr(objective, "seek"):  # a streamed corpus: seek, never replay the stream
        objective.seek(state.stream, state.step)
    # best weights kept after this checkpoint overwrote the ones its state calls best: that best is gone, so the
    # replayed evaluations start the best over (else a run could report a best step whose weights no longer exist,
    # and ship its last weights as if they were it); every process reads this before the main one drops them
    dropped = newer_best(run_dir, state.step)
    accelerator.wait_for_everyone()
    if dropped:
        state.best_value, state.best_step, state.stale_evals = None, 0, 0
    elif state.best_value is not None and not state.best_metric:  # a state written before it recorded its metric:
        state.best_metric = best_metric(run_dir)  # the kept best's own record says (a change then starts it over)
    if main:  # the checkpoint loaded: now the run directory may say that the run goes on
        (Path(run_dir) / RESULTS_FILE).unlink(missing_ok=True)  # its presence always means "finished"
        record_train(run_dir, cfg)  # the (possibly extended) limits
        if dropped:
            drop_best(run_dir)
        console.print(f"resuming from {checkpoint.name} (step {state.step} of {state.total_steps})")
    return state


def save(run_dir: Path, state: TrainState, accelerator: Accelerator, ddp_model, optimizer, scheduler, keep: int,
         objective) -> None:
    """checkpoints/step-N (the main process writes it; under FSDP every process writes its shards into it)."""
    state.stream = objective.position(state.step) if hasattr(objective, "position") else {}
    rngs = accelerator.gather_for_metrics([rng_state()], use_gather_object=True) if accelerator.num_processes > 1 \
        else [rng_state()]
    model = plain(accelerator, ddp_model)
    if not all_finite(model):
        raise BertkitError(f"step {state.step}: weights are not finite; refusing to write a NaN checkpoint")
    shards = None
    if accelerator.is_fsdp2:
        def shards(folder: Path | None) -> None:  # the main process names the folder, every process writes to it
            save_shards(broadcast_path(folder), model, optimizer)
    if accelerator.is_main_process:
        save_checkpoint(run_dir, state.step, model, optimizer, scheduler, asdict(state), keep, rngs, shards,
                        accelerator.scaler)
    elif shards is not None:
        shards(None)
    accelerator.wait_for_everyone()


def recover(cfg: TrainConfig, state: TrainState, run_dir: Path, model: Model, optimizer, console: Console,
            main: bool) -> None:
    """After `max_bad_steps` non-finite steps in a row: reload the last good checkpoint's weights and optimiser
    (keeping the data position, so the bad batches are not replayed), or stop with a clear message."""
    checkpoint = latest_checkpoint(run_dir)
    why = f"{state.bad_in_row} non-finite steps in a row at step {state.step}"
    if cfg.on_bad_steps == "stop" or checkpoint is None or state.reloads >= 3:
        reason = ("train.on_bad_steps = stop" if cfg.on_bad_steps == "stop" else
                  "no checkpoint to reload" if checkpoint is None else "already reloaded 3 times")
        raise BertkitError(f"{why} ({reason}); lower train.learning_rate or check the data")
    # the optimiser's state comes back with the rates of the checkpoint's step; the schedule has moved on since
    rates = [group["lr"] for group in optimizer.param_groups]
    load_checkpoint(checkpoint, model, optimizer)
    for group, rate in zip(optimizer.param_groups, rates):
        group["lr"] = rate
    state.reloads += 1
    state.bad_in_row = 0
    if main:
        console.print(f"[yellow]{why}: reloaded {checkpoint.name} and continue with the next batches")
