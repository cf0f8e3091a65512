"""Elastic resume: a run checkpointed with P processes continues with W. A run's global batch — batch_size x processes
x accumulation_steps at its first launch — is what its batches, schedule and results are made of (`objective.batch`
is a pure function of (seed, step) over the global batch), so a resume keeps it and lets the accumulation follow the
process count: batch_size stays per process, accumulation = global / (batch_size x W). A loss whose candidates are
every process's micro-batch at once (mnrl's cross-process negatives) keeps that pool instead: the accumulation
stays and batch_size = batch_size x P / W. config.json keeps the run's own settings; the checkpoint records the
process count the run began with (`TrainState.processes`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rich.console import Console

from bertkit.config import Config, TrainConfig
from bertkit.errors import BertkitError
from bertkit.run.checkpoints import latest_checkpoint, saved_processes


def elastic_train(train: TrainConfig, out: str | Path, resume: bool, world: int, keep_pool: bool = False,
                  ) -> tuple[TrainConfig, str | None]:
    """The [train] section to run with `world` processes, and a line saying what changed (None: nothing). A fresh
    run or one that began with the same process count is unchanged; `keep_pool` keeps the rows of one micro-step
    over all processes (batch_size x processes) rather than batch_size; a global batch the new process count cannot
    make up is a user error naming the sizes."""
    checkpoint = latest_checkpoint(out) if resume else None
    began = saved_processes(checkpoint) if checkpoint is not None else world
    if began == world:
        return train, None
    global_batch = train.batch_size * train.accumulation_steps * began
    if keep_pool:
        batch_size, rest = divmod(train.batch_size * began, world)
        if rest:
            raise BertkitError(
                f"{out}: began with {began} process(es) of train.batch_size {train.batch_size}, whose micro-batches "
                f"are one pool of {train.batch_size * began} (mnrl's cross-process negatives); {world} process(es) "
                f"cannot split it evenly — resume with a process count that divides {train.batch_size * began}")
        return (dataclasses.replace(train, batch_size=batch_size),
                f"resuming a {began}-process run with {world}: batch_size {train.batch_size} -> {batch_size} per "
                f"process (the {train.batch_size * began} rows mnrl ranks against, and global batch "
                f"{global_batch}, kept)")
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


def with_processes(config: Config, out: str | Path, resume: bool, world: int, console: Console, main: bool,
                   keep_pool: bool = False) -> Config:
    """`config` with its [train] section for `world` processes (`elastic_train`; `keep_pool` as there: the task
    says), saying so on the main process."""
    train, change = elastic_train(config.train, out, resume, world, keep_pool)
    if change and main:
        console.print(change)
    return dataclasses.replace(config, train=train)
