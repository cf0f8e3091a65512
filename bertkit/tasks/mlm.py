"""BERT's masked-LM pretraining (`train.objective = "mlm"`, an encoder): the objective the loop trains and the task
entry the registry lists."""

from __future__ import annotations

import sys

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.config import DataConfig, ModelConfig, TrainConfig
from bertkit.nn.flops import train_flops
from bertkit.nn.model import Model
from bertkit.tasks.base import PretrainTask
from bertkit.tasks.contrast import VIEW_STREAM, interleave, split_halves, view_contrast
from bertkit.tasks.packed import EVAL_STREAM, training_rows, validation_totals
from bertkit.text.collate import IGNORE_INDEX, masked_positions, mlm_mask, step_generator
from bertkit.text.packing import Packed
from bertkit.text.tokenizer import SpecialIds


class MLMObjective:
    """BERT's masked LM on packed blocks: the MLM head runs on masked positions only; loss and accuracy are per
    masked token of the whole global batch. With `train.contrastive_weight` > 0 each block gives two rows, its two
    views (`train.contrastive_views`: two maskings, or its two halves), and the loss adds that weight × the mean
    in-batch contrastive loss of their pooled vectors (tasks/contrast.py)."""

    def __init__(self, packed: Packed, special: SpecialIds, vocab_size: int, data: DataConfig, train: TrainConfig,
                 world: int = 1):
        self.global_batch = train.batch_size * train.accumulation_steps * world  # rows (views)
        self.contrastive_weight, self.contrastive_scale = train.contrastive_weight, train.contrastive_scale
        self.views = 2 if self.contrastive_weight > 0 else 1  # rows per block
        self.halves = train.halves
        self.source = training_rows(packed, ["input_ids", "word_start"], self.global_batch // self.views,
                                    train.seed, data.shuffle_window)
        self.special, self.vocab_size, self.data, self.seed = special, vocab_size, data, train.seed
        # validation scores whole blocks: under halves a training row is half a block, so half the rows per batch
        self.eval_batch = max(1, train.batch_size // 2) if self.halves else train.batch_size
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
        inputs, labels = self._mask(rows["input_ids"], rows["word_start"], step_generator(self.seed, 0, EVAL_STREAM))
        return [{"input_ids": inputs[i:i + self.eval_batch], "labels": labels[i:i + self.eval_batch]}
                for i in range(0, len(inputs), self.eval_batch)]

    def position(self, step: int) -> dict:
        """Where step `step`'s batch comes from in a streamed corpus (kept in a checkpoint; {} when packed)."""
        return self.source.position(step)

    def seek(self, point: dict, step: int) -> None:
        """Resume the batches at `step` from a checkpoint's `position(step)`."""
        self.source.seek(point, step)

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        data = self.source.rows(step)  # (N, T) blocks
        ids, starts = data["input_ids"], data["word_start"]
        if self.halves:  # (2N, T / 2): each block's halves adjacent, one masking over both
            ids, starts = split_halves(ids, self.special.cls), split_halves(starts, 1)
        inputs, labels = self._mask(ids, starts, step_generator(self.seed, step))
        if self.views == 1:
            return {"input_ids": inputs, "labels": labels}
        if not self.halves:  # the second view: the same blocks under another masking
            other, other_labels = self._mask(ids, starts, step_generator(self.seed, step, VIEW_STREAM))
            inputs, labels = interleave(inputs, other), interleave(labels, other_labels)  # (2N, T): views adjacent
        # each row carries the global batch's masked tokens per row: the loop divides the summed loss by the global
        # masked-token count, which this factor turns into a mean over rows for the per-row contrastive term
        per_row = float((labels != IGNORE_INDEX).sum()) / len(labels)
        return {"input_ids": inputs, "labels": labels, "masked_per_row": torch.full((len(labels),), per_row)}

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

    pad_to = 0  # > 0 (the loop's CUDA graphs): `prepare` pads the masked-token count to a multiple of it

    def prepare(self, micro: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Host side of a training micro-batch: the flat positions of its masked tokens and their targets. Counted
        here, the device never waits to learn how many there are (boolean indexing on a GPU must), and a compiled
        model sees one index tensor of varying length instead of a data-dependent selection (no graph break).
        With `pad_to`, padded with ignored targets to a multiple of it."""
        positions, targets = masked_positions(micro["labels"], self.pad_to)  # (N,) each
        return {**micro, "mlm_positions": positions, "mlm_targets": targets}

    def loss(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Summed MLM loss over the micro-batch's masked tokens (+ the weighted contrastive term on two-view
        batches; validation batches have one view and score MLM alone, comparable with a plain MLM run)."""
        paired = "masked_per_row" in micro
        if "mlm_positions" in micro:  # prepared on the host (`prepare`)
            selected, targets = micro["mlm_positions"], micro["mlm_targets"]  # (N,) each
            if "torch._dynamo" in sys.modules:  # imported by torch.compile; never imported: nothing compiled, and
                # reaching for it would import it (~0.8 s, every process)
                torch._dynamo.maybe_mark_dynamic(selected, 0)  # under torch.compile: one graph for every count
                torch._dynamo.maybe_mark_dynamic(targets, 0)
        else:
            selected = micro["labels"] != IGNORE_INDEX  # (B, L)
            targets = micro["labels"][selected]  # (N,)
        out = model(micro["input_ids"], mlm_select=selected, pool="mean" if paired else None)
        loss_sum = F.cross_entropy(out.logits.float(), targets, reduction="sum")
        stats = {"accuracy": (out.logits.argmax(-1) == targets).sum()}
        if paired:
            rows_loss, hits = view_contrast(out.pooled, self.contrastive_scale)  # (B,) each
            share = micro["masked_per_row"]  # (B,)
            loss_sum = loss_sum + self.contrastive_weight * (share * rows_loss).sum()
            stats.update(contrastive_loss=(share * rows_loss.detach()).sum(), contrastive_accuracy=(share * hits).sum())
        return loss_sum, stats

    def unigram_baseline(self) -> dict[str, float]:
        """What a model that ignores context scores on the validation masks: the training set's unigram
        distribution gives the loss, its most frequent token the accuracy."""
        if not self.validation:
            return {}
        counts = self.source.unigram_counts(self.vocab_size, first=0)
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
        loss, correct, count = validation_totals(self, model, lambda b: int((b["labels"] != IGNORE_INDEX).sum()))
        return {"val_loss": loss / max(1, count), "val_accuracy": correct / max(1, count)}


TASK = PretrainTask("mlm", "encoder", ("mlm",), "masked-LM pretraining", MLMObjective)
