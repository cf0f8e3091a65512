"""Model-dependent training defaults: the automatic learning rate and how a run states its plan."""

import dataclasses

import pytest

from bertkit.config import Config, ModelConfig, TrainConfig
from bertkit.recipes import load_recipe
from bertkit.train.defaults import DEFAULT_LEARNING_RATE, finetune_learning_rate, with_learning_rate
from bertkit.train.loop import plan_text


def test_auto_rate_follows_the_width():
    rate = {d: finetune_learning_rate("classify", ModelConfig(d_model=d, n_heads=4)) for d in (128, 256, 384, 768)}
    assert rate == {128: 7.3e-4, 256: 2.6e-4, 384: 1.4e-4, 768: 5e-5}  # BERT-base's 5e-5 at 768
    assert finetune_learning_rate("ner", ModelConfig(d_model=768, n_heads=12)) == 5e-5
    # sentence embeddings too (measured: SBERT's 2e-5, scaled, was too low for narrow models)
    assert finetune_learning_rate("sentence", ModelConfig(d_model=256, n_heads=4)) == 2.6e-4
    assert finetune_learning_rate("classify", ModelConfig(d_model=32, n_heads=4)) == 2e-3  # capped


def test_an_explicit_rate_is_kept_and_the_default_recipes_are_auto():
    config = Config()
    assert config.train.learning_rate is None
    assert with_learning_rate(config, 1e-3).train.learning_rate == 1e-3
    explicit = dataclasses.replace(config, train=dataclasses.replace(config.train, learning_rate=3e-5))
    assert with_learning_rate(explicit, 1e-3).train.learning_rate == 3e-5
    for recipe in ("finetune-classify", "finetune-ner", "finetune-sentence"):
        assert load_recipe(recipe).train.learning_rate is None, recipe
    assert load_recipe("finetune-classify", ["learning_rate=2e-4"]).train.learning_rate == 2e-4
    assert load_recipe("finetune-sst2", ["learning_rate=none"]).train.learning_rate is None
    assert DEFAULT_LEARNING_RATE == 5e-4


def test_the_plan_line_says_what_limits_the_run():
    assert plan_text(TrainConfig(max_steps=300), 100.0, 32) == "300 steps of 32 (3.00 epochs)"
    timed = TrainConfig(max_steps=2000, max_time="1m", epochs=1.0)
    assert plan_text(timed, 2000.0, 32) == ("steps of 32: as many as the 1m budget allows, at most 2,000 "
                                            "(1.00 epochs)")
    assert plan_text(TrainConfig(max_steps=10 ** 9, max_time="2m"), 10.0, 8) == \
        "steps of 8: as many as the 2m budget allows"
    with pytest.raises(Exception, match="train.learning_rate: must be > 0"):
        TrainConfig(learning_rate=0.0)
