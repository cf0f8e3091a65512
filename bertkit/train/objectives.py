"""Training objectives: what a task feeds the one loop (batches, loss, evaluation). So far: masked LM."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.config import DataConfig, TrainConfig
from bertkit.errors import BertkitError
from bertkit.nn.model import Model
from bertkit.text.collate import IGNORE_INDEX, EpochSampler, mlm_mask, step_generator
from bertkit.text.packing import Packed
from bertkit.text.tokenizer import SpecialIds

_EVAL_STREAM = 1  # the validation masks come from their own generator stream, fixed for the whole run


class MLMObjective:
    """BERT's masked LM on packed blocks: the MLM head runs on masked positions only; loss and accuracy are per
    masked token of the whole global batch."""

    def __init__(self, packed: Packed, special: SpecialIds, vocab_size: int, data: DataConfig, train: TrainConfig,
                 world: int = 1):
        self.blocks = packed.train.with_format("numpy", columns=["input_ids", "word_start"])
        self.n = len(self.blocks)
        self.global_batch = train.batch_size * train.accumulation_steps * world
        if self.n < self.global_batch:
            raise BertkitError(f"corpus too small for one batch: {self.n:,} blocks of {packed.block_size} tokens, "
                               f"but a global batch is {self.global_batch} (train.batch_size x processes x "
                               "train.accumulation_steps): add text or lower the batch size")
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
        counts = np.zeros(self.vocab_size, dtype=np.int64)
        for start in range(0, self.n, 20_000):
            ids = self.blocks[start:start + 20_000]["input_ids"]
            counts += np.bincount(ids.ravel().astype(np.int64), minlength=self.vocab_size)[:self.vocab_size]
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
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        loss, correct, count = 0.0, 0, 0
        for batch in self.validation:
            micro = {k: v.to(device) for k, v in batch.items()}
            loss_sum, stats = self.loss(model, micro)
            loss += float(loss_sum)
            correct += int(stats["accuracy"])
            count += int((batch["labels"] != IGNORE_INDEX).sum())
        model.train(was_training)
        return {"val_loss": loss / max(1, count), "val_accuracy": correct / max(1, count)}
