"""What the pretraining objectives share: the packed training blocks as numpy rows, unigram counts (the
context-free baseline), and the summed loss over fixed validation batches."""

from __future__ import annotations

import numpy as np
import torch

from bertkit.errors import BertkitError
from bertkit.nn.model import Model
from bertkit.text.packing import Packed

EVAL_STREAM = 1  # the validation masks come from their own generator stream, fixed for the whole run


def training_blocks(packed: Packed, columns: list[str], global_batch: int):
    """The training blocks as numpy rows; a corpus smaller than one global batch is a user error."""
    blocks = packed.train.with_format("numpy", columns=columns)
    if len(blocks) < global_batch:
        raise BertkitError(f"corpus too small for one batch: {len(blocks):,} blocks of {packed.block_size} tokens, "
                           f"but a global batch is {global_batch} (train.batch_size x processes x "
                           "train.accumulation_steps): add text or lower the batch size")
    return blocks


def unigram_counts(blocks, n: int, vocab_size: int, first: int) -> np.ndarray:
    """Token counts over the training blocks, from column `first` on (streamed: memory stays flat)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, n, 20_000):
        ids = blocks[start:start + 20_000]["input_ids"][:, first:]
        counts += np.bincount(ids.ravel().astype(np.int64), minlength=vocab_size)[:vocab_size]
    return counts


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
