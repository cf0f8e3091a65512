"""The contrastive term inside MLM pretraining (`train.contrastive_weight`): each block's two views (two maskings, or
its two halves) in adjacent rows, SimCSE's in-batch loss between their mean-pooled vectors written out by hand,
validation still plain MLM on whole blocks."""

import dataclasses
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bertkit.config import Config, ConfigError, DataConfig, TrainConfig
from bertkit.jobs.info import step_flops
from bertkit.nn.model import Model
from bertkit.tasks.contrast import split_halves, view_contrast
from bertkit.tasks.mlm import MLMObjective
from bertkit.text.collate import IGNORE_INDEX
from bertkit.text.tokenizer import special_ids
from bertkit.train.accelerator import make_accelerator
from bertkit.train.loop import train
from conftest import cli_process, heads, repeated_corpus, tiny


def test_view_contrast_is_simcse_written_out():
    pooled = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))  # 3 blocks, views interleaved
    loss, correct = view_contrast(pooled, 20.0)
    unit = [p / p.norm() for p in pooled]
    for row in range(6):
        block, other_side = row // 2, 1 - row % 2  # the row's block, and the side its candidates come from
        scores = torch.stack([20.0 * unit[row] @ unit[2 * j + other_side] for j in range(3)])  # (3,)
        assert float(loss[row]) == pytest.approx(float(-scores.log_softmax(0)[block]), rel=1e-5)
        assert bool(correct[row]) == (int(scores.argmax()) == block)
    same = torch.randn(3, 8).repeat_interleave(2, dim=0)  # identical views: each finds its twin
    assert view_contrast(same, 20.0)[1].all()


def _objective(packed, tokenizer, whole_word_mask=False, **train) -> MLMObjective:
    cfg = TrainConfig(**{"batch_size": 8, **train})
    return MLMObjective(packed, special_ids(tokenizer), 400, DataConfig(block_size=32, whole_word_mask=whole_word_mask),
                        cfg)


def test_each_block_comes_twice_under_two_maskings(packed, sample_tokenizer):
    paired = _objective(packed, sample_tokenizer, contrastive_weight=0.5)
    plain = _objective(packed, sample_tokenizer, batch_size=4)  # the same 4 blocks a step, one masking each
    batch, single = paired.batch(3), plain.batch(3)
    assert batch["input_ids"].shape == (8, 32) and paired.global_batch == 8
    # the first views are exactly plain MLM's batch; the second ones mask the same blocks elsewhere
    assert torch.equal(batch["input_ids"][0::2], single["input_ids"])
    assert torch.equal(batch["labels"][0::2], single["labels"])
    original = torch.where(batch["labels"] != IGNORE_INDEX, batch["labels"], batch["input_ids"])  # (8, 32)
    assert torch.equal(original[0::2], original[1::2])
    assert not torch.equal(batch["labels"][0::2] != IGNORE_INDEX, batch["labels"][1::2] != IGNORE_INDEX)
    masked = int((batch["labels"] != IGNORE_INDEX).sum())
    assert batch["masked_per_row"].tolist() == pytest.approx([masked / 8] * 8)
    assert torch.equal(paired.batch(3)["labels"], batch["labels"])  # seeded: a resumed step sees the same masks
    # validation is unchanged: one masking per block, scored as plain MLM (comparable with an MLM run's)
    model = Model(tiny(vocab_size=400), heads("mlm"))
    assert "masked_per_row" not in paired.validation[0]
    assert paired.evaluate(model) == plain.evaluate(model)


def test_halves_split_each_block_into_two_rows_of_new_text(packed, sample_tokenizer):
    special = special_ids(sample_tokenizer)
    halves = _objective(packed, sample_tokenizer, contrastive_weight=0.5, contrastive_views="halves")
    plain = _objective(packed, sample_tokenizer, batch_size=4)  # the same 4 blocks a step
    batch = halves.batch(3)
    blocks = plain.source.rows(3)["input_ids"]  # (4, 32)
    assert batch["input_ids"].shape == (8, 16) and halves.global_batch == 8
    original = torch.where(batch["labels"] != IGNORE_INDEX, batch["labels"], batch["input_ids"])  # (8, 16)
    # row 2i: block i's first half; row 2i + 1: its second half, [CLS] in place of the first token
    assert torch.equal(original[0::2], torch.from_numpy(blocks[:, :16].astype("int64")))
    assert torch.equal(original[1::2, 1:], torch.from_numpy(blocks[:, 17:].astype("int64")))
    assert (original[:, 0] == special.cls).all() and (batch["labels"][:, 0] == IGNORE_INDEX).all()
    masked = int((batch["labels"] != IGNORE_INDEX).sum())
    assert masked > 0 and batch["masked_per_row"].tolist() == pytest.approx([masked / 8] * 8)
    assert torch.equal(halves.batch(3)["labels"], batch["labels"])  # seeded: a resumed step sees the same masks
    model = Model(tiny(vocab_size=400), heads("mlm"))
    loss_sum, stats = halves.loss(model, batch)
    assert torch.isfinite(loss_sum) and "contrastive_loss" in stats
    assert halves.eval_batch == 4 and halves.evaluate(model) == plain.evaluate(model)  # whole blocks, plain MLM
    # whole-word masks: the word flags split with the ids, and a word cut at the middle starts again after [CLS]
    flags = np.array([[1, 0, 0, 1, 0, 0, 1, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
    assert split_halves(flags, 1).tolist() == [[1, 0, 0, 1], [1, 0, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
    assert flags[0, 4] == 0  # the source is left as it was
    words = _objective(packed, sample_tokenizer, whole_word_mask=True, contrastive_weight=0.5,
                       contrastive_views="halves").batch(3)
    assert words["input_ids"].shape == (8, 16) and (words["labels"][:, 0] == IGNORE_INDEX).all()
    # FLOPs per token (bertkit info) count rows of half a block
    config = Config(model=tiny(), data=DataConfig(block_size=32),
                    train=TrainConfig(contrastive_weight=1.0, contrastive_views="halves"))
    assert step_flops(config)["tokens_per_row"] == 16
    assert step_flops(dataclasses.replace(config, train=TrainConfig()))["tokens_per_row"] == 32
    with pytest.raises(ConfigError, match='data.block_size: must be even with train.contrastive_views = "halves"'):
        dataclasses.replace(config, data=DataConfig(block_size=33))


def test_the_loss_is_mlm_plus_the_weighted_mean_contrast(packed, sample_tokenizer):
    objective = _objective(packed, sample_tokenizer, contrastive_weight=0.5)
    model = Model(tiny(vocab_size=400), heads("mlm"))
    batch = objective.batch(0)
    loss_sum, stats = objective.loss(model, batch)
    selected = batch["labels"] != IGNORE_INDEX
    masked = int(selected.sum())
    with torch.no_grad():
        mlm = F.cross_entropy(model(batch["input_ids"], mlm_select=selected).logits, batch["labels"][selected])
        pooled = model(batch["input_ids"]).last_hidden_state.mean(1)  # (8, D): mean over the block's tokens
        contrast, hits = view_contrast(pooled, 20.0)
    # the loop divides by the global batch's masked tokens: MLM's mean + 0.5 × the contrastive mean over rows
    assert float(loss_sum.detach()) / masked == pytest.approx(float(mlm + 0.5 * contrast.mean()), rel=1e-5)
    assert float(stats["contrastive_loss"]) / masked == pytest.approx(float(contrast.mean()), rel=1e-5)
    assert float(stats["contrastive_accuracy"]) / masked == pytest.approx(float(hits.mean()), rel=1e-5)
    # two micro-batches of whole pairs: the same per-row factor keeps the sum a global mean
    halves = [objective.loss(model, {k: v[i:i + 4] for k, v in batch.items()})[0] for i in (0, 4)]
    first, second = (view_contrast(pooled[i:i + 4], 20.0)[0] for i in (0, 4))
    expected = mlm + 0.5 * torch.cat([first, second]).mean()
    assert float(sum(halves).detach()) / masked == pytest.approx(float(expected), rel=1e-5)


def test_training_with_the_term_learns_to_match_views(tmp_path, packed, sample_tokenizer):
    cfg = TrainConfig(batch_size=16, max_steps=12, log_every=1, eval_every=6, save_every=100, learning_rate=2e-3,
                      contrastive_weight=1.0)
    torch.manual_seed(0)
    model = Model(tiny(vocab_size=400), heads("mlm"))
    objective = MLMObjective(packed, special_ids(sample_tokenizer), 400, DataConfig(block_size=32), cfg)
    (tmp_path / "run").mkdir()
    train(model, objective, cfg, tmp_path / "run", make_accelerator("fp32"), progress=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["kind"] == "train"]
    assert len(steps) == 12 and all(0.0 <= r["contrastive_accuracy"] <= 1.0 for r in steps)
    assert steps[-1]["contrastive_loss"] < steps[0]["contrastive_loss"]
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert {"val_loss", "val_accuracy"} <= set(next(r for r in records if r["kind"] == "eval"))


def test_bad_contrastive_settings_are_one_line(tmp_path):
    with pytest.raises(ConfigError, match="train.contrastive_views"):
        TrainConfig(contrastive_views="crops")
    with pytest.raises(ConfigError, match="train.contrastive_weight: must be >= 0"):
        TrainConfig(contrastive_weight=-1)
    with pytest.raises(ConfigError, match="train.contrastive_scale: must be > 0"):
        TrainConfig(contrastive_scale=0)
    assert dataclasses.replace(TrainConfig(), contrastive_weight=0.1).batch_size == 32
    corpus = repeated_corpus(tmp_path / "corpus.txt", 3)
    tiny_run = ["--recipe", "tiny", "--corpus", corpus, "--no-progress", "--out", tmp_path / "a"]
    for args, match in ((["--set", "contrastive_weight=0.1", "--set", "batch_size=5"],
                         "train.batch_size: must be even with train.contrastive_weight > 0"),
                        (["--set", "contrastive_weight=0.1", "--objective", "rtd"],
                         "train.contrastive_weight: the contrastive term trains with objective mlm only"),
                        (["--set", "contrastive_weight=0.1", "--set", "contrastive_views=halves",
                          "--set", "block_size=33"],
                         'data.block_size: must be even with train.contrastive_views = "halves"')):
        result = cli_process("pretrain", *tiny_run, *args, check=False)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert result.returncode == 2 and len(errors) == 1 and match in errors[0], result.stderr[-2000:]
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("views, said", [("maskings", "4 blocks x 2 maskings"),
                                         ("halves", "4 blocks x 2 halves of 16 tokens")])
def test_a_pretrain_run_with_the_term_says_so_and_logs_it(tmp_path, views, said):
    corpus = repeated_corpus(tmp_path / "corpus.txt", 3)
    out = tmp_path / "run"
    result = cli_process("pretrain", "--recipe", "tiny", "--corpus", corpus, "--no-progress", "--out", out,
                         "--max-steps", "4", "--set", "log_every=1", "--set", "batch_size=8", "--set", "vocab_size=400",
                         "--set", "block_size=32", "--set", "min_frequency=1",
                         "--set", "contrastive_weight=0.5", "--set", f"contrastive_views={views}")
    assert f"global batch 8 rows ({said}, contrastive weight 0.5)" in " ".join(result.stderr.split())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("contrastive_loss" in r for r in records if r["kind"] == "train")
    stored = json.loads((out / "config.json").read_text())["train"]
    assert (stored["contrastive_weight"], stored["contrastive_views"]) == (0.5, views)
