"""What the pretraining objectives share: the training blocks as global batches (packed on disk, or streamed), unigram
counts (the context-free baseline), and the summed loss over fixed validation batches."""

from __future__ import annotations

import numpy as np
import torch

from bertkit.errors import BertkitError
from bertkit.nn.model import Model
from bertkit.text.collate import EpochSampler
from bertkit.text.packing import Packed
from bertkit.text.stream import BlockStream, StreamedBatches

EVAL_STREAM = 1  # the validation masks come from their own generator stream, fixed for the whole run


class ShuffledBlocks:
    """The packed (cached) training blocks as global batches: a fresh permutation of all blocks per epoch
    (`EpochSampler`). A step's rows are a pure function of (seed, step): nothing to save for a resume."""

    def __init__(self, packed: Packed, columns: list[str], global_batch: int, seed: int):
        self.blocks = packed.train.with_format("numpy", columns=columns)
        if len(self.blocks) < global_batch:
            raise BertkitError(f"corpus too small for one batch: {len(self.blocks):,} blocks of {packed.block_size} "
                               f"tokens, but a global batch is {global_batch} (train.batch_size x processes x "
                               "train.accumulation_steps): add text or lower the batch size (--set batch_size=N, "
                               f"N x processes x accumulation_steps at most {len(self.blocks):,})")
        self.sampler = EpochSampler(len(self.blocks), global_batch, seed)

    def rows(self, step: int) -> dict[str, np.ndarray]:
        """Step `step`'s global batch, {column: (global_batch, block_size)}."""
        return self.blocks[self.sampler.rows(step).tolist()]

    def unigram_counts(self, vocab_size: int, first: int) -> np.ndarray:
        """Token counts over every training block, from column `first` on (in slices: memory stays flat)."""
        counts = np.zeros(vocab_size, dtype=np.int64)
        for start in range(0, len(self.blocks), 20_000):
            counts += _counts(self.blocks[start:start + 20_000]["input_ids"][:, first:], vocab_size)
        return counts

    @staticmethod
    def position(step: int) -> dict:
        return {}

    def seek(self, point: dict, step: int) -> None:
        pass


class StreamedRows(StreamedBatches):
    """A streamed corpus's global batches (text/stream.py), with the unigram counts of its first window."""

    def unigram_counts(self, vocab_size: int, first: int) -> np.ndarray:
        return _counts(self.first_rows()["input_ids"][:, first:], vocab_size)


def _counts(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    return np.bincount(ids.ravel().astype(np.int64), minlength=vocab_size)[:vocab_size]


def training_rows(packed: Packed, columns: list[str], global_batch: int, seed: int, window: int):
    """The training blocks as global batches: shuffled over the whole corpus when it is packed on disk, within
    windows of `window` batches when it streams (`data.streaming`). Either has rows(step), unigram_counts,
    and position(step) / seek(point, step) for a checkpoint."""
    if isinstance(packed.train, BlockStream):
        return StreamedRows(packed.train, columns, global_batch, seed, window)
    return ShuffledBlocks(packed, columns, global_batch, seed)


@torch.no_grad()
def validation_totals(objective, model: Model, count) -> tuple[float, int, int]:
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
