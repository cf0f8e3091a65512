"""Token classification (`finetune ner`): IOB2 tags per word, cross-entropy on each word's first subword (other
subwords ignored), validation entity precision / recall / F1 (seqeval, strict) after IOB2-constrained decoding."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from bertkit.config import Config, TrainConfig
from bertkit.errors import BertkitError
from bertkit.inference import batched_logits, decode_tags, iob2_constraints, log_softmax
from bertkit.metrics import entity_metrics
from bertkit.nn.model import Model
from bertkit.paths import resolve_data_path
from bertkit.tasks.labelled import LabelledObjective, LabelledTask
from bertkit.text.collate import IGNORE_INDEX, pad_sequences
from bertkit.text.features import Encoded, TaskEncoder, join_words, token_labels
from bertkit.text.tasks import TaggedSentence, read_conll


class TagObjective(LabelledObjective):
    """Cross-entropy on each word's first subword (other subwords ignored); validation entity P/R/F1 (seqeval,
    strict) after constrained decoding."""

    head = "tagger"
    default_metric = "f1"
    metric_names = ("val_loss", "precision", "recall", "f1")

    def __init__(self, examples: list[Encoded], word_labels: list[list[int]], validation: list[Encoded],
                 validation_gold: list[list[str]], tag_names: list[str], pad_id: int, train: TrainConfig,
                 world: int = 1):
        targets = [token_labels(e, labels) for e, labels in zip(examples, word_labels)]
        super().__init__(examples, targets, pad_id, train, world, len(validation))
        self.validation, self.validation_gold, self.tag_names = validation, validation_gold, tag_names
        self.outputs = len(tag_names)
        self.constraints = iob2_constraints(tag_names)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        rows = self.sampler.rows(step).tolist()
        inputs = self._inputs(rows)
        return {**inputs, "labels": pad_sequences([self.targets[r] for r in rows], IGNORE_INDEX,
                                                  inputs["input_ids"].shape[1])}

    @staticmethod
    def normalizer(batch: dict[str, torch.Tensor]) -> float:
        return float(max(1, int((batch["labels"] != IGNORE_INDEX).sum())))

    def loss(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        logits = self._logits(model, micro).float()  # (B, T, C)
        labelled = micro["labels"] != IGNORE_INDEX  # (B, T)
        chosen, targets = logits[labelled], micro["labels"][labelled]  # (N, C), (N,)
        loss_sum = F.cross_entropy(chosen, targets, reduction="sum")
        return loss_sum, {"accuracy": (chosen.argmax(-1) == targets).sum()}

    def evaluate(self, model: Model) -> dict[str, float]:
        if not self.validation:
            return {}
        logits = batched_logits(model, self.validation, self.head, self.pad_id, self.eval_batch)
        index = {name: i for i, name in enumerate(self.tag_names)}
        predicted, loss, count = [], 0.0, 0
        for example, token_logits, gold in zip(self.validation, logits, self.validation_gold):
            tags, _ = decode_tags(token_logits, example, self.tag_names, self.constraints)
            predicted.append(tags)
            log_p = log_softmax(token_logits)
            for word, position in enumerate(example.first_token or []):
                if position >= 0 and gold[word] in index:
                    loss -= log_p[position, index[gold[word]]]
                    count += 1
        metrics = entity_metrics(self.validation_gold, predicted)
        return {"val_loss": loss / max(1, count), "precision": metrics["precision"], "recall": metrics["recall"],
                "f1": metrics["f1"]}


class NerTask(LabelledTask):
    """`task.kind = "ner"`."""

    kind = "ner"
    graded_name = "entity tags"
    label_option = "--tag-column"

    def read(self, config: Config, path: str | Path, skip_bad_lines: bool | None = None,
             warn: Callable[[str], None] | None = None) -> list[TaggedSentence]:
        # a CoNLL file has no row without a tag: a line with a missing column is an error naming it (read_conll)
        task = config.task
        return read_conll(resolve_data_path(path), task.tag_column)

    def label_set(self, examples: list) -> list[str]:
        """O first, then B-X, I-X for every entity type seen (both, so decoding can continue any entity it
        starts)."""
        types = sorted({t[2:] for e in examples for t in e.tags if t != "O"})
        if not types:
            raise BertkitError("the training data has no entities (every tag is O)")
        return ["O"] + [f"{p}-{t}" for t in types for p in ("B", "I")]

    def example_labels(self, example) -> list[str]:
        return list(example.tags)

    def graded_labels(self, example) -> list[str]:
        return [tag for tag in example.tags if tag != "O"]  # O is in every tag set: entities are what is graded

    def heads(self, labels: list[str]) -> tuple[str, ...]:
        return ("tagger",)

    def objective(self, config: Config, train: list, validation: list, labels: list[str], encoder: TaskEncoder,
                  pad_id: int, world: int):
        def encode(examples):  # words → character spans of the joined text → first subwords
            joined = [join_words(e.tokens) for e in examples]
            return encoder.words([t for t, _ in joined], [s for _, s in joined])

        encoded = encode(train)
        index = {name: i for i, name in enumerate(labels)}
        return TagObjective(encoded, [[index[t] for t in e.tags] for e in train], encode(validation),
                            [list(e.tags) for e in validation], labels, pad_id, config.train, world), encoded


TASK = NerTask()
