"""Every task kind, by the name a config gives it: pretraining objectives (`train.objective`) and finetuning tasks
(`task.kind`; seq2seq has its own job, `bertkit finetune seq2seq`, and its objective in `tasks/seq2seq.py`)."""

from __future__ import annotations

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
