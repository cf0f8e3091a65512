"""The one transformer block: self-attention, optional cross-attention, feed-forward; pre- or post-norm.

Whether a block is causal is decided by the mask its stack hands it (see `attention.build_mask`), so the same Block
serves the encoder (bidirectional), the decoder (causal) and the encoder-decoder's decoder (causal + cross).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import ModelConfig
from bertkit.nn.attention import Attention


def make_norm(cfg: ModelConfig) -> nn.Module:
    """LayerNorm (BERT, original Transformer) or RMSNorm (no mean subtraction, no bias)."""
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)


class FeedForward(nn.Module):
    """Position-wise FFN: w_out(act(w_in x)), or SwiGLU w_out(silu(w_gate x) * w_in x). GELU is the exact erf form."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.activation = cfg.activation
        self.w_in = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias)
        self.w_gate = nn.Linear(cfg.d_model, cfg.d_ff, bias=cfg.bias) if cfg.activation == "swiglu" else None
        self.w_out = nn.Linear(cfg.d_ff, cfg.d_model, bias=cfg.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, D) -> (B, T, D)"""
        h = self.w_in(x)  # (B, T, d_ff)
        if self.activation == "swiglu":
            h = F.silu(self.w_gate(x)) * h
        elif self.activation == "gelu":
            h = F.gelu(h)
        else:
            h = F.relu(h)
        return self.w_out(h)


class Block(nn.Module):
    """Self-attention → [cross-attention] → FFN, each wrapped as a residual sublayer.

    post-norm (BERT, Vaswani et al.):  x = norm(x + dropout(sublayer(x)))
    pre-norm  (GPT-2 and later):       x = x + dropout(sublayer(norm(x)))   (the stack adds a final norm)
    """

    def __init__(self, cfg: ModelConfig, cross: bool = False):
        super().__init__()
        self.pre_norm = cfg.norm_position == "pre"
        self.self_attn = Attention(cfg)
        self.self_attn_norm = make_norm(cfg)
        self.cross_attn = Attention(cfg, cross=True) if cross else None
        self.cross_attn_norm = make_norm(cfg) if cross else None
        self.ffn = FeedForward(cfg)
        self.ffn_norm = make_norm(cfg)
        self.dropout = nn.Dropout(cfg.dropout)

    def _residual(self, x: torch.Tensor, norm: nn.Module, sublayer) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.pre_norm:
            out, weights = sublayer(norm(x))
            return x + self.dropout(out), weights
        out, weights = sublayer(x)
        return norm(x + self.dropout(out)), weights

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False,
                positions: torch.Tensor | None = None, memory: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, need_weights: bool = False,
                key_positions: torch.Tensor | None = None, cache: dict | None = None,
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """x (B, T, D); memory (B, S, D) encoder states for cross-attention; positions of x's tokens and
        key_positions of every self-attention key (default: the same; they differ when earlier keys are cached in
        `cache`, this block's KVCache entry). Returns (B, T, D) and the attention weights by kind
        ({"self": (B, H, T, T), "cross": (B, H, T, S)}) when `need_weights`."""
        weights = {}
        key_positions = positions if key_positions is None else key_positions
        self_cache = cache.setdefault("self", {}) if cache is not None else None
        cross_cache = cache.setdefault("cross", {}) if cache is not None else None
        x, w = self._residual(x, self.self_attn_norm, lambda h: self.self_attn(
            h, mask=mask, is_causal=is_causal, q_pos=positions, k_pos=key_positions, need_weights=need_weights,
            cache=self_cache))
        if need_weights:
            weights["self"] = w
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("a cross-attention block needs encoder memory")
            x, w = self._residual(x, self.cross_attn_norm, lambda h: self.cross_attn(
                h, kv=memory, mask=memory_mask, need_weights=need_weights, cache=cross_cache))
            if need_weights:
                weights["cross"] = w
        x, _ = self._residual(x, self.ffn_norm, lambda h: (self.ffn(h), None))
        return x, weights
