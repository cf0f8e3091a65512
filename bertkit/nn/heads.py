"""Heads composed on top of a backbone's hidden states.

So far: BERT's [CLS] pooler, kept so Hugging Face checkpoints round-trip. The MLM, LM, pooling and task heads
arrive with the jobs that train them (pretraining, finetuning, sentence embeddings, generation).
"""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config import ModelConfig


class DensePooler(nn.Module):
    """BERT's pooler: tanh(W h_[CLS] + b). (B, T, D) -> (B, D)"""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))
