"""The task registry against the config's names: every kind a config can name has its task, and every task
implements its whole contract."""

from __future__ import annotations

import typing

import pytest

from bertkit.config import Objective, TaskKind
from bertkit.errors import BertkitError
from bertkit.tasks.base import FinetuneTask
from bertkit.tasks.registry import FINETUNING, PRETRAINING, finetune_task

CONTRACT = ("read", "label_set", "heads", "objective", "final_validation", "step_flops")


def test_every_configurable_kind_has_its_task():
    assert set(PRETRAINING) == set(typing.get_args(Objective))
    assert set(FINETUNING) | {"seq2seq"} == set(typing.get_args(TaskKind))  # seq2seq: its own job
    for name, task in PRETRAINING.items():
        assert task.name == name and task.architecture in ("encoder", "decoder") and task.heads


@pytest.mark.parametrize("kind", sorted(FINETUNING))
def test_every_finetuning_task_implements_the_contract(kind):
    task = FINETUNING[kind]
    assert task.kind == kind
    missing = [name for name in CONTRACT if getattr(type(task), name) is getattr(FinetuneTask, name)]
    assert not missing, f"{kind} does not implement {missing}"


def test_a_kind_finetune_does_not_train_is_one_clear_error():
    with pytest.raises(BertkitError, match=r"task.kind: 'seq2seq' is not a finetuning task .*finetune seq2seq"):
        finetune_task("seq2seq")
