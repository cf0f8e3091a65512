"""Scaled dot-product multi-head attention: MHA / GQA / MQA, self- or cross-attention, padding and causal masks.

Two paths compute the same function: `F.scaled_dot_product_attention` (fast; fused kernels on GPU) and a readable
eager path that also returns the attention weights (for attention maps, and to test the fast path against).
Relative positions need the weights inside the value sum, so they always take the eager path.

A third input form serves unpadded batches (`Packed`): the real tokens of every sequence back to back as one row,
attention kept inside each sequence — on a GPU by PyTorch's variable-length flash kernel (`varlen_attn`, no work
spent on padding), elsewhere by SDPA with the equivalent block-diagonal mask (the reference it is tested against).

Outputs at padded positions are undefined: only real positions (1 in the padding mask) are meaningful. The packed
path never computes padded positions (the stack puts zeros there), and the padded SDPA and eager paths compute
finite values there that may differ between paths, precisions and kernels. Everything downstream (pooling, losses,
heads, metrics) must select or mask real positions, never read padding.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import ModelConfig
from bertkit.nn.positions import RelativePositions, Rotary

AttentionImpl = Literal["sdpa", "eager"]


def takes_keyword(function, name: str) -> bool:
    """Whether `function`'s signature names the parameter `name` (False when it cannot be read; a bare **kwargs
    does not count: a wrapper's **kwargs says nothing about what it passes on to)."""
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


def _varlen():
    """PyTorch's variable-length flash attention (CUDA, fp16 / bf16), or None where this PyTorch lacks it (packed
    batches then use the block-diagonal reference). Imported on first use, not with this module: its module imports
    torch._dynamo, ~0.8 s at the start of every process, most of which (CPU runs, `info`, `predict`) never call it.
    Also sets VARLEN_GQA: varlen_attn of torch 2.10 / 2.11 has no `enable_gqa` (torch 2.13's has), and without it
    GQA / MQA repeats the k/v heads before the call; the signature is read once, not per call (every layer, every
    step). Both stay module attributes (`attention.varlen_attn`, `attention.VARLEN_GQA`), which tests replace."""
    names = globals()
    if "varlen_attn" not in names:
        try:
            from torch.nn.attention.varlen import varlen_attn as kernel
        except ImportError:  # older PyTorch
            kernel = None
        names["varlen_attn"] = kernel
    if "VARLEN_GQA" not in names:
        names["VARLEN_GQA"] = names["varlen_attn"] is not None and takes_keyword(names["varlen_attn"], "enable_gqa")
    return names["varlen_attn"]


def __getattr__(name: str):
    """`attention.varlen_attn` and `attention.VARLEN_GQA`, resolved on first read (see `_varlen`)."""
    if name in ("varlen_attn", "VARLEN_GQA"):
        _varlen()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class Packed:
    """An unpadded batch: sequence i's tokens are positions cu_seqlens[i]:cu_seqlens[i+1] of one (1, N, D) row.

    Given to attention in place of a mask; every query attends to the keys of its own sequence only."""

    cu_seqlens: torch.Tensor  # (B + 1,) int32: 0, len_0, len_0 + len_1, ...
    max_len: int  # the longest sequence

    def block_mask(self) -> torch.Tensor:
        """The equivalent dense mask (1, 1, N, N): True where query and key belong to the same sequence."""
        lengths = self.cu_seqlens[1:] - self.cu_seqlens[:-1]  # (B,)
        owner = torch.repeat_interleave(torch.arange(len(lengths), device=lengths.device), lengths)  # (N,)
        return (owner[:, None] == owner[None, :])[None, None]

    def kernel_ready(self, q: torch.Tensor) -> bool:
        """Whether the variable-length flash kernel can run these queries (see `varlen_ready`; half precision)."""
        return q.dtype in (torch.float16, torch.bfloat16) and varlen_ready(q.device, q.shape[-1])


def varlen_ready(device: torch.device, d_head: int) -> bool:
    """Whether PyTorch's variable-length flash kernel runs on `device` for heads of `d_head`: this PyTorch has it,
    a CUDA GPU of compute capability 8.0 or later (flash attention's floor), a head size that is a multiple of 8 up
    to 256."""
    return (device.type == "cuda" and _varlen() is not None and torch.cuda.get_device_capability(device) >= (8, 0)
            and d_head % 8 == 0 and d_head <= 256)


def build_mask(key_padding: torch.Tensor | None, t_q: int, t_k: int, causal: bool,
               device: torch.device | None = None) -> tuple[torch.Tensor | None, bool]:
    """One boolean mask for a whole stack: True where a query may attend to a key.

    key_padding: (B, Tk) with True (or 1) at real tokens. Returns (mask, is_causal): mask is (B, 1, 1, Tk) for
    padding alone (broadcast over queries, never materialised per query), (B|1, 1, Tq, Tk) with a causal part, or
    None; `is_causal` is True only when a plain square causal mask is all there is (SDPA then builds it itself).
    A query row with no allowed key (an all-padding row, or left padding under a causal mask) is opened to every
    key so both paths stay finite; such rows are padding, and their outputs are never used.
    """
    if key_padding is None:
        if not causal:
            return None, False
        if t_q == t_k:
            return None, True
    mask = None
    if key_padding is not None:
        if key_padding.shape[-1] != t_k:  # a mask of the new tokens only would broadcast over the cached keys
            raise ValueError(f"attention_mask covers {key_padding.shape[-1]} positions, the keys are {t_k} "
                             "(with a KV cache it covers the cached positions and the new ones)")
        mask = key_padding.bool()[:, None, None, :]  # (B, 1, 1, Tk)
        device = key_padding.device
    if causal:
        # Queries are the last t_q positions of the t_k keys (offset > 0 when earlier keys are cached).
        tri = torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)  # (Tq, Tk)
        mask = tri[None, None] if mask is None else mask & tri
    return mask | ~mask.any(dim=-1, keepdim=True), False


class KVCache:
    """Keys and values of the positions decoded so far, per block, for incremental decoding (generate, translate).

    `layers[i]` holds block i's {"self": {"k", "v"}, "cross": {"k", "v"}}: self-attention keys/values grow by the
    new positions each step; cross-attention keys/values are computed from the encoder states once and reused.
    `positions` are the cached keys' position ids, (Tk,) or (B, Tk) (left-padded batches), which rotary and
    relative positions need. Keys are stored after the rotary rotation, so a cached key is never rotated twice.
    """

    def __init__(self, n_layers: int):
        self.layers: list[dict[str, dict[str, torch.Tensor]]] = [{} for _ in range(n_layers)]
        self.positions: torch.Tensor | None = None

    @property
    def length(self) -> int:
        """Positions cached so far."""
        return 0 if self.positions is None else self.positions.shape[-1]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` (B',) of every cached tensor, in that order: beam search follows its surviving
        hypotheses. Cross-attention keys/values are reordered too (they are per source sentence)."""
        for layer in self.layers:
            for kind in layer.values():
                for name, tensor in kind.items():
                    kind[name] = tensor.index_select(0, index)
        if self.positions is not None and self.positions.dim() == 2:
            self.positions = self.positions.index_select(0, index)


class Attention(nn.Module):
    """Multi-head attention with `n_kv_heads` key/value heads (n_heads: MHA, 1: MQA, between: GQA).

    Self-attention when `kv` is None, cross-attention (queries from x, keys/values from kv) otherwise. Rotary and
    relative positions act only in self-attention (`cross=False`); cross-attention has no notion of offset.
    Outputs at padded query positions are undefined (see the module docstring): read real positions only.
    """

    def __init__(self, cfg: ModelConfig, cross: bool = False):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = cfg.n_heads, cfg.n_kv_heads, cfg.d_head
        self.q = nn.Linear(cfg.d_model, cfg.n_heads * cfg.d_head, bias=cfg.bias)
        self.k = nn.Linear(cfg.d_model, cfg.n_kv_heads * cfg.d_head, bias=cfg.bias)
        self.v = nn.Linear(cfg.d_model, cfg.n_kv_heads * cfg.d_head, bias=cfg.bias)
        self.o = nn.Linear(cfg.n_heads * cfg.d_head, cfg.d_model, bias=cfg.bias)
        self.dropout = cfg.attention_dropout
        self.relative = RelativePositions(cfg.max_distance, cfg.d_head) if cfg.positions == "relative" and not cross \
            else None
        self.rotary = Rotary(cfg.d_head, cfg.rotary_base) if cfg.positions == "rotary" and not cross else None
        self.impl: AttentionImpl = "sdpa"

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.d_head).transpose(1, 2)  # (B, T, n*dh) -> (B, n, T, dh)

    def forward(self, x: torch.Tensor, kv: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                is_causal: bool = False, q_pos: torch.Tensor | None = None, k_pos: torch.Tensor | None = None,
                need_weights: bool = False, cache: dict[str, torch.Tensor] | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x (B, Tq, D), kv (B, Tk, D) or None; mask/is_causal from `build_mask`, or a `Packed` batch (x then
        (1, N, D), q_pos (N,)); q_pos (Tq,) or (B, Tq) position
        ids of the queries, k_pos those of every key, cached ones included (default: the queries are the last Tq
        of 0..Tk-1). `cache` (one KVCache entry, updated in place): self-attention appends this call's keys and
        values to it; cross-attention computes them from `kv` once and reuses them. Returns (B, Tq, D) and, when
        asked (or on the eager path), the weights (B, H, Tq, Tk)."""
        fuse = x.is_cuda if FUSE_QKV is None else FUSE_QKV
        if fuse and kv is None and torch.is_grad_enabled():  # training: one (D, (H + 2 Hkv) dh) product
            q, k, v = self._fused_qkv(x)  # (B, H, Tq, dh), (B, Hkv, Tq, dh) x 2
        else:
            q = self._heads(self.q(x), self.n_heads)  # (B, H, Tq, dh)
            if kv is not None and cache is not None and "k" in cache:  # cross-attention: the encoder's K/V, reused
                k, v = cache["k"], cache["v"]
            else:
                source = x if kv is None else kv
                k = self._heads(self.k(source), self.n_kv_heads)  # (B, Hkv, Tnew, dh)
                v = self._heads(self.v(source), self.n_kv_heads)  # (B, Hkv, Tnew, dh)
        t_q = q.shape[2]
        past = cache["k"].shape[2] if kv is None and cache is not None and "k" in cache else 0
        if self.rotary is not None or self.relative is not None:
            q_pos = torch.arange(past, past + t_q, device=x.device) if q_pos is None else q_pos
            k_pos = torch.arange(past + t_q, device=x.device) if k_pos is None else k_pos
        if self.rotary is not None:  # self-attention only: the new keys are the new tokens, at the queries' places
            q = Rotary.rotate(q, *self.rotary.cos_sin(q_pos))
            k = Rotary.rotate(k, *self.rotary.cos_sin(q_pos))
        if cache is not None:
            if kv is None and past:
                k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)  # (B, Hkv, Tk, dh)
            cache["k"], cache["v"] = k, v
        dropout = self.dropout if self.training else 0.0

        if isinstance(mask, Packed):
            out, weights = self._packed(q, k, v, mask, dropout), None
        elif self.impl == "sdpa" and not need_weights and self.relative is None:
            out = sdpa(q, k, v, mask, dropout, is_causal, gqa=self.n_kv_heads != self.n_heads)
            weights = None
        else:
            out, weights = self._eager(q, k, v, mask, is_causal, dropout, q_pos, k_pos)
        b = out.shape[0]
        out = out.transpose(1, 2).reshape(b, t_q, self.n_heads * self.d_head)  # (B, Tq, H*dh)
        return self.o(out), weights

    def _fused_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention's queries, keys and values from one matrix product over the three weights stacked
        (the parameters stay q / k / v, so checkpoints and imports are unchanged): x (B, T, D) -> (B, H, T, dh),
        (B, Hkv, T, dh), (B, Hkv, T, dh)."""
        weight = torch.cat([self.q.weight, self.k.weight, self.v.weight])  # ((H + 2 Hkv) dh, D)
        bias = None if self.q.bias is None else torch.cat([self.q.bias, self.k.bias, self.v.bias])
        sizes = (self.n_heads * self.d_head, self.n_kv_heads * self.d_head, self.n_kv_heads * self.d_head)
        q, k, v = F.linear(x, weight, bias).split(sizes, dim=-1)  # (B, T, H dh), (B, T, Hkv dh) x 2
        return self._heads(q, self.n_heads), self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)

    def _packed(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packed: Packed,
                dropout: float) -> torch.Tensor:
        """Attention within each sequence of a packed row: q (1, H, N, dh), k / v (1, Hkv, N, dh) -> (1, H, N, dh)."""
        gqa = self.n_kv_heads != self.n_heads
        if packed.kernel_ready(q) and dropout == 0.0:  # the flash kernel takes (N, heads, dh) and no dropout
            if gqa and not VARLEN_GQA:  # query head h reads kv head h // (H / Hkv), as in `_eager`
                group = self.n_heads // self.n_kv_heads
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (1, H, N, dh)
            grouped = {"enable_gqa": True} if gqa and VARLEN_GQA else {}  # MHA: no keyword, which 2.10 / 2.11 lack
            out = _varlen()(*(t[0].transpose(0, 1).contiguous() for t in (q, k, v)), packed.cu_seqlens,
                              packed.cu_seqlens, packed.max_len, packed.max_len, **grouped)  # (N, H, dh)
            return out.transpose(0, 1)[None]
        return sdpa(q, k, v, packed.block_mask(), dropout, False, gqa=gqa)

    def _eager(self, q, k, v, mask, is_causal, dropout, q_pos, k_pos):
        """Reference attention, written out: softmax(q kᵀ / sqrt(dh) + relative bias, masked) v."""
        if self.n_kv_heads != self.n_heads:  # GQA/MQA: query head h reads kv head h // (H / Hkv)
            k = k.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)  # (B, H, Tk, dh)
            v = v.repeat_interleave(self.n_heads // self.n_kv_heads, dim=1)
        t_q, t_k = q.shape[2], k.shape[2]
        scale = 1.0 / math.sqrt(self.d_head)
        scores = (q @ k.transpose(-1, -2)) * scale  # (B, H, Tq, Tk)
        buckets = None
        if self.relative is not None:
            buckets = self.relative.bucket(q_pos, k_pos)  # (B|1, Tq, Tk)
            if buckets.dim() == 2:
                buckets = buckets[None]
            scores = scores + self.relative.score_bias(q, buckets) * scale
        if is_causal:
            mask = torch.ones(t_q, t_k, dtype=torch.bool, device=q.device).tril(diagonal=t_k - t_q)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)  # (B, H, Tq, Tk)
        dropped = F.dropout(weights, p=dropout) if dropout > 0 else weights
        out = dropped @ v  # (B, H, Tq, dh)
        if self.relative is not None:
            out = out + self.relative.value_term(dropped, buckets)
        return out, weights


# Where gradients are taken (training), self-attention can compute q, k and v in one matrix product over the stacked
# weights: one wider GEMM for a GPU's tensor cores instead of three (forward, input and weight gradients alike).
# BERT-base, bf16, compiled, batch 512 x 128 on an H200, three runs: 1.02x, 1.035x and 1.034x the step (the last
# against another call's row, the peer's own drift taken out). So it is on where the input is on a GPU (None, the
# default); on a CPU it measured neutral, and CPU runs keep their exact numbers (it moves a run's weights by float
# noise: one exact-agreement test on a CPU met a near-tie with it on, tests/jobs/test_sentence.py, its Spearman 1e-5
# apart, its Pearson 2e-8). Never without gradients (evaluation, inference, decoding): stacking per call cost a
# one-token decoding step 1.57x on a CPU.
# True / False force it either way (a benchmark times both in one run: `--fuse-qkv`, `--no-fuse-qkv`).
FUSE_QKV: bool | None = None

# On a CPU, PyTorch's flash-attention kernel differentiates bf16 far slower than fp32, while its bf16 forward is the
# faster one: forward + backward at 64 x 4 heads x 128 x 64 took 100.6 ms in bf16 against 56.8 ms in fp32, 1.8-3x
# over three runs (AMX Xeon, torch 2.13, `benchmarks/attention_precision.py`). So a CPU pass that will be
# differentiated computes attention in fp32 (inputs cast up, output cast back: more exact, not less); inference and
# GPUs keep the input's dtype. A switch so that the benchmark can time both paths in one run.
CPU_BF16_TRAINING_ATTENTION_IN_FP32 = True


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout: float,
         is_causal: bool, gqa: bool) -> torch.Tensor:
    """`F.scaled_dot_product_attention` of q (B, H, Tq, dh), k / v (B, Hkv, Tk, dh) -> (B, H, Tq, dh), in fp32 for a
    bf16 CPU pass that will be differentiated (see CPU_BF16_TRAINING_ATTENTION_IN_FP32)."""
    if (CPU_BF16_TRAINING_ATTENTION_IN_FP32 and q.device.type == "cpu" and q.dtype == torch.bfloat16
            and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))):
        if mask is not None and mask.is_floating_point():  # an additive mask follows the scores' dtype
            mask = mask.float()
        with torch.autocast("cpu", enabled=False):  # autocast would cast the fp32 inputs straight back to bf16
            out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout,
                                                 is_causal=is_causal, enable_gqa=gqa)
        return out.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal,
                                          enable_gqa=gqa)


def set_attention_impl(module: nn.Module, impl: AttentionImpl) -> None:
    """Switch every Attention inside `module` to the SDPA fast path or the eager reference path."""
    if impl not in ("sdpa", "eager"):
        raise ValueError(f"attention impl must be sdpa or eager, got {impl!r}")
    for m in module.modules():
        if isinstance(m, Attention):
            m.impl = impl
