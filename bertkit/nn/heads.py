"""Heads composed on top of a backbone's hidden states. Every head has one signature, `head(HeadInput) -> Tensor`:
the model hands each the same bundle (states, mask, pooled vectors, selected positions) and a head reads what it
needs. Heads whose output layer is the token embedding (weight tying) hold a `TiedProjection` that the model ties.

BERT's [CLS] pooler (kept so Hugging Face checkpoints round-trip), the tied MLM head, the tied next-token (LM)
head of decoders, sequence pooling
(cls | mean | max), and the finetuning heads: a sequence classifier, a per-token tagger, and SBERT's pair
classifier (the softmax objective over two sentence embeddings).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import HeadsConfig, ModelConfig
from bertkit.nn.block import make_norm


@dataclass
class HeadInput:
    """What a head may read. `hidden`: the stack's last states (B, T, D) — or rows already selected (N, D) for the
    MLM head; ELECTRA's generator reads the embeddings output here. `mask` (B, T): 1 at real tokens. `pooled`
    (B, D): pooled sentence vectors (`forward(pool=...)`). `select` (B, T) bool: the positions a vocabulary head
    scores."""

    hidden: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    pooled: torch.Tensor | None = None
    select: torch.Tensor | None = None


class TiedProjection(nn.Module):
    """Weight tying as a module: (…, D) -> (…, V) scores against the token embedding it is tied to (`tie`, done by
    the Model), plus an optional bias. It holds the embedding by reference, not as a submodule, so the matrix is
    stored once (under the backbone: state_dict keys unchanged), moves with it, and a copied model's projection
    follows the copy's embedding."""

    def __init__(self):
        super().__init__()
        self._tied: tuple[nn.Embedding, ...] = ()  # a tuple: nn.Module would register a bare Module as a child

    def tie(self, embedding: nn.Embedding) -> None:
        """Project onto `embedding`'s rows from now on."""
        self._tied = (embedding,)

    def forward(self, hidden: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if not self._tied:
            raise RuntimeError("a TiedProjection must be tied to a token embedding before use")
        return F.linear(hidden, self._tied[0].weight, bias)  # (…, V)


class DensePooler(nn.Module):
    """BERT's pooler: tanh(W h_[CLS] + b). (B, T, D) -> (B, D)"""

    def __init__(self, cfg: ModelConfig, heads: HeadsConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x: HeadInput) -> torch.Tensor:
        return torch.tanh(self.dense(x.hidden[:, 0]))


class MLMHead(nn.Module):
    """BERT's MLM head: dense → GELU → norm → decoder tied to the token embeddings (+ its own bias).

    Runs on the masked positions only (`select`, or rows already selected), (N, D) -> (N, V): the vocabulary
    projection is the most expensive matrix in a small BERT, and 85% of the positions carry no label.
    """

    def __init__(self, cfg: ModelConfig, heads: HeadsConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.norm = make_norm(cfg)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.decoder = TiedProjection()

    def forward(self, x: HeadInput) -> torch.Tensor:
        rows = x.hidden if x.select is None else x.hidden[x.select]  # (N, D)
        h = self.norm(F.gelu(self.dense(rows)))  # (N, D)
        return self.decoder(h, self.bias)  # (N, V)


class LMHead(nn.Module):
    """Next-token head of a decoder (GPT) or encoder-decoder (Vaswani et al.): the final states projected onto the
    token embeddings (tied, no weights of its own). (…, D) -> (…, V)

    Pre-norm stacks end in a final norm, so the states arrive normalised; post-norm blocks end in one anyway.
    """

    def __init__(self, cfg: ModelConfig, heads: HeadsConfig):
        super().__init__()
        self.decoder = TiedProjection()

    def forward(self, x: HeadInput) -> torch.Tensor:
        return self.decoder(x.hidden)  # (…, V)


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None, mode: str) -> torch.Tensor:
    """Summarise a sequence: the [CLS] state, or the mean / max over real (unpadded) tokens. (B, T, D) -> (B, D)

    Padded positions never reach the result, whatever they hold (their states are undefined): masked out, not
    multiplied by zero."""
    if mode == "cls":
        return hidden[:, 0]
    if mode not in ("mean", "max"):
        raise ValueError(f"pooling {mode!r} is not cls, mean or max")
    if attention_mask is None:
        return hidden.mean(1) if mode == "mean" else hidden.amax(1)
    real = attention_mask.bool().unsqueeze(-1)  # (B, T, 1)
    if mode == "mean":
        # padding filled, not multiplied by 0 (0 × inf / NaN is NaN: padded states are undefined, see `attention`);
        # float32 sums: a bf16 sum over hundreds of tokens loses the low bits
        total = hidden.masked_fill(~real, 0).float().sum(1)  # (B, D)
        return (total / real.sum(1).clamp(min=1)).to(hidden.dtype)
    return hidden.masked_fill(~real, torch.finfo(hidden.dtype).min).amax(1)


class Pooling(nn.Module):
    """`pool` as a module (cls | mean | max). (B, T, D) -> (B, D)"""

    def __init__(self, mode: str = "cls"):
        super().__init__()
        if mode not in ("cls", "mean", "max"):
            raise ValueError(f"pooling {mode!r} is not cls, mean or max")
        self.mode = mode

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return pool(hidden, attention_mask, self.mode)


class SequenceClassifier(nn.Module):
    """pool → dropout → dense → tanh → dropout → linear: (B, T, D) -> (B, num_labels).

    The dense + tanh layer is BERT's pooler shape, trained for the task (RoBERTa's classification head), so a
    backbone pretrained without a pooler classifies as well as one with it.
    """

    def __init__(self, cfg: ModelConfig, heads: HeadsConfig):
        super().__init__()
        self.pool = Pooling(heads.classifier_pooling)
        self.dropout = nn.Dropout(cfg.dropout)
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.out = nn.Linear(cfg.d_model, heads.num_labels)

    def forward(self, x: HeadInput) -> torch.Tensor:
        pooled = self.dropout(self.pool(x.hidden, x.mask))  # (B, D)
        return self.out(self.dropout(torch.tanh(self.dense(pooled))))  # (B, C)


class PairClassifier(nn.Module):
    """SBERT's softmax objective: linear(u, v, |u - v|) over two sentence embeddings. (2N, D) -> (N, num_labels),
    the first N rows being the u's and the last N the v's."""

    def __init__(self, cfg: ModelConfig, heads: HeadsConfig):
        super().__init__()
        self.out = nn.Linear(3 * cfg.d_model, heads.num_labels)

    def forward(self, x: HeadInput) -> torch.Tensor:
        if x.pooled is None:
            raise ValueError("the pair classifier reads pooled embeddings: pass pool=")
        u, v = x.pooled.chunk(2)  # (N, D) each
        return self.out(torch.cat([u, v, (u - v).abs()], dim=-1))  # (N, C)


class TokenClassifier(nn.Module):
    """dropout → linear on every position: (B, T, D) -> (B, T, num_labels)."""

    def __init__(self, cfg: ModelConfig, heads: HeadsConfig):
        super().__init__()
        self.dropout = nn.Dropout(cfg.dropout)
        self.out = nn.Linear(cfg.d_model, heads.num_labels)

    def forward(self, x: HeadInput) -> torch.Tensor:
        return self.out(self.dropout(x.hidden))
