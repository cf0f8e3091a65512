"""The one training loop (Hugging Face Accelerate): every objective runs through `train()`.

An objective supplies the global batch of each step (a pure function of the step, so runs resume exactly and give
the same batches on 1 or N processes), the summed loss of a micro-batch, and its evaluation. The loop owns the
rest: AdamW (no decay on norms and biases), warmup + linear/cosine decay, accumulation, clipping, mixed
precision, a wall-clock budget the schedule is fitted to, non-finite step handling, evaluation, logging
(progress bar, metrics.jsonl, TensorBoard) and atomic checkpoints with exact resume.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import torch
from accelerate import Accelerator
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from bertkit.config import ModelConfig, TrainConfig
from bertkit.errors import BertkitError
from bertkit.hardware import Peak, peak_flops, resolve_precision
from bertkit.nn.model import Model
from bertkit.run.checkpoints import (best_weights, clean_stale, drop_newer_best, is_sharded_checkpoint,
                                     latest_checkpoint, load_checkpoint, read_state, rng_state, save_best,
                                     save_checkpoint, save_shards, set_rng_state)
from bertkit.run.directory import (RESULTS_FILE, WEIGHTS_FILE, copy_weights, load_weights, read_json,
                                   record_train, write_weights)
from bertkit.run.metrics import MetricsLog, truncate_metrics
from bertkit.train.defaults import DEFAULT_LEARNING_RATE, use_compile
from bertkit.train.accelerator import run_precision, sharding_text
from bertkit.train.sharding import all_finite, broadcast_path, full_weights, is_sharded, plain_copy

_CALIBRATION_STEPS = 10  # steps timed before a --max-time budget fixes the number of steps


class Objective(Protocol):
    """What a task gives the loop: everything the loop reads from it. An objective on a streamed corpus also has
    `position(step) -> dict` (where that step's batch comes from: kept in each checkpoint) and `seek(point, step)`
    (a resume continues there), since its batches need the stream's position besides the step."""

    global_batch: int  # rows of one optimiser step over all processes and micro-steps
    eval_cost_steps: float  # one `evaluate` call, in training-step units (for --max-time planning)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        """The whole global batch of optimiser step `step` (CPU tensors, rows first)."""

    def normalizer(self, batch: dict[str, torch.Tensor]) -> float:
        """The global batch's loss denominator (e.g. its number of masked tokens)."""

    def loss(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Summed loss of a micro-batch (on the model's device) and summed statistics (tensors)."""

    def evaluate(self, model: Model) -> dict[str, float]:
        """Validation metrics (model in eval mode, no grad)."""

    def tokens(self, batch: dict[str, torch.Tensor]) -> int:
        """Tokens in a global batch (for tokens/s)."""

    def flops(self, config: ModelConfig, micro: dict[str, torch.Tensor]) -> int:
        """Model FLOPs of a training step on a micro-batch (`bertkit.nn.flops`: for achieved TFLOP/s and MFU)."""


class SupervisedObjective(Objective, Protocol):
    """A finetuning objective (a labelled training set read in epochs), what `train_best` and the finetuning jobs
    read besides the loop's part."""

    steps_per_epoch: float
    default_metric: str  # the validation metric that picks the best checkpoint unless train.metric says
    metric_names: tuple[str, ...]  # every metric `evaluate` returns that may pick it


@dataclass
class TrainState:
    """Everything besides weights, optimiser and RNG that a resumed run needs to continue exactly."""

    step: int = 0  # optimiser steps taken = global batches consumed
    total_steps: int = 0
    calibrated: bool = False
    # (step, elapsed, step_seconds, evaluations) at the first fit: steady-state timing starts there
    calibrated_at: tuple[int, float, float, int] = (0, 0.0, 0.0, 0)
    step_seconds: float = 0.0  # time inside training steps (no evaluations, checkpoints or logging), summed
    evaluations: int = 0
    elapsed: float = 0.0  # training seconds, summed over resumes
    skipped_steps: int = 0  # non-finite steps skipped in total
    bad_in_row: int = 0
    reloads: int = 0
    window: dict = field(default_factory=dict)  # sums since the last log line
    best_value: float | None = None  # best validation metric so far (train(metric=...))
    best_step: int = 0
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


def layer_depth(name: str, n_layers: int) -> int:
    """Depth of a parameter for layer-wise learning-rate decay: 0 embeddings, 1..L blocks, L + 1 the rest
    (final norm, heads)."""
    if ".embeddings." in f".{name}":
        return 0
    found = re.search(r"\.blocks\.(\d+)\.", name)
    return int(found.group(1)) + 1 if found else n_layers + 1


def param_groups(model: torch.nn.Module, weight_decay: float, layer_decay: float = 1.0) -> list[dict]:
    """Decay matrices only: biases, norm weights (all 1-d tensors) are left alone. With `layer_decay` < 1 every
    depth gets its own learning-rate scale, layer_decay ** (L + 1 - depth): the heads train at the full rate, the
    embeddings slowest (ELECTRA / BEiT finetuning)."""
    n_layers = getattr(getattr(model, "config", None), "n_layers", 0)
    groups: dict[tuple[int, bool], dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        depth = layer_depth(name, n_layers) if layer_decay < 1.0 else n_layers + 1
        decay = p.ndim >= 2
        group = groups.setdefault((depth, decay), {"params": [], "weight_decay": weight_decay if decay else 0.0,
                                                   "lr_scale": layer_decay ** (n_layers + 1 - depth)})
        group["params"].append(p)
    return [groups[key] for key in sorted(groups, key=lambda k: (k[0], not k[1]))]  # decayed group first


def lr_factor(step: int, total: int, warmup_ratio: float, schedule: str, decay_ratio: float = 0.2) -> float:
    """Multiplier of the peak learning rate at `step` (0-based) of `total`.

    wsd (warmup-stable-decay; Hu et al. 2024, MiniCPM): the peak is held until the last `decay_ratio` of the steps,
    each of which is below the peak, falling linearly towards 0. A run in its stable phase stays at the peak when a
    time budget's total is re-fitted (or the run is extended): only where the decay starts moves."""
    warmup = round(warmup_ratio * total)
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if schedule == "constant":
        return 1.0
    if schedule == "wsd":
        decay = max(1, min(round(decay_ratio * total), total - warmup))  # never eats into the warmup
        return min(1.0, max(0.0, (total - step) / (decay + 1)))  # decay/(decay+1) ... 1/(decay+1) over its steps
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return max(0.0, 1.0 - progress)


class _Metrics:
    """metrics.jsonl (+ TensorBoard) on the main process; a resumed run first drops lines past its checkpoint (and
    a torn last line, with a warning)."""

    def __init__(self, run_dir: Path, enabled: bool, resume_step: int | None, console: Console):
        self.enabled = enabled
        self.log_file = MetricsLog(run_dir)
        self.writer = None
        if not enabled:
            return
        if resume_step is not None and truncate_metrics(run_dir, resume_step):
            console.print(f"[yellow]{self.log_file.path}: dropped a torn last line (the run was interrupted while "
                          "logging)")
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step)
        except ImportError:  # TensorBoard is optional at run time
            self.writer = None

    def log(self, record: dict) -> None:
        if not self.enabled:
            return
        self.log_file.append(record)
        if self.writer is not None:
            for key, value in record.items():
                if key not in ("step", "kind") and isinstance(value, (int, float)):
                    self.writer.add_scalar(f"{record['kind']}/{key}", value, record["step"])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def planned_total(state: dict, cfg: TrainConfig) -> int:
    """The number of steps a resumed run goes to. Unchanged limits keep the checkpoint's plan; a larger (or
    smaller) `max_steps` or `max_time` re-plans it: to `max_steps` without a time budget, else from the run's
    measured seconds per step (everything included) to fill the new budget. The schedule follows the new total
    from the resumed step on (so an extended linear decay rises back to the rate a run planned that long would
    have at that step)."""
    step, total = state.get("step", 0), state.get("total_steps", 0)
    planned_steps, planned_seconds = state.get("max_steps", cfg.max_steps), state.get("max_seconds", cfg.max_seconds)
    if planned_steps == cfg.max_steps and (planned_seconds or 0.0) == (cfg.max_seconds or 0.0):
        return total
    if not cfg.max_seconds or not state.get("calibrated") or step == 0:
        return cfg.max_steps
    per_step = state.get("elapsed", 0.0) / step
    return max(step, min(cfg.max_steps, step + int((cfg.max_seconds - state.get("elapsed", 0.0)) / per_step)))


def plan_text(cfg: TrainConfig, steps_per_epoch: float, global_batch: int) -> str:
    """How long a run is planned to go, for its opening line: a step count (and epochs), or under a
    `max_time` budget the cap the budget may not pass (the loop fits the real count after its first steps)."""
    if not cfg.max_time:
        return f"{cfg.max_steps:,} steps of {global_batch} ({cfg.max_steps / steps_per_epoch:.2f} epochs)"
    if cfg.epochs is None and cfg.max_steps >= 10 ** 8:  # no limit but the time budget (e.g. `bertkit ablate`)
        return f"steps of {global_batch}: as many as the {cfg.max_time} budget allows"
    return (f"steps of {global_batch}: as many as the {cfg.max_time} budget allows, at most {cfg.max_steps:,} "
            f"({cfg.max_steps / steps_per_epoch:.2f} epochs)")


def resume_status(run_dir: Path, cfg: TrainConfig) -> tuple[int, int] | None:
    """(step, planned total) of the checkpoint a resume would continue from, or None without one. A run is
    finished when step >= total (or it stopped early or spent its time budget, and the limits are unchanged)."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return None
    state = read_state(checkpoint)
    total = planned_total(state, cfg)
    if (state.get("stopped_early") or state.get("budget_spent")) and total == state.get("total_steps"):
        total = state.get("step", 0)
    return state.get("step", 0), total


def already_finished(run_dir: Path, cfg: TrainConfig, console: Console, accelerator: Accelerator) -> dict | None:
    """On --resume: the stored results when the run is finished under `cfg`'s limits (nothing is touched, the
    caller returns them), else None (the run goes on: `train` resumes it)."""
    status = resume_status(run_dir, cfg)
    results = Path(run_dir) / RESULTS_FILE
    # finished: the checkpoint's plan is complete, or the results are there and no checkpoint is (deleted by hand)
    finished = results.is_file() and (status is None or status[0] >= status[1])
    accelerator.wait_for_everyone()  # every process decides before the main one may change anything
    if not finished:
        return None
    stored = read_json(results, "results file")
    if accelerator.is_main_process:
        step = status[0] if status else stored.get("step", "?")
        console.print(f"{run_dir}: already finished at step {step} (train.max_steps {cfg.max_steps}"
                      + (f", train.max_time {cfg.max_time}" if cfg.max_time else "") + "); nothing to do — pass a "
                      "larger --max-steps or --max-time to extend it")
    return {"out": str(run_dir), "finished": True, **stored}


def train(model: Model, objective: Objective, cfg: TrainConfig, run_dir: Path, accelerator: Accelerator,
          resume: bool = False, console: Console | None = None, progress: bool = True,
          metric: str | None = None) -> dict:
    """Train until `max_steps` (or the `max_time` budget); returns the final state and last evaluation.

    With `metric` (a key of the objective's evaluation; higher is better unless it names a loss) the weights of
    the best evaluation are kept in checkpoints/best/, and `cfg.patience` evaluations without improvement stop
    the run early.
    """
    console = console or Console(stderr=True)
    main = accelerator.is_main_process
    world = accelerator.num_processes
    groups = param_groups(model, cfg.weight_decay, cfg.layer_decay)
    peak = DEFAULT_LEARNING_RATE if cfg.learning_rate is None else cfg.learning_rate  # jobs resolve "auto" first
    for group in groups:
        group["lr"] = peak * group.pop("lr_scale")
    optimizer = torch.optim.AdamW(groups, lr=peak,
                                  betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                                  **_fast_adamw_kwargs(accelerator.device))
    state = TrainState(total_steps=cfg.max_steps, max_steps=cfg.max_steps, max_seconds=cfg.max_seconds)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, state.total_steps, cfg.warmup_ratio, cfg.schedule, cfg.decay_ratio))
    resume_step = None
    if main:
        clean_stale(run_dir)  # leftovers of a killed checkpoint write (this process holds the run's lock)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:  # killed before its first checkpoint: nothing trained yet, start it again
        resume_step = 0
        if main:
            console.print(f"{run_dir}: no checkpoint yet; starting the run again from step 0")
    # Checkpoints load after `prepare`: a sharded model takes its own shards (every process reads its part).
    ddp_model, prepared = accelerator.prepare(model, optimizer)
    sharded = accelerator.is_fsdp2
    if checkpoint is not None:
        if sharded and not is_sharded_checkpoint(checkpoint):
            raise BertkitError(f"{checkpoint}: was written without sharding; resume it with --set "
                               "train.sharding=none (a sharded checkpoint resumes either way)")
        saved, rngs = load_checkpoint(checkpoint, model, optimizer, scheduler, accelerator.scaler)
        known = {f.name for f in dataclasses.fields(TrainState)}
        state = TrainState(**{k: (tuple(v) if k == "calibrated_at" else v) for k, v in saved.items() if k in known})
        total = planned_total(saved, cfg)
        if total != state.total_steps:
            if main:
                console.print(f"re-planned: {state.total_steps} -> {total} steps (train.max_steps {cfg.max_steps}"
                              + (f", train.max_time {cfg.max_time}" if cfg.max_time else "") + ")")
            state.total_steps, state.stopped_early, state.budget_spent, state.stale_evals = total, False, False, 0
        state.max_steps, state.max_seconds = cfg.max_steps, cfg.max_seconds
        # a process that did not exist before (an elastic resume with more processes) takes the last one's stream
        set_rng_state(rngs[min(accelerator.process_index, len(rngs) - 1)])
        state.processes = state.processes or len(rngs)  # a checkpoint from before the record: one state per process
        if state.stream and hasattr(objective, "seek"):  # a streamed corpus: seek, never replay the stream
            objective.seek(state.stream, state.step)
        resume_step = state.step
        if main:  # the checkpoint loaded: now the run directory may say that the run goes on
            (Path(run_dir) / RESULTS_FILE).unlink(missing_ok=True)  # its presence always means "finished"
            record_train(run_dir, cfg)  # the (possibly extended) limits
            drop_newer_best(run_dir, state.step)
            console.print(f"resuming from {checkpoint.name} (step {state.step} of {state.total_steps})")
    if resume and (state.step >= state.total_steps or state.stopped_early or state.budget_spent):
        # Killed after its last checkpoint, before its results: nothing left to train, the final evaluation again.
        return {"state": asdict(state), "evaluation": objective.evaluate(_plain(accelerator, ddp_model))}
    compiled, why = use_compile(cfg.compile, accelerator.device, state.total_steps - state.step)
    if sharded and compiled:
        compiled, why = False, "not with FSDP here: its units gather and free weights around every block"
    if compiled:  # training steps only: evaluation and checkpoints use the plain module (`_plain`)
        ddp_model = torch.compile(ddp_model)
    metrics = _Metrics(run_dir, main, resume_step, console)
    evaluation: dict = {}
    precision = run_precision(accelerator)
    if state.precision and state.precision != precision and main:
        console.print(f"[yellow]precision: this part runs at {precision}, the run so far at {state.precision} "
                      f"(train.precision {cfg.precision} on another machine?); to continue exactly, resume with "
                      f"--set train.precision={state.precision}")
    state.precision = precision
    state.processes = state.processes or world  # kept from the run's first launch (elastic resume)
    peak = peak_flops(accelerator.device, precision) if main else None  # what MFU is a fraction of
    if main:
        choice = resolve_precision(cfg.precision, accelerator.device)
        console.print(f"precision: {precision}" + (f" ({choice.reason})" if choice.precision == precision else "")
                      + f"; torch.compile: {'on' if compiled else 'off'} ({why})", highlight=False)
        if sharded:
            console.print(sharding_text(world), highlight=False)
        console.print(f"MFU: model FLOPs per second as a share of {world} x {peak.flops / 1e12:.3g} TFLOP/s "
                      f"({peak.source})", highlight=False)

    bar = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                   TimeRemainingColumn(), console=console, disable=not (progress and main), transient=False)
    task = bar.add_task("train", total=state.total_steps, completed=state.step, info="")
    started = time.perf_counter() - state.elapsed
    try:
        with bar:
            while state.step < state.total_steps and not state.stopped_early:
                t0 = time.perf_counter()
                batch = objective.batch(state.step)
                rows = next(iter(batch.values())).shape[0]
                micro_rows = rows // (cfg.accumulation_steps * world)
                norm = objective.normalizer(batch)
                sums: dict[str, torch.Tensor] = {}
                flops = 0
                ddp_model.train()
                for a in range(cfg.accumulation_steps):
                    index = a * world + accelerator.process_index
                    rows_of = {k: v[index * micro_rows:(index + 1) * micro_rows] for k, v in batch.items()}
                    flops += objective.flops(model.config, rows_of)  # on the CPU copy: no device sync
                    micro = {k: v.to(accelerator.device) for k, v in rows_of.items()}
                    sync = a == cfg.accumulation_steps - 1
                    with (contextlib.nullcontext() if sync else accelerator.no_sync(ddp_model)):
                        with accelerator.autocast():
                            loss_sum, stats = objective.loss(ddp_model, micro)
                        # DDP averages gradients over processes: scale so the result is sum / global normaliser.
                        accelerator.backward(loss_sum * (world / norm))
                    for key, value in {"loss": loss_sum.detach().float(), **stats}.items():
                        sums[key] = sums.get(key, 0) + value.detach().float()
                sums["flops"] = torch.tensor(float(flops), device=accelerator.device)
                totals = {k: v.item() for k, v in accelerator.reduce(
                    {k: v.reshape(1) for k, v in sums.items()}, reduction="sum").items()}
                step_flops = totals.pop("flops")  # every process's micro-batches
                grad_norm = accelerator.clip_grad_norm_(ddp_model.parameters(), cfg.max_grad_norm or float("inf"))
                grad_norm = float(grad_norm)
                finite = math.isfinite(totals["loss"]) and math.isfinite(grad_norm)
                if finite:
                    prepared.step()
                    state.bad_in_row = 0
                else:
                    state.bad_in_row += 1
                    state.skipped_steps += 1
                    if accelerator.scaler is not None:  # fp16: the step that would have updated the scale is
                        accelerator.scaler.update()     # skipped; lower it now (clipping already unscaled)
                prepared.zero_grad(set_to_none=True)
                scheduler.step()
                state.step += 1
                step_time = time.perf_counter() - t0
                state.step_seconds += step_time
                state.elapsed = time.perf_counter() - started

                if not finite:
                    if main:
                        console.print(f"[yellow]step {state.step}: non-finite loss or gradient, update skipped "
                                      f"({state.bad_in_row} in a row, {state.skipped_steps} in all)")
                    if state.bad_in_row >= cfg.max_bad_steps:
                        _recover(cfg, state, run_dir, model, optimizer, console, main)
                else:
                    w = state.window
                    for key, value in totals.items():
                        w[key] = w.get(key, 0.0) + value
                    w["norm"] = w.get("norm", 0.0) + norm
                    w["tokens"] = w.get("tokens", 0.0) + objective.tokens(batch)
                    w["time"] = w.get("time", 0.0) + step_time
                    w["flops"] = w.get("flops", 0.0) + step_flops
                    w["grad_norm"] = w.get("grad_norm", 0.0) + grad_norm
                    w["steps"] = w.get("steps", 0) + 1

                # Calibrate after a few steps, or sooner when a short budget is already 10% spent; then re-fit from
                # steady-state timing (the first steps pay one-off warm-up costs) while under half the budget is spent.
                if cfg.max_seconds and not state.calibrated and (
                        state.step >= min(_CALIBRATION_STEPS + 1, state.total_steps)
                        or (state.step >= 2 and state.elapsed >= 0.1 * cfg.max_seconds)):
                    _fit_budget(cfg, state, step_time, objective)
                    bar.update(task, total=state.total_steps)
                    if main:
                        console.print(f"train.max_time {cfg.max_time}: {state.total_steps:,} steps fit the budget "
                                      f"({state.elapsed / state.step:.3f} s per step so far; re-fitted as it runs)")
                elif (cfg.max_seconds and state.calibrated and state.step % cfg.log_every == 0
                      and state.step - state.calibrated_at[0] >= _CALIBRATION_STEPS
                      and state.elapsed < 0.5 * cfg.max_seconds and state.step < state.total_steps):
                    _refit_budget(cfg, state, objective)
                    bar.update(task, total=state.total_steps)
                if state.step % cfg.log_every == 0 and state.window.get("steps"):
                    record = _log_record(state, scheduler.get_last_lr()[0], peak, world)
                    metrics.log(record)
                    mfu = f"  MFU {record['mfu']:.0%}" if "mfu" in record else ""
                    bar.update(task, info=f"loss {record['loss']:.3f}  {record['tokens_per_s']:,.0f} tok/s{mfu}")
                    state.window = {}
                last = state.step >= state.total_steps or (cfg.max_seconds and state.elapsed >= cfg.max_seconds)
                if last and state.step < state.total_steps:  # the time budget ended it: a resume knows it is done
                    state.budget_spent = True
                if state.step % cfg.eval_every == 0 or last:
                    evaluation = objective.evaluate(_plain(accelerator, ddp_model))
                    state.evaluations += 1
                    metrics.log({"kind": "eval", "step": state.step, **evaluation})
                    if main and evaluation:
                        console.print(f"step {state.step}: " + "  ".join(f"{k} {v:.4f}" for k, v in evaluation.items()))
                    if metric is not None and evaluation:
                        if _track_best(metric, evaluation, state, cfg, run_dir, accelerator, ddp_model):
                            last = True
                            if main:
                                console.print(f"early stop: {metric} has not improved for {state.stale_evals} "
                                              f"evaluations (best {state.best_value:.4f} at step {state.best_step})")
                if state.step % cfg.save_every == 0 or last:
                    _checkpoint(run_dir, state, accelerator, ddp_model, optimizer, scheduler, cfg.keep_checkpoints,
                                objective)
                bar.update(task, completed=state.step)
                if last:
                    break
    finally:
        metrics.close()
    return {"state": asdict(state), "evaluation": evaluation}


def _plain(accelerator: Accelerator, ddp_model) -> Model:
    """The model itself: without the DDP wrapper and without torch.compile's (its state dict has the plain names;
    evaluation runs eagerly instead of compiling every evaluation shape)."""
    return accelerator.unwrap_model(ddp_model, keep_torch_compile=False)


def _track_best(metric: str, evaluation: dict, state: TrainState, cfg: TrainConfig, run_dir: Path,
                accelerator: Accelerator, ddp_model) -> bool:
    """Keep the best weights in checkpoints/best/; returns True when early stopping should end the run."""
    if metric not in evaluation:
        raise BertkitError(f"train.metric: {metric!r} is not a validation metric (available: "
                           f"{', '.join(evaluation)})")
    value = evaluation[metric]
    lower_is_better = "loss" in metric or "ppl" in metric
    better = state.best_value is None or (value < state.best_value if lower_is_better else value > state.best_value)
    if better and math.isfinite(value):
        state.best_value, state.best_step, state.stale_evals = float(value), state.step, 0
        whole = full_weights(_plain(accelerator, ddp_model))  # gathered when sharded: every process takes part
        if accelerator.is_main_process:
            save_best(run_dir, whole, state.step, metric, value)
        accelerator.wait_for_everyone()
    else:
        state.stale_evals += 1
    state.stopped_early = bool(cfg.patience) and state.stale_evals >= cfg.patience
    return state.stopped_early


def train_best(model: Model, objective: SupervisedObjective, cfg: TrainConfig, run_dir: Path, accelerator: Accelerator,
               metric: str, resume: bool = False, console: Console | None = None, progress: bool = True,
               ) -> tuple[dict, Model | None]:
    """`train` with a validation `metric` (finetuning), then the best checkpoint's weights written as
    RUN/model.safetensors (main process). Returns the summary a finetuning run's results.json starts from, and the
    best weights as a whole model on the main process (None on the others): `model` itself with them loaded, or
    under FSDP a plain copy read from the best file (the shards are not loaded back: nothing reads them again)."""
    result = train(model, objective, cfg, run_dir, accelerator, resume=resume, console=console, progress=progress,
                   metric=metric)
    best = best_weights(run_dir)
    main = accelerator.is_main_process
    if best is None:
        whole = full_weights(model)  # the last weights (gathered when sharded: every process takes part)
    elif is_sharded(model):
        whole = plain_copy(model, best) if main else None
    else:
        load_weights(model, best, next(model.parameters()).device)
        whole = model
    if main:
        if best is not None:
            copy_weights(best, Path(run_dir) / WEIGHTS_FILE)
        else:
            write_weights(Path(run_dir) / WEIGHTS_FILE, whole)
    summary = {"out": str(run_dir), "best_step": result["state"]["best_step"], "metric": metric,
               "steps": result["state"]["step"], "stopped_early": result["state"]["stopped_early"],
               "precision": result["state"]["precision"]}
    return summary, whole if main else None


def _fast_adamw_kwargs(device: torch.device) -> dict:
    """fused AdamW where PyTorch has it for this device (CUDA, and CPU in recent releases), else foreach."""
    return {"fused": True} if device.type in ("cuda", "cpu") else {"foreach": True}


def _log_record(state: TrainState, lr: float, peak: Peak | None, world: int) -> dict:
    """The window's means: loss, statistics, throughput (tokens/s; model TFLOP/s and MFU, the share of the
    processes' peak rate, on the main process)."""
    w = state.window
    seconds = max(w["time"], 1e-9)
    w.setdefault("flops", 0.0)  # a window resumed from a checkpoint written before FLOPs were counted
    record = {"kind": "train", "step": state.step, "loss": w["loss"] / w["norm"], "lr": lr,
              "grad_norm": w["grad_norm"] / w["steps"], "tokens_per_s": w["tokens"] / seconds,
              "tflops": w["flops"] / seconds / 1e12, "elapsed": round(state.elapsed, 2)}
    if peak is not None:
        record["mfu"] = w["flops"] / seconds / (world * peak.flops)
    for key, value in w.items():  # objective statistics normalised like the loss (e.g. masked-token accuracy)
        if key not in ("loss", "norm", "tokens", "time", "grad_norm", "steps", "flops"):
            record[key] = value / w["norm"]
    return record


def _fit_budget(cfg: TrainConfig, state: TrainState, step_time: float, objective: Objective) -> None:
    """Fix the number of steps so training plus evaluations fill the rest of the budget (schedule included)."""
    per_step = state.elapsed / max(1, state.step)  # includes warm-up costs: errs on the short side
    per_step = max(per_step, step_time)
    eval_cost = objective.eval_cost_steps * per_step  # an evaluation, in train-step units
    remaining = cfg.max_seconds - state.elapsed
    extra = max(0, int(remaining / (per_step + eval_cost / cfg.eval_every)))
    state.total_steps = max(state.step, min(cfg.max_steps, state.step + extra))
    state.calibrated = True
    state.calibrated_at = (state.step, state.elapsed, state.step_seconds, state.evaluations)


def _refit_budget(cfg: TrainConfig, state: TrainState, objective: Objective) -> None:
    """Re-fit the number of steps from steady-state timing since the first fit: the time per training step, plus
    the time per step spent outside steps (evaluations, checkpoints, logging) as measured in the window, or, before
    the window holds an evaluation, the objective's estimate of one. The schedule follows the new total from the
    next step on."""
    step0, elapsed0, seconds0, evals0 = state.calibrated_at
    steps = state.step - step0
    per_step = (state.step_seconds - seconds0) / steps
    overhead = ((state.elapsed - elapsed0) - (state.step_seconds - seconds0)) / steps
    if state.evaluations == evals0:  # no evaluation measured yet: add the estimate of the ones to come
        overhead += objective.eval_cost_steps * per_step / cfg.eval_every
    extra = max(0, int((cfg.max_seconds - state.elapsed) / (per_step + overhead)))
    state.total_steps = max(state.step + 1, min(cfg.max_steps, state.step + extra))


def _checkpoint(run_dir, state, accelerator, ddp_model, optimizer, scheduler, keep, objective) -> None:
    """checkpoints/step-N (the main process writes it; under FSDP every process writes its shards into it)."""
    state.stream = objective.position(state.step) if hasattr(objective, "position") else {}
    rngs = accelerator.gather_for_metrics([rng_state()], use_gather_object=True) if accelerator.num_processes > 1 \
        else [rng_state()]
    model = _plain(accelerator, ddp_model)
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


def _recover(cfg: TrainConfig, state: TrainState, run_dir: Path, model: Model, optimizer, console, main) -> None:
    """After `max_bad_steps` non-finite steps in a row: reload the last good checkpoint's weights and optimiser
    (keeping the data position, so the bad batches are not replayed), or stop with a clear message."""
    checkpoint = latest_checkpoint(run_dir)
    why = f"{state.bad_in_row} non-finite steps in a row at step {state.step}"
    if cfg.on_bad_steps == "stop" or checkpoint is None or state.reloads >= 3:
        reason = ("train.on_bad_steps = stop" if cfg.on_bad_steps == "stop" else
                  "no checkpoint to reload" if checkpoint is None else "already reloaded 3 times")
        raise BertkitError(f"{why} ({reason}); lower train.learning_rate or check the data")
    load_checkpoint(checkpoint, model, optimizer)
    state.reloads += 1
    state.bad_in_row = 0
    if main:
        console.print(f"[yellow]{why}: reloaded {checkpoint.name} and continue with the next batches")
