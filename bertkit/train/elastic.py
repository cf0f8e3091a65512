"""Elastic resume: a run checkpointed with P processes continues with W. A run's global batch — batch_size x processes
x accumulation_steps at its first launch — is what its batches, schedule and results are made of (`objective.batch`
is a pure function of (seed, step) over the global batch), so a resume keeps it and lets the accumulation follow the
process count: batch_size stays per process, accumulation = global / (batch_size x W). config.json keeps the run's
own settings; the checkpoint records the process count the run began with (`TrainState.processes`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rich.console import Console

from bertkit.config import Config, TrainConfig
from bertkit.errors import BertkitError
from bertkit.run.checkpoints import latest_checkpoint, read_state


def elastic_train(train: TrainConfig, out: str | Path, resume: bool, world: int) -> tuple[TrainConfig, str | None]:
    """The [train] section to run with `world` processes, and a line saying what changed (None: nothing). A run
    that began with the same process count, a fresh run, or a checkpoint that predates the record is unchanged; a
    global batch the new process count cannot divide is a user error naming the sizes."""
    checkpoint = latest_checkpoint(out) if resume else None
    began = read_state(checkpoint).get("processes", 0) if checkpoint is not None else 0
    if not began or began == world:
        return train, None
    global_batch = train.batch_size * train.accumulation_steps * began
    accumulation, rest = divmod(global_batch, train.batch_size * world)
    if rest or not accumulation:
        raise BertkitError(
            f"{out}: began with {began} process(es) and a global batch of {global_batch} (train.batch_size "
            f"{train.batch_size} x {began} x train.accumulation_steps {train.accumulation_steps}); {world} "
            f"process(es) of {train.batch_size} cannot make it up — resume with a process count that divides "
            f"{global_batch // train.batch_size}")
    return (dataclasses.replace(train, accumulation_steps=accumulation),
            f"resuming a {began}-process run with {world}: accumulation_steps {train.accumulation_steps} -> "
            f"{accumulation} per step (global batch {global_batch} kept)")


def with_processes(config: Config, out: str | Path, resume: bool, world: int, console: Console, main: bool) -> Config:
    """`config` with its [train] section for `world` processes (`elastic_train`), saying so on the main process."""
    train, change = elastic_train(config.train, out, resume, world)
    if change and main:
        console.print(change)
    return dataclasses.replace(config, train=train)
