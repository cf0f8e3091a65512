"""The one training loop (Hugging Face Accelerate): every objective runs through `train()`.

An objective supplies the global batch of each step (a pure function of the step, so runs resume exactly and give
the same batches on 1 or N processes), the summed loss of a micro-batch, and its evaluation. The loop owns the
rest, each part in its own module: the step (`step.py`: accumulation, mixed precision, clipping, non-finite steps
skipped on the device), the batch prefetcher (`prefetch.py`), the time-budget planner (`budget.py`), the metrics
window and log (`window.py`), evaluation with the best checkpoint and early stopping (`evaluator.py`), and the
checkpoint policy with exact resume (`checkpointing.py`); AdamW and its schedule are `optim.py`'s. `train` below is
the loop that joins them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from bertkit.config import ModelConfig, TrainConfig
from bertkit.hardware import Peak, peak_flops, resolve_precision
from bertkit.nn.model import Model
from bertkit.run.checkpoints import best_weights, clean_stale, latest_checkpoint, read_state
from bertkit.run.directory import (RESULTS_FILE, WEIGHTS_FILE, copy_weights, load_weights, read_json, record_train,
                                   write_weights)
from bertkit.run.faults import slow_point
from bertkit.train import checkpointing
from bertkit.train.accelerator import run_precision, sharding_text
from bertkit.train.budget import BudgetPlanner, plan_text, planned_total  # noqa: F401 (plan_text: the jobs' import)
from bertkit.train.defaults import use_compile
from bertkit.train.evaluator import Evaluator, plain
from bertkit.train.interrupt import Interrupt
from bertkit.train.optim import lr_factor, make_optimizer, make_scheduler, param_groups  # noqa: F401 (re-exported)
from bertkit.train.prefetch import Prefetcher
from bertkit.train.sharding import full_weights, is_sharded, plain_copy
from bertkit.train.state import TrainState
from bertkit.train.step import Stepper
from bertkit.train.window import DeviceWindow, MetricsWriter, log_record

# Prepare the next batch in a background thread while a step runs (prefetch.py), where the device is not the host's
# own cores: on a CPU the step already uses every core, and a second thread of tensor work would take them from it
# (inductor's OpenMP kernels spin-wait: sharing 2 cores with other tensor work, a compiled tiny model's step was
# seen to take 1.34 s instead of 0.02 s).
ACCELERATORS = ("cuda", "xpu", "mps")


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

    # Optional: `prepare(micro) -> micro`, host-side work on a micro-batch before it goes to the device (run ahead
    # by the prefetcher), e.g. the flat positions of its masked tokens, which the device then need not count.


class SupervisedObjective(Objective, Protocol):
    """A finetuning objective (a labelled training set read in epochs), what `train_best` and the finetuning jobs
    read besides the loop's part."""

    steps_per_epoch: float
    default_metric: str  # the validation metric that picks the best checkpoint unless train.metric says
    metric_names: tuple[str, ...]  # every metric `evaluate` returns that may pick it


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
          metric: str | None = None, resumed: Callable[[], None] | None = None) -> dict:
    """Train until `max_steps` (or the `max_time` budget); returns the final state and last evaluation.
    `resumed` is called once a resume has passed its last check (the checkpoint restored and taken): what a resume
    records, it records there.

    With `metric` (a key of the objective's evaluation; higher is better unless it names a loss) the weights of
    the best evaluation are kept in checkpoints/best/, and `cfg.patience` evaluations without improvement stop
    the run early.
    """
    console = console or Console(stderr=True)
    main = accelerator.is_main_process
    optimizer, peak_lr = make_optimizer(model, cfg, accelerator.device)
    state = TrainState(total_steps=cfg.max_steps, max_steps=cfg.max_steps, max_seconds=cfg.max_seconds)
    # the schedule reads the state the run has now: its total, or the budget planner's provisional one
    scheduler = make_scheduler(optimizer, cfg, lambda: state.schedule_steps or state.total_steps)
    checkpoint, resume_step = _begin(run_dir, resume, main, console, cfg)
    ddp_model, prepared = accelerator.prepare(model, optimizer)
    if checkpoint is not None:
        state = checkpointing.restore(checkpoint, cfg, model, optimizer, scheduler, objective, accelerator, run_dir,
                                      console)
        resume_step = state.step
    if resume and resumed is not None:
        resumed()
    if resume and (state.step >= state.total_steps or state.stopped_early or state.budget_spent):
        # Killed after its last checkpoint, before its results: nothing left to train, the final evaluation again.
        return {"state": asdict(state), "evaluation": objective.evaluate(plain(accelerator, ddp_model))}
    ddp_model, peak, graphs = _start(ddp_model, cfg, state, accelerator, console, objective)
    metrics = MetricsWriter(run_dir, main, resume_step, console)
    stepper = Stepper(objective, cfg, accelerator, model.config, ddp_model, optimizer, prepared, scheduler, graphs)
    planner = BudgetPlanner(cfg, objective.eval_cost_steps)
    window = DeviceWindow(accelerator.device, state.bad_in_row)  # a run of bad steps goes on across a resume
    evaluator = Evaluator(objective, cfg, metric, run_dir, accelerator, metrics, console)
    prefetch = Prefetcher(stepper.prepare, enabled=accelerator.device.type in ACCELERATORS)
    every = read_interval(accelerator.device, cfg)
    if resume_step:  # a resumed process pays its warm-up again: time it anew before re-fitting the budget
        state.calibrated, state.chunk, state.chunk_times = False, state.point(), []
    bar, task = _bar(console, progress and main, state)
    evaluation: dict = {}
    started = time.perf_counter() - state.elapsed
    try:
        with bar, Interrupt(accelerator.num_processes == 1) as interrupt:
            while state.step < state.total_steps and not state.stopped_early:
                t0 = time.perf_counter()
                batch = prefetch.get(state.step, state.step + 1 if state.step + 1 < state.total_steps else None)
                slow_point("train-step")
                finite, sums, grad_norm = stepper(batch)
                state.step += 1
                read = _reads(state, cfg, every, accelerator.device)  # waits for the device where it reads
                step_time = time.perf_counter() - t0
                state.step_seconds += step_time
                state.elapsed = time.perf_counter() - started
                window.add(finite, {**sums, "flops": float(batch.flops)},
                           {"norm": batch.norm, "tokens": float(batch.tokens), "time": step_time,
                            "grad_norm": grad_norm, "steps": 1.0})
                last = _plan(planner, state, read, cfg, accelerator, console)
                if read or last:
                    _read(window, state, cfg, accelerator, run_dir, model, optimizer, console)
                if last and state.step < state.total_steps:  # the time budget ended it: a resume knows it is done
                    state.budget_spent = True
                if state.step % cfg.log_every == 0 and state.window.get("steps"):
                    bar.update(task, info=_log(state, max(scheduler.get_last_lr()), peak, accelerator.num_processes,
                                               metrics))
                if evaluator.due(state, last):
                    evaluation, stop = evaluator(state, ddp_model)
                    last = last or stop
                if checkpointing.due(cfg, state, last):
                    checkpointing.save(run_dir, state, accelerator, ddp_model, optimizer, scheduler,
                                       cfg.keep_checkpoints, objective)
                bar.update(task, completed=state.step, total=state.total_steps)
                if last:
                    break
                if interrupt.requested:  # Ctrl-C: this step logged, evaluated as due, checkpointed; then stop
                    _interrupted(window, state, cfg, accelerator, run_dir, stepper, objective, console)
    finally:
        prefetch.close()
        metrics.close()
        _restore_tf32()
    return {"state": asdict(state), "evaluation": evaluation}


def _begin(run_dir: Path, resume: bool, main: bool, console: Console,
           cfg: TrainConfig) -> tuple[Path | None, int | None]:
    """Before `prepare`: the checkpoint a resume loads (None for a fresh run, or one killed before its first
    checkpoint, which starts again at step 0) and the step metrics.jsonl is cut back to."""
    if main:
        clean_stale(run_dir)  # leftovers of a killed checkpoint write (this process holds the run's lock)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:  # killed before its first checkpoint: nothing trained yet, start it again
        if main:
            console.print(f"{run_dir}: no checkpoint yet; starting the run again from step 0")
            record_train(run_dir, cfg)  # with this command's limits, which a later plain --resume keeps
        return None, 0
    return checkpoint, None


def _start(ddp_model, cfg: TrainConfig, state: TrainState, accelerator: Accelerator, console: Console,
           objective: Objective):
    """torch.compile where `train.compile` says (with CUDA graphs where `train.cuda_graphs` does and can), the
    run's precision recorded, and the opening lines (precision, compile, sharding, what MFU is a share of). Returns
    (the model to train, the peak MFU divides by, whether its steps replay CUDA graphs)."""
    main, world = accelerator.is_main_process, accelerator.num_processes
    if world > 1 and accelerator.process_index > 0 and state.step == 0:
        # every process was seeded alike (set_seed(train.seed)), so each drew the same dropout masks: the halves of
        # a global batch got correlated noise, unlike one process's. Each other process takes its own stream (the
        # main one keeps a one-process run's); a resume restores each process's own from its checkpoint
        torch.manual_seed(checkpointing.own_seed(cfg.seed, accelerator.process_index))
    compiled, why = use_compile(cfg.compile, accelerator.device, state.total_steps - state.step,
                                (cfg.max_seconds - state.elapsed) if cfg.max_seconds else None)
    if accelerator.is_fsdp2 and compiled:
        compiled, why = False, "not with FSDP here: its units gather and free weights around every block"
    graphs, graphs_why = use_graphs(cfg.cuda_graphs, compiled, accelerator.device, world, objective,
                                    cfg.accumulation_steps)
    if compiled:  # training steps only: evaluation and checkpoints use the plain module (`plain`)
        ddp_model = torch.compile(ddp_model, mode="reduce-overhead" if graphs else None)
    if graphs:
        objective.pad_to = GRAPH_BUCKET
    precision = run_precision(accelerator)
    tf32 = _set_tf32(accelerator.device, precision, cfg.tf32)
    if state.precision and state.precision != precision and main:
        console.print(f"[yellow]precision: this part runs at {precision}, the run so far at {state.precision} "
                      f"(train.precision {cfg.precision} on another machine?); to continue exactly, resume with "
                      f"--set train.precision={state.precision}")
    state.precision = precision
    state.processes = state.processes or world  # kept from the run's first launch (elastic resume)
    peak = peak_flops(accelerator.device, precision) if main else None  # what MFU is a fraction of
    if main:
        choice = resolve_precision(cfg.precision, accelerator.device)
        console.print(f"precision: {precision}" + (" (tf32 matmul)" if tf32 else "")
                      + (f" ({choice.reason})" if choice.precision == precision else "")
                      + f"; torch.compile: {'on' if compiled else 'off'} ({why})"
                      + (f"; CUDA graphs: {'on' if graphs else 'off'} ({graphs_why})" if cfg.cuda_graphs else ""),
                      highlight=False)
        if accelerator.is_fsdp2:
            console.print(sharding_text(world), highlight=False)
        console.print(f"MFU: model FLOPs per second as a share of {world} x {peak.flops / 1e12:.3g} TFLOP/s "
                      f"({peak.source})", highlight=False)
    return ddp_model, peak, graphs


def use_graphs(wanted: bool, compiled: bool, device: torch.device, world: int, objective,
               accumulation: int = 1) -> tuple[bool, str]:
    """Whether training steps replay CUDA graphs (`train.cuda_graphs`), and why not where they do not: a compiled
    model, one CUDA process, one micro-step per update, an objective whose shapes can be made few (`pad_to`:
    masked-LM pretraining)."""
    if not wanted:
        return False, "train.cuda_graphs = false"
    for ok, why in ((device.type == "cuda", f"needs a CUDA GPU, not {device.type}"),
                    (compiled, "needs torch.compile on (train.compile)"),
                    (world == 1, f"one process only, not {world}"),
                    # a graph's backward leaves the gradients in its own memory, which the next micro-step's replay
                    # overwrites before they are accumulated (pytorch/pytorch#169545)
                    (accumulation == 1, f"one micro-step per update only, not train.accumulation_steps = "
                                        f"{accumulation}"),
                    (getattr(objective, "kind", "") == "mlm",
                     "masked-LM pretraining only (its shapes are padded to a few)")):
        if not ok:
            return False, why
    return True, f"train.cuda_graphs = true; masked tokens padded to a multiple of {GRAPH_BUCKET}"


def _log(state: TrainState, lr: float, peak: Peak | None, world: int, metrics: MetricsWriter) -> str:
    """Write the window's line to metrics.jsonl and start a new window; returns the progress bar's text."""
    record = log_record(state, lr, peak, world)
    metrics.log(record)
    state.window = {}
    mfu = f"  MFU {record['mfu']:.0%}" if "mfu" in record else ""
    return f"loss {record['loss']:.3f}  {record['tokens_per_s']:,.0f} tok/s{mfu}"


_TF32_BEFORE: list[tuple[bool, bool]] = []  # the switches each run found, put back when it ends (`_restore_tf32`)


def _set_tf32(device: torch.device, precision: str, allowed: bool) -> bool:
    """On a CUDA GPU with TF32 (compute capability 8.0+), fp32 matrix products use it as `train.tf32` says (torch's
    process-wide switch; the MFU peak follows it) until the run ends. Returns whether this run's fp32 products are
    TF32."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 0):
        return False
    _TF32_BEFORE.append((torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32))
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allowed
    return allowed and precision == "fp32"


def _restore_tf32() -> None:
    """The TF32 switches as the run found them: a run left them on for its whole process, so a benchmark's fp32
    phase after a training job in the same process ran TF32 (a static review, 2026-11-29), and so did a notebook's
    fp32 inference after a finetune."""
    if _TF32_BEFORE:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = _TF32_BEFORE.pop()


GRAPH_BUCKET = 128  # CUDA graphs: masked-token counts rounded up to a multiple of this (a few recorded shapes)


def read_interval(device: torch.device, cfg: TrainConfig) -> int:
    """Steps between reads of the device's window sums: every step on a CPU (a read costs nothing there), every
    `log_every` steps on an accelerator (the host then queues steps ahead of the device)."""
    return 1 if device.type == "cpu" else cfg.log_every


def _reads(state: TrainState, cfg: TrainConfig, every: int, device: torch.device) -> bool:
    """Whether the loop reads the device after the step just taken: every `every` steps and wherever a log line,
    an evaluation or a checkpoint needs the window (the budget's hard stop reads after its own check). Where it
    reads, it first waits for the device's queued work, which belongs to this step's time."""
    step = state.step
    read = (step % every == 0 or step % cfg.log_every == 0 or step % cfg.eval_every == 0
            or step % cfg.save_every == 0 or step >= state.total_steps)
    if read and device.type in ACCELERATORS:  # the accelerators, whose work is queued
        getattr(torch, device.type).synchronize()
    return read


def _plan(planner: BudgetPlanner, state: TrainState, read: bool, cfg: TrainConfig, accelerator: Accelerator,
          console: Console) -> bool:
    """The budget planner's turn after a step; returns whether this step is the run's last. Under several
    processes, each timing itself, the main process's plan and time-up decision are every process's (taken where
    they read the device together, so that none stops or re-plans alone)."""
    fitted = planner.observe(state, synced=read)
    if fitted and accelerator.is_main_process:
        console.print(fitted, highlight=False)
    time_up = bool(cfg.max_seconds and state.elapsed >= cfg.max_seconds)
    if accelerator.num_processes > 1 and cfg.max_seconds:
        time_up = False
        if read:  # the planner acts only here; the schedule's provisional total too (the learning rate follows it:
            # each process's own made their rates, and so their weights, part for good)
            plan = broadcast(torch.tensor([float(state.total_steps), float(state.elapsed >= cfg.max_seconds),
                                           float(state.schedule_steps)], device=accelerator.device))
            state.total_steps, time_up, state.schedule_steps = int(plan[0]), bool(plan[1]), int(plan[2])
    return state.step >= state.total_steps or time_up


def _bar(console: Console, shown: bool, state: TrainState) -> tuple[Progress, int]:
    """The training progress bar (steps done of the planned total, the last logged line) and its task."""
    bar = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                   TimeRemainingColumn(), console=console, disable=not shown, transient=False)
    return bar, bar.add_task("train", total=state.total_steps, completed=state.step, info="")


def _interrupted(window: DeviceWindow, state: TrainState, cfg: TrainConfig, accelerator: Accelerator, run_dir: Path,
                 stepper: Stepper, objective, console: Console) -> None:
    """After a Ctrl-C: the step just taken written as a checkpoint (its metrics window read into the state, so a
    resume's first logged loss is the uninterrupted run's), a line saying how to go on, and KeyboardInterrupt."""
    window.flush(state, accelerator)
    if not checkpointing.due(cfg, state, False):  # (a save_every step has its checkpoint already)
        checkpointing.save(run_dir, state, accelerator, stepper.ddp_model, stepper.optimizer, stepper.scheduler,
                           cfg.keep_checkpoints, objective)
    console.print(f"interrupted at step {state.step:,}: checkpoint step-{state.step} written; the same command with "
                  "--resume goes on from it")
    raise KeyboardInterrupt


def _read(window: DeviceWindow, state: TrainState, cfg: TrainConfig, accelerator: Accelerator, run_dir: Path,
          model: Model, optimizer, console: Console) -> None:
    """Read the device's window into `state`; report skipped non-finite steps, and reload the last checkpoint
    after `max_bad_steps` of them in a row."""
    skipped = window.flush(state, accelerator)
    main = accelerator.is_main_process
    if skipped and main:
        console.print(f"[yellow]step {state.step}: non-finite loss or gradient, "
                      + ("update skipped" if skipped == 1 else f"{skipped} updates skipped since the last read")
                      + f" ({state.bad_in_row} in a row, {state.skipped_steps} in all)")
    # a run of bad steps still going on (one that ended between two reads left the weights untouched: skipped
    # updates change nothing, so there is nothing to reload)
    if state.bad_in_row >= cfg.max_bad_steps:
        checkpointing.recover(cfg, state, run_dir, model, optimizer, console, main)
        window.reset_bad_run()


def train_best(model: Model, objective: SupervisedObjective, cfg: TrainConfig, run_dir: Path, accelerator: Accelerator,
               metric: str, resume: bool = False, console: Console | None = None, progress: bool = True,
               resumed: Callable[[], None] | None = None) -> tuple[dict, Model | None]:
    """`train` with a validation `metric` (finetuning), then the best checkpoint's weights written as
    RUN/model.safetensors (main process). Returns the summary a finetuning run's results.json starts from, and the
    best weights as a whole model on the main process (None on the others): `model` itself with them loaded, or
    under FSDP a plain copy read from the best file (the shards are not loaded back: nothing reads them again)."""
    result = train(model, objective, cfg, run_dir, accelerator, resume=resume, console=console, progress=progress,
                   metric=metric, resumed=resumed)
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
    # no evaluation gave a finite metric (a constant prediction's correlation): the last step's weights are the
    # run's, and best_step says so (it read 0, a step never trained; a review, 2026-11-28)
    kept = result["state"]["best_step"] if best is not None else result["state"]["step"]
    summary = {"out": str(run_dir), "best_step": kept, "metric": metric,
               "steps": result["state"]["step"], "stopped_early": result["state"]["stopped_early"],
               "precision": result["state"]["precision"], **({} if best is not None else {"no_best": True})}
    return summary, whole if main else None

