"""Training defaults that depend on the model: the learning rate of `train.learning_rate = none` ("auto").

A single number cannot fit every model. BERT's finetuning rate (5e-5, Devlin et al.) is tuned for 768-wide
BERT-base and is far too low for a 128-wide model trained for a minute: the classifier then ends at the majority
class. Adam's best rate for hidden weights shrinks with the width (μP: ~1/fan-in), and a small model finetuned
briefly wants more still; the rule below goes through BERT-base's 5e-5 at 768 and the rates measured here on
SST-2 for narrower models (README › Finetuning defaults).
"""

from __future__ import annotations

import dataclasses

import torch

from bertkit.config import Config, ModelConfig

DEFAULT_LEARNING_RATE = 5e-4  # pretraining (and any run that does not say), the loop's fallback
# Rate at BERT-base width (768) per task kind; narrower models scale up as (768 / d_model) ** WIDTH_EXPONENT.
# SBERT trained BERT-base at 2e-5, but scaled from there the rate was too low for narrow models: STS-B test Spearman
# after SBERT training rose from 55.5 to 62.5 at d_model 256 going from 1e-4 to 3e-4 (1e-3 diverged), and from
# 57.6 to 62.6 at d_model 128 going from 2.9e-4 to 7.3e-4 (README › Budget pretraining): sentence training takes
# the same rate as the other kinds.
BASE_RATES = {"classify": 5e-5, "ner": 5e-5, "sentence": 5e-5}
REFERENCE_WIDTH = 768
WIDTH_EXPONENT = 1.5
MAX_AUTO_RATE = 2e-3  # never above this, however narrow the model


def finetune_learning_rate(kind: str, model: ModelConfig) -> float:
    """The automatic finetuning rate for a `kind` task on `model`: 5e-5 at d_model 768, ×(768 / d_model)^1.5 for
    narrower models (128 → 7.3e-4), capped at 2e-3."""
    rate = BASE_RATES.get(kind, BASE_RATES["classify"]) * (REFERENCE_WIDTH / model.d_model) ** WIDTH_EXPONENT
    return float(f"{min(MAX_AUTO_RATE, rate):.2g}")  # two significant digits: readable in config.json


def with_learning_rate(config: Config, rate: float) -> Config:
    """`config` with train.learning_rate set to `rate` where it is none (auto); an explicit rate is kept."""
    if config.train.learning_rate is not None:
        return config
    return dataclasses.replace(config, train=dataclasses.replace(config.train, learning_rate=rate))


# torch.compile (train.compile = "auto"): when compiling pays back within a run, per device type. A run is long enough
# at twice the break-even (so that a machine slower to compile still gains), counted in steps for a step-limited run
# and in seconds of training for a time-budgeted one. The break-even is the compile cost over the time each compiled
# step saves; the largest of those measured (benchmarks/gpu_check.sh's bare-compiled and bare-mini rows, bf16,
# batch 128 x 128, torch 2.11):
#   H100, BERT-base 12 x 768 (issue 33's table): 1.42x eager after 37.6 s: ~2,770 steps, ~127 s of eager training
#   H200, BERT-base 12 x 768 (2026-11-27):       1.20x eager after 34.5 s: ~5,182 steps, ~203 s
#   H200, mini 4 x 256 (2026-11-27):             1.11x eager after 21.7 s: ~14,605 steps, ~214 s
# In seconds the break-even hardly moves with the shape (127-214 s); in steps it does (a small model's steps are
# short), so the step rule takes the mini's. None: not measured to win there (CPU: benchmarks/compile_speed.py).
COMPILE_BREAK_EVEN_STEPS: dict[str, int | None] = {"cpu": None, "cuda": 14_605}
COMPILE_BREAK_EVEN_SECONDS: dict[str, float | None] = {"cpu": None, "cuda": 214.0}


def use_compile(setting: str, device: torch.device, steps: int, seconds: float | None = None) -> tuple[bool, str]:
    """Whether a run of `steps` more steps (or, under a time budget, `seconds` more seconds) on `device` trains
    through torch.compile, and why: `on` / `off` as given; `auto` on where compiling was measured to pay back
    within the run (twice the break-even)."""
    if setting != "auto":
        return setting == "on", "train.compile = " + setting
    even = COMPILE_BREAK_EVEN_STEPS.get(device.type)
    if even is None:
        return False, f"auto: not measured to pay on {device.type}"
    if steps < 2 * even:
        return False, f"auto: {steps:,} steps are too few to win back the compile time ({2 * even:,} needed)"
    even_s = COMPILE_BREAK_EVEN_SECONDS.get(device.type) or 0.0
    if seconds is not None and seconds < 2 * even_s:
        return False, (f"auto: a {seconds:,.0f} s budget is too short to win back the compile time "
                       f"({2 * even_s:,.0f} s needed)")
    if seconds is not None:
        return True, f"auto: a {seconds:,.0f} s budget wins back the compile time (break-even ~{even_s:,.0f} s)"
    return True, f"auto: {steps:,} steps win back the compile time (break-even ~{even:,})"
