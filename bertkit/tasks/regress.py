"""Regression (`finetune classify --regression`, `task.kind = "regress"`): one score per text (or text pair), the
classifier head with a single output trained by mean squared error; validation Pearson and Spearman correlation
(scipy) — STS-B's GLUE metrics, the task `bertkit glue` needs it for."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch

from bertkit.config import Config, TrainConfig
from bertkit.errors import BertkitError
from bertkit.inference import batched_logits
from bertkit.metrics import correlation_metrics
from bertkit.nn.model import Model
from bertkit.tasks.base import encode_texts
from bertkit.tasks.classify import ClassifyTask
from bertkit.tasks.labelled import LabelledObjective
from bertkit.text.features import Encoded, TaskEncoder

SCORE_LABEL = "score"  # the one "label" a regression run's labels.json names: its head has one output


def scores_of(examples: list, source: str = "task.label_column") -> list[float]:
    """The examples' labels as floats; a label that is not a finite number is one clear error."""
    values = []
    for number, example in enumerate(examples, start=1):
        try:
            value = float(example.label)
        except (TypeError, ValueError):
            value = math.nan
        if not math.isfinite(value):
            raise BertkitError(f"{source}: regression needs a number in every row; example {number} has "
                               f"{example.label!r}")
        values.append(value)
    return values


class RegressObjective(LabelledObjective):
    """Mean squared error of the classifier head's single output; validation MSE, Spearman and Pearson."""

    head = "classifier"
    outputs = 1  # the score
    default_metric = "spearman"
    metric_names = ("val_loss", "spearman", "pearson")

    def __init__(self, examples: list[Encoded], targets: list[float], validation: list[Encoded],
                 validation_gold: list[float], pad_id: int, train: TrainConfig, world: int = 1):
        super().__init__(examples, targets, pad_id, train, world, len(validation))
        self.validation, self.validation_gold = validation, validation_gold

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        rows = self.sampler.rows(step).tolist()
        return {**self._inputs(rows), "labels": torch.tensor([self.targets[r] for r in rows], dtype=torch.float32)}

    @staticmethod
    def normalizer(batch: dict[str, torch.Tensor]) -> float:
        return float(batch["labels"].shape[0])

    def init_head(self, model: Model) -> None:
        """Start the head's output at the training scores' mean: from 0, with STS-B's mean near 2.7, a short run
        spent its first steps moving every prediction up, a gradient that is the same for every example and
        carries nothing about which pair is closer."""
        with torch.no_grad():
            model.heads[self.head].out.bias.fill_(float(np.mean(self.targets)))

    def loss(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        predicted = self._logits(model, micro).float()[:, 0]  # (B,)
        return ((predicted - micro["labels"]) ** 2).sum(), {}

    def evaluate(self, model: Model) -> dict[str, float]:
        if not self.validation:
            return {}
        with full_precision(model):  # a score in bf16 is rounded to ~0.03 near 5: ties, NaN correlations early,
            # and a best checkpoint picked on other numbers than `evaluate` and results.json give (fp32)
            predicted = np.stack(batched_logits(model, self.validation, self.head, self.pad_id,
                                                self.eval_batch))[:, 0]
        gold = np.asarray(self.validation_gold)
        scores = correlation_metrics(gold, predicted)
        return {"val_loss": float(((predicted - gold) ** 2).mean()), "spearman": scores["spearman"],
                "pearson": scores["pearson"]}


@contextlib.contextmanager
def full_precision(model: torch.nn.Module):
    """The model's own forward for the block: Accelerate's mixed precision wraps an instance's forward in autocast
    (keeping the original as `_original_forward`), which an outer autocast(enabled=False) cannot turn off."""
    original = model.__dict__.get("_original_forward")
    if original is None or "forward" not in model.__dict__:
        yield
        return
    wrapped = model.__dict__["forward"]
    model.forward = original
    try:
        yield
    finally:
        model.forward = wrapped


class RegressTask(ClassifyTask):
    """`task.kind = "regress"`: read like classify (a text, an optional pair, a numeric label column)."""

    kind = "regress"
    graded_name = "scores"
    scores = True

    def label_set(self, examples: list) -> list[str]:
        scores_of(examples)
        return [SCORE_LABEL]

    def final_validation(self, out, model: Model, objective, validation: list, device: torch.device,
                         precision: str) -> dict:
        # fp32 whatever the run trained at, as `evaluate` and `predict` score a regression run by default: in bf16
        # the scores tie (full_precision) and results.json read other numbers than `evaluate` (Spearman NaN / -0.118)
        return super().final_validation(out, model, objective, validation, device, "fp32")

    def example_labels(self, example) -> list[str]:
        return []  # a score is never "unseen"

    def objective(self, config: Config, train: list, validation: list, labels: list[str], encoder: TaskEncoder,
                  pad_id: int, world: int):
        pairs = bool(config.task.text_pair_column)
        encoded = encode_texts(encoder, train, pairs)
        return RegressObjective(encoded, scores_of(train), encode_texts(encoder, validation, pairs),
                                scores_of(validation, "validation"), pad_id, config.train, world), encoded

    def summary(self, config: Config, labels: list[str], world: int = 1) -> str:
        return "one score per example (regression, mean squared error)"


TASK = RegressTask()
