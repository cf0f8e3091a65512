"""GPT's causal-LM pretraining (`train.objective = "clm"`, a decoder) on the packed blocks MLM uses: the objective
and the task entry."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.config import DataConfig, ModelConfig, TrainConfig
from bertkit.nn.flops import train_flops
from bertkit.nn.model import Model
from bertkit.tasks.base import PretrainTask
from bertkit.tasks.packed import training_rows, validation_totals
from bertkit.text.packing import Packed
from bertkit.text.tokenizer import SpecialIds


class CLMObjective:
    """GPT's causal LM on the same packed blocks: every position predicts the next token (the block's leading
    [CLS] acts as a beginning-of-text token; each document's closing [SEP] is the end-of-text token generation stops
    at). Loss, accuracy and perplexity are per predicted token of the whole global batch."""

    def __init__(self, packed: Packed, special: SpecialIds, vocab_size: int, data: DataConfig, train: TrainConfig,
                 world: int = 1):
        self.global_batch = train.batch_size * train.accumulation_steps * world
        self.source = training_rows(packed, ["input_ids"], self.global_batch, train.seed, data.shuffle_window)
        self.special, self.vocab_size = special, vocab_size
        val = packed.validation.with_format("numpy", columns=["input_ids"])
        rows = torch.from_numpy(val[:]["input_ids"].astype(np.int64)) if len(val) else None
        self.validation = [] if rows is None else [{"input_ids": rows[i:i + train.batch_size]}
                                                   for i in range(0, len(rows), train.batch_size)]
        # an evaluation in train-step units (forward only: about a third of a training step per batch)
        self.eval_cost_steps = len(self.validation) * 0.35 / max(1, train.accumulation_steps)

    def position(self, step: int) -> dict:
        """Where step `step`'s batch comes from in a streamed corpus (kept in a checkpoint; {} when packed)."""
        return self.source.position(step)

    def seek(self, point: dict, step: int) -> None:
        """Resume the batches at `step` from a checkpoint's `position(step)`."""
        self.source.seek(point, step)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        data = self.source.rows(step)
        return {"input_ids": torch.from_numpy(data["input_ids"].astype(np.int64))}

    @staticmethod
    def normalizer(batch: dict[str, torch.Tensor]) -> float:
        b, t = batch["input_ids"].shape
        return float(b * (t - 1))  # every position but the last has a next token

    @staticmethod
    def tokens(batch: dict[str, torch.Tensor]) -> int:
        return batch["input_ids"].numel()

    @staticmethod
    def flops(config: ModelConfig, micro: dict[str, torch.Tensor]) -> int:
        """Model FLOPs of a training step on `micro`: the decoder and the LM head on every position."""
        return train_flops(config, "clm", *micro["input_ids"].shape)

    @staticmethod
    def loss(model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        ids = micro["input_ids"]  # (B, T)
        logits = model(ids, head="lm").logits[:, :-1]  # (B, T-1, V): position t predicts token t+1
        targets = ids[:, 1:]  # (B, T-1)
        loss_sum = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="sum")
        correct = (logits.argmax(-1) == targets).sum()
        return loss_sum, {"accuracy": correct}

    def unigram_baseline(self) -> dict[str, float]:
        """A context-free model on the validation targets: the training set's unigram distribution (loss,
        perplexity) and its most frequent token (accuracy)."""
        if not self.validation:
            return {}
        counts = self.source.unigram_counts(self.vocab_size, first=1)  # every token but the block's [CLS]
        log_p = np.log((counts + 1) / (counts + 1).sum())  # add-one smoothing: unseen targets stay finite
        targets = torch.cat([b["input_ids"][:, 1:].flatten() for b in self.validation]).numpy()
        loss = float(-log_p[targets].mean())
        return {"val_loss": loss, "val_ppl": math.exp(loss), "val_accuracy": float((targets == counts.argmax()).mean())}

    @torch.no_grad()
    def evaluate(self, model: Model) -> dict[str, float]:
        """Validation loss, perplexity (exp of the mean loss per token) and next-token accuracy."""
        if not self.validation:
            return {}
        loss, correct, count = validation_totals(self, model, lambda b: int(self.normalizer(b)))
        mean = loss / max(1, count)
        return {"val_loss": mean, "val_ppl": math.exp(min(mean, 50.0)), "val_accuracy": correct / max(1, count)}


TASK = PretrainTask("clm", "decoder", ("lm",), "causal-LM pretraining", CLMObjective)
