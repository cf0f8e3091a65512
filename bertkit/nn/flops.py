"""Analytic FLOP counts of the transformer: what a forward (and a training step) costs in matrix multiplications.

Model FLOPs in the sense of PaLM's MFU (Chowdhery et al. 2022): 2 FLOPs per multiply-add of every matrix product the
model needs — projections, attention scores and weighted sums over all Tq × Tk pairs (also under a causal mask),
FFN, heads — and none for elementwise work (norms, activations, softmax, biases) or recomputation (a fused attention
kernel's backward recomputes the scores: hardware FLOPs, not model FLOPs). A training step is 3 × forward: the
backward pass multiplies every product twice (the gradient of each input and of each weight).

Checked against `torch.utils.flop_counter.FlopCounterMode` on the eager attention path
(tests/nn/test_flops.py); the CPU's fused SDPA kernel is invisible to the counter, so on it only the analytic count
is right.
"""

from __future__ import annotations

from bertkit.config import ModelConfig
from bertkit.nn.electra import generator_config


def attention_flops(cfg: ModelConfig, batch: int, t_q: int, t_k: int, cross: bool = False) -> int:
    """One attention sublayer: queries from `t_q` tokens, keys and values from `t_k` (its own tokens, or the
    encoder's memory for cross-attention)."""
    d, d_q, d_kv = cfg.d_model, cfg.n_heads * cfg.d_head, cfg.n_kv_heads * cfg.d_head
    projections = 2 * batch * (t_q * d * d_q + 2 * t_k * d * d_kv + t_q * d_q * d)  # q, k, v, o
    mixing = 2 * 2 * batch * cfg.n_heads * t_q * t_k * cfg.d_head  # q kᵀ and weights @ v
    if cfg.positions == "relative" and not cross:
        mixing *= 2  # Shaw et al.: q · a^K and weights @ a^V, one more product each
    return projections + mixing


def ffn_flops(cfg: ModelConfig, tokens: int) -> int:
    """The FFN of one block over `tokens` positions (SwiGLU has a third matrix, its gate)."""
    return 2 * tokens * cfg.d_model * cfg.d_ff * (3 if cfg.activation == "swiglu" else 2)


def stack_flops(cfg: ModelConfig, batch: int, t: int, memory: int | None = None, n_layers: int | None = None) -> int:
    """`n_layers` (default: the config's) blocks over (batch, t) tokens; with `memory` (encoder length) each block
    also cross-attends to it."""
    per_block = attention_flops(cfg, batch, t, t) + ffn_flops(cfg, batch * t)
    if memory is not None:
        per_block += attention_flops(cfg, batch, t, memory, cross=True)
    return (cfg.n_layers if n_layers is None else n_layers) * per_block


def head_flops(cfg: ModelConfig, head: str, rows: int, t: int, num_labels: int) -> int:
    """A finetuning head's forward on `rows` inputs of `t` tokens: the classifier (dense D→D, then D→num_labels on
    each row's pooled state), the tagger (D→num_labels on every token), the pair classifier (3D→num_labels on each
    pair's (u, v, |u − v|))."""
    d = cfg.d_model
    if head == "classifier":
        return 2 * rows * (d * d + d * num_labels)
    if head == "tagger":
        return 2 * rows * t * d * num_labels
    if head == "pair_classifier":
        return 2 * rows * 3 * d * num_labels
    raise ValueError(f"no FLOP count for head {head!r}")


def generator_flops(cfg: ModelConfig, batch: int, t: int, masked: int) -> int:
    """ELECTRA's generator: projection to its width, its blocks, and its MLM head on the `masked` positions."""
    small = generator_config(cfg)
    project = 2 * batch * t * cfg.d_model * small.d_model if small.d_model != cfg.d_model else 0
    head = 2 * masked * (small.d_model * cfg.d_model + cfg.d_model * cfg.vocab_size)
    return project + stack_flops(small, batch, t) + head


def forward_flops(cfg: ModelConfig, objective: str, batch: int, t: int, masked: int = 0,
                  source: int | None = None) -> int:
    """One forward pass of a pretraining objective on a (batch, t) block batch.

    mlm: encoder + MLM head (dense and vocabulary projection) on the `masked` positions; rtd: the generator, the
    encoder on the corrupted input and the per-token discriminator head; clm: decoder + LM head on every position;
    seq2seq: an encoder over `source` tokens, a decoder over t cross-attending to it, the LM head on every target
    position."""
    d, v = cfg.d_model, cfg.vocab_size
    if objective == "mlm":
        return stack_flops(cfg, batch, t) + 2 * masked * (d * d + d * v)
    if objective == "rtd":
        return generator_flops(cfg, batch, t, masked) + stack_flops(cfg, batch, t) + 2 * batch * t * (d * d + d)
    if objective == "clm":
        return stack_flops(cfg, batch, t) + 2 * batch * t * d * v
    if objective == "seq2seq":
        if source is None:
            raise ValueError("seq2seq: pass the source length")
        decoder_layers = cfg.n_decoder_layers or cfg.n_layers
        return (stack_flops(cfg, batch, source) + stack_flops(cfg, batch, t, memory=source, n_layers=decoder_layers)
                + 2 * batch * t * d * v)
    raise ValueError(f"no FLOP count for objective {objective!r}")


def training(forward: int) -> int:
    """A training step's FLOPs from its forward's: the backward multiplies every product twice (3 × forward)."""
    return 3 * forward


def train_flops(cfg: ModelConfig, objective: str, batch: int, t: int, masked: int = 0,
                source: int | None = None) -> int:
    """One training step of a pretraining objective on that batch."""
    return training(forward_flops(cfg, objective, batch, t, masked, source))
