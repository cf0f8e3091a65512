"""Pretraining objectives: what a corpus task feeds the one loop (batches, loss, evaluation): masked LM (encoders)
and causal LM (decoders), both on the same packed blocks."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.config import DataConfig, ModelConfig, TrainConfig
from bertkit.errors import BertkitError
from bertkit.nn.flops import train_flops
from bertkit.nn.model import Model
from bertkit.text.collate import IGNORE_INDEX, EpochSampler, mlm_mask, step_generator
from bertkit.text.packing import Packed
from bertkit.text.tokenizer import SpecialIds

_EVAL_STREAM = 1  # the validation masks come from their own generator stream, fixed for the whole run


def _training_blocks(packed: Packed, columns: list[str], global_batch: int):
    """The training blocks as numpy rows; a corpus smaller than one global batch is a user error."""
    blocks = packed.train.with_format("numpy", columns=columns)
    if len(blocks) < global_batch:
        raise BertkitError(f"corpus too small for one batch: {len(blocks):,} blocks of {packed.block_size} tokens, "
                           f"but a global batch is {global_batch} (train.batch_size x processes x "
                           "train.accumulation_steps): add text or lower the batch size")
    return blocks


def _unigram_counts(blocks, n: int, vocab_size: int, first: int) -> np.ndarray:
    """Token counts over the training blocks, from column `first` on (streamed: memory stays flat)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, n, 20_000):
        ids = blocks[start:start + 20_000]["input_ids"][:, first:]
        counts += np.bincount(ids.ravel().astype(np.int64), minlength=vocab_size)[:vocab_size]
    return counts


@torch.no_grad()
def _validation_totals(objective, model: Model, count) -> tuple[float, int, int]:
    """Summed loss, correct predictions and predicted tokens (`count(batch)`) over the fixed validation batches."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    loss, correct, total = 0.0, 0, 0
    for batch in objective.validation:
        loss_sum, stats = objective.loss(model, {k: v.to(device) for k, v in batch.items()})
        loss += float(loss_sum)
        correct += int(stats["accuracy"])
        total += count(batch)
    model.train(was_training)
    return loss, correct, total


class MLMObjective:
    """BERT's masked LM on packed blocks: the MLM head runs on masked positions only; loss and accuracy are per
    masked token of the whole global batch."""

    def __init__(self, packed: Packed, special: SpecialIds, vocab_size: int, data: DataConfig, train: TrainConfig,
                 world: int = 1):
        self.global_batch = train.batch_size * train.accumulation_steps * world
        self.blocks = _training_blocks(packed, ["input_ids", "word_start"], self.global_batch)
        self.n = len(self.blocks)
        self.special, self.vocab_size, self.data, self.seed = special, vocab_size, data, train.seed
        self.eval_batch = train.batch_size
        self.sampler = EpochSampler(self.n, self.global_batch, train.seed)
        self.validation = self._validation_batches(packed)
        # an evaluation costs about a third of a training step per batch (forward only), in train-step units
        self.eval_cost_steps = len(self.validation) * 0.35 / max(1, train.accumulation_steps)

    def _mask(self, ids: np.ndarray, word_start: np.ndarray, generator: torch.Generator):
        return mlm_mask(torch.from_numpy(ids.astype(np.int64)), self.special.all, self.special.mask,
                        self.vocab_size, self.data.mlm_probability, generator,
                        torch.from_numpy(word_start) if self.data.whole_word_mask else None)

    def _validation_batches(self, packed: Packed) -> list[dict[str, torch.Tensor]]:
        val = packed.validation.with_format("numpy", columns=["input_ids", "word_start"])
        if len(val) == 0:
            return []
        rows = val[:]
        inputs, labels = self._mask(rows["input_ids"], rows["word_start"], step_generator(self.seed, 0, _EVAL_STREAM))
        return [{"input_ids": inputs[i:i + self.eval_batch], "labels": labels[i:i + self.eval_batch]}
                for i in range(0, len(inputs), self.eval_batch)]

    def rows(self, step: int) -> np.ndarray:
        """Block indices of step `step`'s global batch."""
        return self.sampler.rows(step)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        data = self.blocks[self.rows(step).tolist()]
        inputs, labels = self._mask(data["input_ids"], data["word_start"], step_generator(self.seed, step))
        return {"input_ids": inputs, "labels": labels}

    @staticmethod
    def normalizer(batch: dict[str, torch.Tensor]) -> float:
        return float(max(1, int((batch["labels"] != IGNORE_INDEX).sum())))

    @staticmethod
    def tokens(batch: dict[str, torch.Tensor]) -> int:
        return batch["input_ids"].numel()

    kind = "mlm"  # the FLOP count's objective (nn/flops.py)

    def flops(self, config: ModelConfig, micro: dict[str, torch.Tensor]) -> int:
        """Model FLOPs of a training step on `micro`: the encoder, and the MLM head on its masked positions."""
        rows, t = micro["input_ids"].shape
        return train_flops(config, self.kind, rows, t, masked=int((micro["labels"] != IGNORE_INDEX).sum()))

    @staticmethod
    def loss(model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        selected = micro["labels"] != IGNORE_INDEX  # (B, L)
        logits = model(micro["input_ids"], mlm_select=selected).logits  # (N, V)
        targets = micro["labels"][selected]  # (N,)
        loss_sum = F.cross_entropy(logits.float(), targets, reduction="sum")
        correct = (logits.argmax(-1) == targets).sum()
        return loss_sum, {"accuracy": correct}

    def unigram_baseline(self) -> dict[str, float]:
        """What a model that ignores context scores on the validation masks: the training set's unigram
        distribution gives the loss, its most frequent token the accuracy."""
        if not self.validation:
            return {}
        counts = _unigram_counts(self.blocks, self.n, self.vocab_size, first=0)
        counts[list(self.special.all)] = 0  # never a target
        log_p = np.log((counts + 1) / (counts + 1).sum())  # add-one smoothing: unseen targets stay finite
        targets = torch.cat([b["labels"][b["labels"] != IGNORE_INDEX] for b in self.validation]).numpy()
        return {"val_loss": float(-log_p[targets].mean()),
                "val_accuracy": float((targets == counts.argmax()).mean())}

    @torch.no_grad()
    def evaluate(self, model: Model) -> dict[str, float]:
        """Validation MLM loss and masked-token accuracy on fixed masks (comparable across steps and runs)."""
        if not self.validation:
            return {}
        loss, correct, count = _validation_totals(self, model, lambda b: int((b["labels"] != IGNORE_INDEX).sum()))
        return {"val_loss": loss / max(1, count), "val_accuracy": correct / max(1, count)}


class CLMObjective:
    """GPT's causal LM on the same packed blocks: every position predicts the next token (the block's leading
    [CLS] acts as a beginning-of-text token; each document's closing [SEP] is the end-of-text token generation stops
    at). Loss, accuracy and perplexity are per predicted token of the whole global batch."""

    def __init__(self, packed: Packed, special: SpecialIds, vocab_size: int, data: DataConfig, train: TrainConfig,
                 world: int = 1):
        self.global_batch = train.batch_size * train.accumulation_steps * world
        self.blocks = _training_blocks(packed, ["input_ids"], self.global_batch)
        self.n = len(self.blocks)
        self.special, self.vocab_size = special, vocab_size
        self.sampler = EpochSampler(self.n, self.global_batch, train.seed)
        val = packed.validation.with_format("numpy", columns=["input_ids"])
        rows = torch.from_numpy(val[:]["input_ids"].astype(np.int64)) if len(val) else None
        self.validation = [] if rows is None else [{"input_ids": rows[i:i + train.batch_size]}
                                                   for i in range(0, len(rows), train.batch_size)]
        # an evaluation in train-step units (forward only: about a third of a training step per batch)
        self.eval_cost_steps = len(self.validation) * 0.35 / max(1, train.accumulation_steps)

    def rows(self, step: int) -> np.ndarray:
        """Block indices of step `step`'s global batch."""
        return self.sampler.rows(step)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        data = self.blocks[self.rows(step).tolist()]
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
        counts = _unigram_counts(self.blocks, self.n, self.vocab_size, first=1)  # every token but the block's [CLS]
        log_p = np.log((counts + 1) / (counts + 1).sum())  # add-one smoothing: unseen targets stay finite
        targets = torch.cat([b["input_ids"][:, 1:].flatten() for b in self.validation]).numpy()
        loss = float(-log_p[targets].mean())
        return {"val_loss": loss, "val_ppl": math.exp(loss), "val_accuracy": float((targets == counts.argmax()).mean())}

    @torch.no_grad()
    def evaluate(self, model: Model) -> dict[str, float]:
        """Validation loss, perplexity (exp of the mean loss per token) and next-token accuracy."""
        if not self.validation:
            return {}
        loss, correct, count = _validation_totals(self, model, lambda b: int(self.normalizer(b)))
        mean = loss / max(1, count)
        return {"val_loss": mean, "val_ppl": math.exp(min(mean, 50.0)), "val_accuracy": correct / max(1, count)}
