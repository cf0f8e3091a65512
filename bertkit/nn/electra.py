"""ELECTRA's replaced-token detection (Clark et al. 2020): a small generator and the discriminator head.

The generator is a narrow MLM encoder built from the same Block. It reads the discriminator's own embeddings
output (token, position and segment embeddings are shared, as in the paper), projects it to its width, runs
`n_layers` blocks and predicts masked tokens through a head tied to the shared token embeddings. Its samples
replace the masked tokens; the discriminator (the model's backbone) then labels every token as original or
replaced through `ReplacedTokenHead`. Finetuning, embedding and export use the discriminator's backbone only.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import HeadsConfig, ModelConfig
from bertkit.nn.attention import build_mask
from bertkit.nn.block import Block, make_norm
from bertkit.nn.heads import HeadInput, TiedProjection


def generator_config(cfg: ModelConfig) -> ModelConfig:
    """The generator's blocks: the discriminator's switches at `generator_d_model` width, with the head size kept
    where the width allows (ELECTRA-Small: 256 → 64, one head of 64) and a 4× FFN."""
    width, heads = cfg.generator_width, cfg.generator_heads
    return dataclasses.replace(cfg, d_model=width, n_heads=heads, n_kv_heads=heads, d_ff=4 * width,
                               generator_d_model=None)


class Generator(nn.Module):
    """(B, T, D) embeddings → project to G → blocks → [final norm] → MLM transform to D → tied vocabulary logits
    for the selected positions: (N, V)."""

    def __init__(self, cfg: ModelConfig, heads: HeadsConfig):
        super().__init__()
        small = generator_config(cfg)
        self.project = nn.Linear(cfg.d_model, small.d_model) if small.d_model != cfg.d_model else nn.Identity()
        self.blocks = nn.ModuleList(Block(small) for _ in range(cfg.n_layers))
        self.final_norm = make_norm(small) if small.norm_position == "pre" else None
        # BERT's MLM transform, widening back to the shared embedding size the output is tied to
        self.dense = nn.Linear(small.d_model, cfg.d_model)
        self.norm = make_norm(cfg)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.decoder = TiedProjection()

    def forward(self, x: HeadInput) -> torch.Tensor:
        """x.hidden: the embeddings output (B, T, D); x.select (B, T) bool; x.mask."""
        t = x.hidden.shape[1]
        mask, _ = build_mask(x.mask, t, t, causal=False, device=x.hidden.device)
        h = self.project(x.hidden)  # (B, T, G)
        for block in self.blocks:
            h, _ = block(h, mask=mask)
        if self.final_norm is not None:
            h = self.final_norm(h)
        h = self.norm(F.gelu(self.dense(h[x.select])))  # (N, D)
        return self.decoder(h, self.bias)  # (N, V)


class ReplacedTokenHead(nn.Module):
    """The discriminator's head: dense → GELU → one logit per token, "replaced" > 0. (B, T, D) -> (B, T)"""

    def __init__(self, cfg: ModelConfig, heads: HeadsConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.out = nn.Linear(cfg.d_model, 1)

    def forward(self, x: HeadInput) -> torch.Tensor:
        return self.out(F.gelu(self.dense(x.hidden))).squeeze(-1)  # (B, T)


def sample_tokens(logits: torch.Tensor, seed: int) -> torch.Tensor:
    """One token per row from softmax(logits), seeded (exact resume): (N, V) -> (N,). No gradient flows through
    the sample (the generator learns from its MLM loss only, as in the paper). Inverse-CDF sampling: one uniform
    per row against the cumulative probabilities — the same distribution as torch.multinomial, which on a CPU
    took 18× longer here (50 vs 2.8 ms for 300 × 8,000) and cost RTD a third of its throughput."""
    generator = torch.Generator(device=logits.device).manual_seed(seed)
    cdf = logits.detach().float().softmax(-1).cumsum(-1)  # (N, V)
    u = torch.rand(cdf.shape[0], 1, generator=generator, device=logits.device) * cdf[:, -1:]  # (N, 1)
    # right=True: the first token whose cumulative probability exceeds u, so a token of probability 0 is never drawn
    # (left, u = 0 drew token 0 whatever its probability)
    return torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)
