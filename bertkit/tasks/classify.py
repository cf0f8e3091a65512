"""Sequence classification (`finetune classify`): one label per text (or text pair), cross-entropy on the
classifier head (pool → dense → tanh → linear), validation accuracy, macro-F1 and MCC (scikit-learn)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.config import Config, TrainConfig
from bertkit.errors import BertkitError
from bertkit.inference import batched_logits, log_softmax
from bertkit.metrics import classification_metrics
from bertkit.nn.model import Model
from bertkit.paths import resolve_data_path
from bertkit.tasks.base import encode_texts
from bertkit.tasks.labelled import LabelledObjective, LabelledTask, sorted_labels
from bertkit.text.features import Encoded, TaskEncoder
from bertkit.text.tasks import LabelledText, read_labelled


class ClassifyObjective(LabelledObjective):
    """Cross-entropy on the classifier head; validation accuracy, macro-F1 and MCC (scikit-learn)."""

    head = "classifier"
    default_metric = "accuracy"
    metric_names = ("val_loss", "accuracy", "macro_f1", "mcc")

    def __init__(self, examples: list[Encoded], labels: list[int], validation: list[Encoded],
                 validation_gold: list[str], label_names: list[str], pad_id: int, train: TrainConfig, world: int = 1):
        super().__init__(examples, labels, pad_id, train, world, len(validation))
        self.validation, self.validation_gold, self.label_names = validation, validation_gold, label_names
        self.outputs = len(label_names)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        rows = self.sampler.rows(step).tolist()
        return {**self._inputs(rows), "labels": torch.tensor([self.targets[r] for r in rows])}

    @staticmethod
    def normalizer(batch: dict[str, torch.Tensor]) -> float:
        return float(batch["labels"].shape[0])

    def loss(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        logits = self._logits(model, micro).float()  # (B, C)
        loss_sum = F.cross_entropy(logits, micro["labels"], reduction="sum")
        return loss_sum, {"accuracy": (logits.argmax(-1) == micro["labels"]).sum()}

    def evaluate(self, model: Model) -> dict[str, float]:
        if not self.validation:
            return {}
        logits = np.stack(batched_logits(model, self.validation, self.head, self.pad_id, self.eval_batch))
        index = {name: i for i, name in enumerate(self.label_names)}
        known = np.array([g in index for g in self.validation_gold])
        log_p = log_softmax(logits)
        gold_ids = np.array([index.get(g, 0) for g in self.validation_gold])
        val_loss = float(-log_p[known, gold_ids[known]].mean()) if known.any() else float("nan")
        predicted = [self.label_names[i] for i in logits.argmax(-1)]
        metrics = classification_metrics(self.validation_gold, predicted, self.label_names)
        return {"val_loss": val_loss, "accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"],
                "mcc": metrics["mcc"]}


class ClassifyTask(LabelledTask):
    """`task.kind = "classify"`."""

    kind = "classify"
    scores = False  # labels are numbers (regression: integers and fractions may mix)

    def settings(self, config: Config, base: Config, model_dir: Path | None, out: Path, resume: bool) -> Config:
        if config.task.text_pair_column and base.model.type_vocab_size < 2:
            raise BertkitError(f"task.text_pair_column: {model_dir} has no segment embeddings for a second "
                               f"text (model.type_vocab_size = {base.model.type_vocab_size})")
        return super().settings(config, base, model_dir, out, resume)

    def read(self, config: Config, path: str | Path, skip_bad_lines: bool | None = None,
             warn: Callable[[str], None] | None = None) -> list[LabelledText]:
        task = config.task
        return read_labelled(resolve_data_path(path), task.text_column, task.label_column, task.text_pair_column,
                             skip_bad_lines, warn, scores=self.scores)

    def label_set(self, examples: list) -> list[str]:
        return sorted_labels({e.label for e in examples})

    def heads(self, labels: list[str]) -> tuple[str, ...]:
        return ("classifier",)

    def objective(self, config: Config, train: list, validation: list, labels: list[str], encoder: TaskEncoder,
                  pad_id: int, world: int):
        pairs = bool(config.task.text_pair_column)
        encoded = encode_texts(encoder, train, pairs)
        index = {name: i for i, name in enumerate(labels)}
        return ClassifyObjective(encoded, [index[e.label] for e in train], encode_texts(encoder, validation, pairs),
                                 [e.label for e in validation], labels, pad_id, config.train, world), encoded


TASK = ClassifyTask()
