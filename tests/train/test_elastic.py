"""Elastic resume's arithmetic: a run's global batch kept under another process count (the accumulation follows), or
for mnrl's cross-process negatives its candidate pool (batch_size follows); a count that cannot make it up is one
clear error; a checkpoint from before the record counts its processes by its RNG states."""

from __future__ import annotations

import json

import pytest
import torch

from bertkit.config import TrainConfig
from bertkit.errors import BertkitError
from bertkit.run.checkpoints import saved_processes
from bertkit.train.elastic import elastic_train


def _run(tmp_path, **state):
    step = tmp_path / "checkpoints" / "step-4"
    step.mkdir(parents=True)
    (step / "state.json").write_text(json.dumps({"step": 4, **state}))
    return tmp_path


def test_the_accumulation_follows_the_process_count(tmp_path):
    run, train = _run(tmp_path, processes=2), TrainConfig(batch_size=4, accumulation_steps=3)  # global batch 24
    assert elastic_train(train, run, True, 2) == (train, None)
    assert elastic_train(train, run, False, 1) == (train, None)  # a fresh run: nothing to keep
    one, line = elastic_train(train, run, True, 1)
    assert (one.batch_size, one.accumulation_steps) == (4, 6) and "global batch 24 kept" in line
    three, _ = elastic_train(train, run, True, 3)
    assert (three.batch_size, three.accumulation_steps) == (4, 2)
    with pytest.raises(BertkitError, match=r"global batch of 24 .* 4 process\(es\) of 4 cannot make it up — resume "
                                           r"with a process count that divides 6"):
        elastic_train(train, run, True, 4)


def test_mnrl_keeps_the_pool_every_anchor_ranks_against(tmp_path):
    run, train = _run(tmp_path, processes=2), TrainConfig(batch_size=4, accumulation_steps=3)  # pools of 8 rows
    one, line = elastic_train(train, run, True, 1, keep_pool=True)
    assert (one.batch_size, one.accumulation_steps) == (8, 3) and "the 8 rows mnrl ranks against" in line
    four, _ = elastic_train(train, run, True, 4, keep_pool=True)
    assert (four.batch_size, four.accumulation_steps) == (2, 3)
    with pytest.raises(BertkitError, match="cannot split it evenly — resume with a process count that divides 8"):
        elastic_train(train, run, True, 3, keep_pool=True)


def test_a_checkpoint_from_before_the_record_counts_its_rng_states(tmp_path):
    run = _run(tmp_path)  # no "processes" in its state
    torch.save([{"cpu": torch.get_rng_state()}] * 2, run / "checkpoints" / "step-4" / "rng.pt")
    assert saved_processes(run / "checkpoints" / "step-4") == 2
    one, _ = elastic_train(TrainConfig(batch_size=4), run, True, 1)
    assert one.accumulation_steps == 2
