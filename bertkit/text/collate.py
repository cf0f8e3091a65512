"""Batches from blocks: dynamic MLM masking (80% [MASK] / 10% random / 10% kept, optional whole-word).

Masking is a pure function of (input rows, seed, step): the same global batch is masked identically whatever the
number of processes, and a resumed run re-draws exactly the masks of the uninterrupted one.
"""

from __future__ import annotations

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
