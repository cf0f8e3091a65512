"""A sentence-level signal inside masked-LM pretraining (`train.contrastive_weight` > 0): SimCSE's unsupervised
objective (Gao et al. 2021) with two views of each block, in adjacent rows of the step's batch. Both rows train MLM
as usual, so the second view is not wasted compute. `train.contrastive_views` says what the views are:

- "maskings" (the default): the whole block twice, under two independent MLM maskings. The views share about half
  their tokens at the same places, so the task is solved within a few dozen steps (in-batch accuracy ~1.0).
- "halves": the block's first and second half, each a row of block_size / 2 tokens starting with [CLS] (the second
  half's first token gives way to it), masked once. No token is shared: what ties the views is the document they
  usually come from (a block can straddle a [SEP]; Contriever's independent cropping, Izacard et al. 2022), and
  every row is new text, so a step of the same rows x tokens reads twice the text of a "maskings" step, in
  half-length context. Measured at BERT-mini size (README): a hard task (accuracy 0.15 of 64 at step 1,000), but
  MLM 0.39 nats worse and STS-B after SBERT 3-4 points lower than "maskings", so not the recipe's choice.

The mean-pooled last hidden states of the two views are pulled together and pushed away from every other row of the
micro-batch by an in-batch cross-entropy over scaled cosines — the same geometry `sentence_loss = "mnrl"` and
`bertkit embed` use. MLM alone at a small budget leaves mean-pooled vectors crowded in one direction; this term
spreads them (the frozen probe and STS-B read exactly those vectors).

`train.batch_size` counts rows, so a step of 64 rows holds 32 blocks, each twice (or 32 blocks' 64 halves): the same
rows as a plain MLM step of 64 rows, plus one (32, 32) similarity per micro-batch.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

VIEW_STREAM = 3  # the second masking's seeds, apart from the first (0), validation (1) and RTD sampling (2)


def interleave(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Rows of two (N, T) tensors alternated: (2N, T) with row 2i from `first`, row 2i + 1 from `second` (a
    contiguous slice of even length, as a micro-batch is, then holds both views of each of its blocks)."""
    return torch.stack([first, second], dim=1).reshape(-1, *first.shape[1:])


def split_halves(rows: np.ndarray, cls_id: int) -> np.ndarray:
    """Blocks (N, T), T even -> rows (2N, T / 2): row 2i is block i's first half, row 2i + 1 its second half with
    [CLS] in place of its first token (every row then starts like a finetuning input)."""
    n, t = rows.shape
    halves = rows.reshape(2 * n, t // 2).copy()  # row-major: block i's halves land in rows 2i, 2i + 1; the copy
    # keeps the source (a streamed corpus's cached window) untouched by the [CLS] write
    halves[1::2, 0] = cls_id
    return halves


def view_contrast(pooled: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row in-batch contrastive loss and hits for interleaved views.

    pooled (2n, D): rows 2i and 2i + 1 are two views of block i. Row 2i's candidates are the n second views and
    row 2i + 1's the n first views; the other view of its own block is the answer. Returns (loss (2n,), correct
    (2n,) as 0/1 floats)."""
    emb = F.normalize(pooled.float(), dim=-1)  # (2n, D)
    first, second = emb[0::2], emb[1::2]  # (n, D) each
    scores = scale * first @ second.T  # (n, n): first view i against every second view
    gold = torch.arange(len(first), device=emb.device)
    loss = torch.stack([F.cross_entropy(scores, gold, reduction="none"),
                        F.cross_entropy(scores.T, gold, reduction="none")], dim=1).reshape(-1)  # (2n,)
    correct = torch.stack([scores.argmax(-1) == gold, scores.T.argmax(-1) == gold], dim=1).reshape(-1)
    return loss, correct.float()
