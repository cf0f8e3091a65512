"""Finetuning objectives for the one loop: sequence classification and token classification (NER).

Both draw each step's global batch from an `EpochSampler` (a pure function of the step: exact resume, same batches
on 1 or N processes), pad it to its longest example, and evaluate through `bertkit.inference`, the code path
`bertkit predict` and `bertkit evaluate` use.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.config import ModelConfig, TrainConfig
from bertkit.errors import BertkitError
from bertkit.inference import batched_logits, decode_tags, iob2_constraints, log_softmax
from bertkit.metrics import classification_metrics, entity_metrics
from bertkit.nn.flops import stack_flops, training
from bertkit.nn.model import Model
from bertkit.text.collate import IGNORE_INDEX, EpochSampler, pad_sequences
from bertkit.text.features import Encoded, token_labels


class _TaskObjective:
    """Shared batching: rows of encoded examples → padded (B, T) ids, token types, attention mask, labels."""

    head = ""
    default_metric = ""

    def __init__(self, examples: list[Encoded], targets: list, pad_id: int, train: TrainConfig, world: int,
                 n_validation: int):
        self.examples, self.targets, self.pad_id = examples, targets, pad_id
        self.global_batch = train.batch_size * train.accumulation_steps * world
        if len(examples) < 1:
            raise BertkitError("no training examples")
        self.sampler = EpochSampler(len(examples), self.global_batch, train.seed)
        self.eval_batch = max(train.batch_size, 32)
        # an evaluation, in training-step units (forward only, about a third of a training step per example)
        self.eval_cost_steps = n_validation / self.global_batch * 0.35

    @property
    def steps_per_epoch(self) -> float:
        return len(self.examples) / self.global_batch

    def _inputs(self, rows: list[int]) -> dict[str, torch.Tensor]:
        ids = pad_sequences([self.examples[r].input_ids for r in rows], self.pad_id)  # (B, T)
        lengths = torch.tensor([len(self.examples[r].input_ids) for r in rows])
        return {"input_ids": ids, "token_type_ids": pad_sequences([self.examples[r].type_ids for r in rows], 0),
                "attention_mask": (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()}

    @staticmethod
    def tokens(batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum())

    def flops(self, config: ModelConfig, micro: dict[str, torch.Tensor]) -> int:
        """Model FLOPs of a training step on `micro` (padded: what the kernels multiply): the encoder and the
        task head (nn/flops.py)."""
        rows, t = micro["input_ids"].shape
        return training(stack_flops(config, rows, t) + self.head_flops(config, rows, t))

    @staticmethod
    def head_flops(config: ModelConfig, rows: int, t: int) -> int:
        """The task head's forward FLOPs on a (rows, t) batch."""
        raise NotImplementedError

    def _logits(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(micro["input_ids"], attention_mask=micro["attention_mask"],
                     token_type_ids=micro["token_type_ids"], head=self.head).logits


class ClassifyObjective(_TaskObjective):
    """Cross-entropy on the classifier head; validation accuracy, macro-F1 and MCC (scikit-learn)."""

    head = "classifier"
    default_metric = "accuracy"
    metric_names = ("val_loss", "accuracy", "macro_f1", "mcc")

    def __init__(self, examples: list[Encoded], labels: list[int], validation: list[Encoded],
                 validation_gold: list[str], label_names: list[str], pad_id: int, train: TrainConfig, world: int = 1):
        super().__init__(examples, labels, pad_id, train, world, len(validation))
        self.validation, self.validation_gold, self.label_names = validation, validation_gold, label_names

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        rows = self.sampler.rows(step).tolist()
        return {**self._inputs(rows), "labels": torch.tensor([self.targets[r] for r in rows])}

    @staticmethod
    def head_flops(config: ModelConfig, rows: int, t: int) -> int:
        return 2 * rows * (config.d_model * config.d_model + config.d_model * config.num_labels)  # dense, out

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


class TagObjective(_TaskObjective):
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
        self.constraints = iob2_constraints(tag_names)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        rows = self.sampler.rows(step).tolist()
        inputs = self._inputs(rows)
        return {**inputs, "labels": pad_sequences([self.targets[r] for r in rows], IGNORE_INDEX,
                                                  inputs["input_ids"].shape[1])}

    @staticmethod
    def head_flops(config: ModelConfig, rows: int, t: int) -> int:
        return 2 * rows * t * config.d_model * config.num_labels  # one linear layer per token

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
