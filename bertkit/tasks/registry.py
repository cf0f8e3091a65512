"""Every task kind, by the name a config gives it: pretraining objectives (`train.objective`) and finetuning tasks
(`task.kind`; seq2seq has its own job, `bertkit finetune seq2seq`, and its objective in `tasks/seq2seq.py`)."""

from __future__ import annotations

import dataclasses

from bertkit.config import Config
from bertkit.errors import BertkitError
from bertkit.tasks import classify, clm, mlm, ner, regress, rtd, sentence
from bertkit.tasks.base import FinetuneTask, PretrainTask

PRETRAINING: dict[str, PretrainTask] = {task.name: task for task in (mlm.TASK, clm.TASK, rtd.TASK)}
FINETUNING: dict[str, FinetuneTask] = {task.kind: task for task in (classify.TASK, regress.TASK, ner.TASK, sentence.TASK)}


def finetune_task(kind: str) -> FinetuneTask:
    """The finetuning task `task.kind` names (one clear line for a kind `finetune` does not train)."""
    if kind not in FINETUNING:
        hint = " (train encoder-decoders with `finetune seq2seq`)" if kind == "seq2seq" else ""
        raise BertkitError(f"task.kind: {kind!r} is not a finetuning task (allowed: {'|'.join(FINETUNING)}){hint}")
    return FINETUNING[kind]


def with_pretraining_heads(config: Config) -> Config:
    """The config with the heads its pretraining objective adds (an MLM head, an LM head, ELECTRA's) before its own:
    what `bertkit pretrain` trains, and what `info RECIPE` counts; unchanged where the objective does not fit the
    stack."""
    task = PRETRAINING.get(config.train.objective)
    if task is None or task.architecture != config.model.architecture:
        return config
    names = tuple(dict.fromkeys(task.heads + config.heads.names))
    return dataclasses.replace(config, heads=dataclasses.replace(config.heads, names=names))
