"""Evaluation inside the loop: when it runs, what it logs, and the best checkpoint with early stopping."""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast
from rich.console import Console

from bertkit.config import TrainConfig
from bertkit.errors import BertkitError
from bertkit.nn.model import Model
from bertkit.run.checkpoints import save_best
from bertkit.train.sharding import full_weights
from bertkit.train.state import KEPT_EVALS, TrainState
from bertkit.train.window import MetricsWriter


def plain(accelerator: Accelerator, ddp_model) -> Model:
    """The model itself: without the DDP wrapper and without torch.compile's (its state dict has the plain names;
    evaluation runs eagerly instead of compiling every evaluation shape)."""
    return accelerator.unwrap_model(ddp_model, keep_torch_compile=False)


class Evaluator:
    """Runs the objective's evaluation every `eval_every` steps and at the end (timed into `state.eval_seconds`
    for the budget planner), logs it, and with a `metric` keeps the best weights in checkpoints/best/ and stops
    the run after `patience` evaluations without improvement."""

    def __init__(self, objective, cfg: TrainConfig, metric: str | None, run_dir: Path, accelerator: Accelerator,
                 metrics: MetricsWriter, console: Console):
        self.objective, self.cfg, self.metric, self.run_dir = objective, cfg, metric, run_dir
        self.accelerator, self.metrics, self.console = accelerator, metrics, console

    def due(self, state: TrainState, last: bool) -> bool:
        """Whether the step just taken is evaluated."""
        return state.step % self.cfg.eval_every == 0 or last

    def __call__(self, state: TrainState, ddp_model) -> tuple[dict, bool]:
        """Evaluate now; returns (metrics, whether early stopping ends the run)."""
        started = time.perf_counter()
        evaluation = self.objective.evaluate(plain(self.accelerator, ddp_model))
        state.evaluations += 1
        took = time.perf_counter() - started
        state.eval_seconds += took
        state.eval_times = (list(state.eval_times) + [took])[-KEPT_EVALS:]
        self.metrics.log({"kind": "eval", "step": state.step, **evaluation})
        main = self.accelerator.is_main_process
        if main and evaluation:
            self.console.print(f"step {state.step}: " + "  ".join(f"{k} {v:.4f}" for k, v in evaluation.items()))
        if self.metric is None or not evaluation:
            return evaluation, False
        stop = self.track_best(evaluation, state, ddp_model)
        if stop and main:
            self.console.print(f"early stop: {self.metric} has not improved for {state.stale_evals} evaluations "
                               f"(best {state.best_value:.4f} at step {state.best_step})")
        return evaluation, stop

    def track_best(self, evaluation: dict, state: TrainState, ddp_model) -> bool:
        """Keep the best weights in checkpoints/best/; returns True when early stopping should end the run."""
        metric, accelerator = self.metric, self.accelerator
        if metric not in evaluation:
            raise BertkitError(f"train.metric: {metric!r} is not a validation metric (available: "
                               f"{', '.join(evaluation)})")
        value, loss = float(evaluation[metric]), float(evaluation.get("val_loss", math.nan))
        if accelerator.num_processes > 1:  # every process decides as the main one does: one taking the "better"
            # branch alone would wait at its gathers and barrier for the others for good (evaluations agree only as
            # far as every process evaluates the same weights on the same examples)
            value, loss = broadcast(torch.tensor([value, loss], dtype=torch.float64, device=accelerator.device))
            value, loss = float(value), float(loss)
        if state.best_metric and state.best_metric != metric:  # a resume whose metric changed (NER's follows its
            # validation file's entities): a val_loss best and an f1 are not comparable, so the best starts over
            if accelerator.is_main_process:
                self.console.print(f"[yellow]the best checkpoint so far was picked by {state.best_metric}, this run "
                                   f"picks by {metric}: the best starts over")
            state.best_value, state.best_step, state.stale_evals = None, 0, 0
            state.best_metric, state.best_loss = metric, None  # (said once, not at every evaluation)
        lower_is_better = "loss" in metric or "ppl" in metric
        improved = state.best_value is None or (value < state.best_value if lower_is_better
                                                else value > state.best_value)
        # a tie (entity F1 0.0 at every evaluation while a tagger learns to tag, an accuracy that did not move) is
        # broken by the validation loss: the first evaluation was kept, the weights of the worst loss. It keeps the
        # better weights but is no improvement of the metric: patience counts it as stale
        tie = value == state.best_value and state.best_loss is not None and loss < state.best_loss
        if (improved or tie) and math.isfinite(value):
            state.best_value, state.best_step = float(value), state.step
            state.stale_evals = 0 if improved else state.stale_evals + 1
            state.best_metric, state.best_loss = metric, (loss if math.isfinite(loss) else None)
            whole = full_weights(plain(accelerator, ddp_model))  # gathered when sharded: every process takes part
            if accelerator.is_main_process:
                save_best(self.run_dir, whole, state.step, metric, value)
            accelerator.wait_for_everyone()
        else:
            state.stale_evals += 1
        state.stopped_early = bool(self.cfg.patience) and state.stale_evals >= self.cfg.patience
        return state.stopped_early
