"""Position information: learned | sinusoidal (added to embeddings), relative (Shaw et al. 2018, inside attention),
rotary (RoFormer, rotates queries and keys), or none.

Position ids are integer tensors of shape (T,) or (B, T); every module here broadcasts over a leading batch of 1.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_table(n_positions: int, dim: int) -> torch.Tensor:
    """The fixed table of Vaswani et al.: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(same). (n, dim)"""
    if torch.empty(0).device.type == "meta":  # the default device (`meta_model`): a table without values; computed,
        return torch.empty(n_positions, dim)  # its exp / sin ran through torch._refs, which import torch._dynamo
    position = torch.arange(n_positions, dtype=torch.float32)[:, None]  # (n, 1)
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))  # (ceil(d/2),)
    table = torch.zeros(n_positions, dim)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table


class SinusoidalPositions(nn.Module):
    """Absolute sinusoidal positions; no parameters (the table is a non-persistent buffer, not in state_dict)."""

    def __init__(self, max_len: int, dim: int):
        super().__init__()
        self.register_buffer("table", sinusoidal_table(max_len, dim), persistent=False)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        """(…, T) ids -> (…, T, dim) vectors."""
        return self.table[position_ids]


class RelativePositions(nn.Module):
    """Shaw et al. (2018) relative position representations for one attention layer, shared by its heads.

    Offsets j - i are clipped to [-max_distance, max_distance]; `key` (a^K) is added to the keys inside the score
    and `value` (a^V) to the values inside the weighted sum:
        e_ij = q_i · (k_j + a^K_ij) / sqrt(d_head),   z_i = Σ_j α_ij (v_j + a^V_ij)
    """

    def __init__(self, max_distance: int, d_head: int):
        super().__init__()
        self.max_distance = max_distance
        self.key = nn.Embedding(2 * max_distance + 1, d_head)
        self.value = nn.Embedding(2 * max_distance + 1, d_head)

    def bucket(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """Clipped offsets as table indices: (…, Tq) and (…, Tk) -> (…, Tq, Tk) in [0, 2 * max_distance]."""
        offset = k_pos[..., None, :] - q_pos[..., :, None]
        return offset.clamp(-self.max_distance, self.max_distance) + self.max_distance

    def score_bias(self, q: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
        """q · a^K_ij for every (i, j): q (B, H, Tq, dh), buckets (B|1, Tq, Tk) -> (B, H, Tq, Tk)."""
        rel_k = self.key(buckets)  # (B|1, Tq, Tk, dh)
        # (B, Tq, H, dh) @ (B|1, Tq, dh, Tk) -> (B, Tq, H, Tk)
        return (q.transpose(1, 2) @ rel_k.transpose(-1, -2)).transpose(1, 2)

    def value_term(self, weights: torch.Tensor, buckets: torch.Tensor) -> torch.Tensor:
        """Σ_j α_ij a^V_ij: weights (B, H, Tq, Tk), buckets (B|1, Tq, Tk) -> (B, H, Tq, dh)."""
        rel_v = self.value(buckets)  # (B|1, Tq, Tk, dh)
        # (B, Tq, H, Tk) @ (B|1, Tq, Tk, dh) -> (B, Tq, H, dh)
        return (weights.transpose(1, 2) @ rel_v).transpose(1, 2)


class Rotary(nn.Module):
    """Rotary position embedding (Su et al. 2021), "rotate half" layout: dimension i pairs with i + d_head/2.

    Angles are always computed in fp32 from (d_head, base), never from a castable buffer: in bf16, positions
    above 256 would collapse onto each other.
    """

    def __init__(self, d_head: int, base: float = 10000.0):
        super().__init__()
        self.d_head, self.base = d_head, base

    def cos_sin(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(…, T) ids -> cos, sin of shape (…, 1, T, dh) in fp32: ready to broadcast over heads."""
        exponents = torch.arange(0, self.d_head, 2, dtype=torch.float32, device=position_ids.device) / self.d_head
        inv_freq = 1.0 / (self.base ** exponents)  # (dh/2,)
        angles = position_ids.float()[..., None] * inv_freq  # (…, T, dh/2)
        angles = torch.cat([angles, angles], dim=-1)[..., None, :, :]  # (…, 1, T, dh)
        return angles.cos(), angles.sin()

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate (B, H, T, dh) queries or keys by their positions' angles."""
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return (x * cos.to(x.dtype)) + (rotated * sin.to(x.dtype))
