"""Heads composed on top of a backbone's hidden states.

So far: BERT's [CLS] pooler (kept so Hugging Face checkpoints round-trip) and the tied MLM head. The LM, pooling
and task heads arrive with the jobs that train them (finetuning, sentence embeddings, generation).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import ModelConfig
from bertkit.nn.block import make_norm


class DensePooler(nn.Module):
    """BERT's pooler: tanh(W h_[CLS] + b). (B, T, D) -> (B, D)"""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class MLMHead(nn.Module):
    """BERT's MLM head: dense → GELU → norm → decoder tied to the token embeddings (+ its own bias).

    Called on the hidden states of the masked positions only, (N, D) -> (N, V): the vocabulary projection is the
    most expensive matrix in a small BERT, and 85% of the positions carry no label.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm = make_norm(cfg)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, hidden: torch.Tensor, embedding_weight: torch.Tensor) -> torch.Tensor:
        h = self.norm(F.gelu(self.dense(hidden)))  # (N, D)
        return F.linear(h, embedding_weight, self.bias)  # (N, V)
