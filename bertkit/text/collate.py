"""Batches: dynamic MLM masking (80% [MASK] / 10% random / 10% kept, optional whole-word), padding, and the
per-epoch sampling every objective draws its global batches from.

Masking is a pure function of (input rows, seed, step): the same global batch is masked identically whatever the
number of processes, and a resumed run re-draws exactly the masks of the uninterrupted one.
"""

from __future__ import annotations

import numpy as np
import torch

IGNORE_INDEX = -100  # label of positions that carry no loss


def step_generator(seed: int, step: int, stream: int = 0) -> torch.Generator:
    """A CPU generator for one (seed, step, stream): reproducible without saving RNG state."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step * 7919 + stream) % (2**63 - 1))


def mlm_mask(input_ids: torch.Tensor, special_ids: tuple[int, ...], mask_id: int, vocab_size: int,
             probability: float, generator: torch.Generator, word_start: torch.Tensor | None = None,
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Select ~`probability` of the non-special tokens (or of whole words, given `word_start`) and corrupt them.

    input_ids (B, L) and word_start (B, L) on the CPU. Returns (inputs, labels), both (B, L): selected positions
    become [MASK] (80%), a random non-special token (10%) or stay (10%); labels hold the original id there and
    IGNORE_INDEX elsewhere. Special tokens are never selected.
    """
    ids = input_ids.long()
    special = torch.tensor(special_ids, dtype=torch.long)
    candidate = ~torch.isin(ids, special)  # (B, L)
    draw = torch.rand(ids.shape, generator=generator)  # (B, L)
    if word_start is not None:
        # Every token takes the draw of its word's first token: a word is selected (or not) as a whole.
        starts = word_start.bool().clone()
        starts[:, :2] = True  # a word cut by the block edge starts again after [CLS]
        positions = torch.arange(ids.shape[1]).expand_as(ids)
        first = torch.where(starts, positions, torch.zeros_like(positions)).cummax(dim=1).values  # (B, L)
        draw = draw.gather(1, first)
    selected = candidate & (draw < probability)
    labels = torch.where(selected, ids, torch.full_like(ids, IGNORE_INDEX))

    action = torch.rand(ids.shape, generator=generator)
    random_ids = torch.randint(0, vocab_size, ids.shape, generator=generator)
    random_ok = ~torch.isin(random_ids, special)  # a random special token would teach nonsense: keep instead
    inputs = ids.clone()
    inputs[selected & (action < 0.8)] = mask_id
    replace = selected & (action >= 0.8) & (action < 0.9) & random_ok
    inputs[replace] = random_ids[replace]
    return inputs, labels


def masked_positions(labels: torch.Tensor, pad_to: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The flat positions (N,) of the masked tokens of `labels` (B, L) and their targets (N,), counted on the host;
    with `pad_to`, N rounded up to a multiple of it by position 0 ([CLS]) with an ignored target (a few shapes for
    CUDA graphs; the loss and the accuracy skip the padding)."""
    flat = labels.reshape(-1)  # (B * L,)
    positions = (flat != IGNORE_INDEX).nonzero().squeeze(1)  # (N,)
    targets = flat[positions]
    pad = (-positions.numel()) % pad_to if pad_to else 0
    if pad:
        positions = torch.cat([positions, positions.new_zeros(pad)])  # (N',)
        targets = torch.cat([targets, targets.new_full((pad,), IGNORE_INDEX)])  # (N',)
    return positions, targets


def pad_sequences(rows: list[list[int]], value: int, length: int | None = None) -> torch.Tensor:
    """Right-pad lists of ids to one length (default: the longest row). -> (B, T) int64."""
    length = length or max((len(r) for r in rows), default=1)
    out = torch.full((len(rows), max(1, length)), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, :len(row)] = torch.tensor(row[:length], dtype=torch.long)
    return out


class EpochSampler:
    """Row indices of each optimiser step's global batch: a fresh permutation per epoch, a pure function of
    (seed, epoch), so any step's batch can be rebuilt on resume or on another process without saved state."""

    def __init__(self, n: int, global_batch: int, seed: int):
        self.n, self.global_batch, self.seed = n, global_batch, seed
        self._orders: dict[int, np.ndarray] = {}

    def _order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        return self._orders[epoch]

    def rows(self, step: int) -> np.ndarray:
        """Indices of step `step`'s global batch (epochs wrap mid-batch when n is not a multiple)."""
        stream = step * self.global_batch + np.arange(self.global_batch)
        epochs, within = np.divmod(stream, self.n)
        return np.array([self._order(int(e))[i] for e, i in zip(epochs, within)])
