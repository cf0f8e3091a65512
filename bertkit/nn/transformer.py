"""Embeddings and the three stacks built from the one Block: Encoder (BERT), Decoder (GPT), EncoderDecoder.

Every stack returns hidden states; heads live in `heads.py` and are composed on top (see `model.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from bertkit.config import ModelConfig
from bertkit.nn.attention import KVCache, Packed, build_mask, varlen_ready
from bertkit.nn.block import Block, make_norm
from bertkit.nn.positions import SinusoidalPositions


@dataclass
class StackOutput:
    """What a stack returns: last hidden states, and on request every layer's states and attention weights."""

    last_hidden_state: torch.Tensor  # (B, T, D)
    hidden_states: list[torch.Tensor] | None = None  # n_layers + 1 entries; [0] is the embeddings output
    attentions: list[dict[str, torch.Tensor]] | None = None  # per layer: {"self": (B,H,T,T)[, "cross": (B,H,T,S)]}
    logits: torch.Tensor | None = None  # set by Model when a head ran inside forward, e.g. MLM logits (N, V)
    pooled: torch.Tensor | None = None  # set by Model(pool=...): one vector per sequence (B, D)
    # set by Model.replaced_token_detection: the discriminator's logits (B, T), which tokens were replaced (B, T)
    # and the generator's samples (N,)
    rtd_logits: torch.Tensor | None = None
    replaced: torch.Tensor | None = None
    sampled: torch.Tensor | None = None


class Embeddings(nn.Module):
    """token + absolute position (learned | sinusoidal) + token type, then [norm] and dropout. (B, T) -> (B, T, D)

    Relative, rotary and `none` add nothing here: they act inside attention (or not at all).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.max_len = cfg.max_len
        self.token = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.scale = cfg.d_model ** 0.5 if cfg.scale_embeddings else None
        self.position: nn.Module | None = None
        if cfg.positions == "learned":
            self.position = nn.Embedding(cfg.max_len, cfg.d_model)
        elif cfg.positions == "sinusoidal":
            self.position = SinusoidalPositions(cfg.max_len, cfg.d_model)
        self.token_type = nn.Embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
        self.norm = make_norm(cfg) if cfg.embedding_norm else None
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids (B, T); token_type_ids (B, T) (default all 0); position_ids (T,) or (B, T) (default 0..T-1)."""
        x = self.token(input_ids)  # (B, T, D)
        if self.scale is not None:
            x = x * self.scale
        if self.position is not None:
            if position_ids is None:
                if input_ids.shape[1] > self.max_len:
                    raise ValueError(f"sequence of {input_ids.shape[1]} tokens is longer than max_len={self.max_len}")
                position_ids = torch.arange(input_ids.shape[1], device=input_ids.device)
            elif int(position_ids.max()) >= self.max_len:
                raise ValueError(f"position id {int(position_ids.max())} is beyond max_len={self.max_len}")
            x = x + self.position(position_ids)
        if self.token_type is not None:
            if token_type_ids is None:
                x = x + self.token_type.weight[0]
            else:
                x = x + self.token_type(token_type_ids)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


Unpad = Literal["auto", "always", "never"]


class _Stack(nn.Module):
    """Embeddings → blocks → [final norm for pre-norm]; `causal` and `cross` fix the stack's kind.

    A padded bidirectional batch may run unpadded (`unpad`, ModernBERT's main inference win): after the embeddings
    the real tokens are packed into one row, every block works on real tokens only, attention stays inside each
    sequence (`attention.Packed`), and the states are put back in place at the end (padding positions zero). "auto"
    does so where the variable-length flash kernel runs (`varlen_ready`: CUDA sm80+, fp16 / bf16); "always"
    everywhere (on a CPU through the block-diagonal reference: for tests); "never" not at all (`set_unpad`).
    """

    causal = False

    def __init__(self, cfg: ModelConfig, n_layers: int, cross: bool = False, embeddings: Embeddings | None = None):
        super().__init__()
        self.config = cfg
        self.embeddings = embeddings if embeddings is not None else Embeddings(cfg)
        self.blocks = nn.ModuleList(Block(cfg, cross=cross) for _ in range(n_layers))
        # Pre-norm leaves the residual stream un-normalised; a final norm restores the scale for the heads.
        self.final_norm = make_norm(cfg) if cfg.norm_position == "pre" else None
        self.unpad: Unpad = "auto"

    def _run(self, input_ids, attention_mask, token_type_ids, position_ids, memory, memory_mask,
             output_hidden_states, output_attentions, cache: KVCache | None = None) -> StackOutput:
        if cache is None:
            return self._forward(input_ids, attention_mask, token_type_ids, position_ids, memory, memory_mask,
                                 output_hidden_states, output_attentions)
        # a forward that raises (a step past max_len) leaves the cache as it was: its positions and self-attention
        # keys grow as the forward goes, and a caller decoding on would otherwise be misaligned without a word
        positions, keys = cache.positions, [dict(layer.get("self", {})) for layer in cache.layers]
        try:
            return self._forward(input_ids, attention_mask, token_type_ids, position_ids, memory, memory_mask,
                                 output_hidden_states, output_attentions, cache)
        except BaseException:
            cache.positions = positions
            for layer, kept in zip(cache.layers, keys):
                layer["self"] = kept
            raise

    def _forward(self, input_ids, attention_mask, token_type_ids, position_ids, memory, memory_mask,
                 output_hidden_states, output_attentions, cache: KVCache | None = None) -> StackOutput:
        t = input_ids.shape[1]
        key_positions = position_ids
        if cache is not None:  # incremental decoding: these t tokens follow the cache.length cached ones
            past = cache.length
            if position_ids is None:
                position_ids = torch.arange(past, past + t, device=input_ids.device)  # (T,)
            key_positions = position_ids if cache.positions is None else _cat_positions(cache.positions, position_ids)
            cache.positions = key_positions
        x = self.embeddings(input_ids, token_type_ids, position_ids)  # (B, T, D)
        t_k = t if cache is None else cache.length
        # attention_mask covers every key (cached ones too): (B, Tk)
        mask, is_causal = build_mask(attention_mask, t, t_k, causal=self.causal, device=input_ids.device)
        cross_mask = None
        if memory is not None and memory_mask is not None:
            cross_mask, _ = build_mask(memory_mask, t, memory.shape[1], causal=False)
        select = None
        if cross_mask is None and self._packs(attention_mask, x, cache, output_hidden_states or output_attentions):
            select = attention_mask.bool()  # (B, T)
            x, mask, position_ids = _pack(x, select, position_ids)  # (1, N, D), Packed, (N,)
            key_positions = position_ids
        hidden = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        for i, block in enumerate(self.blocks):
            x, weights = block(x, mask=mask, is_causal=is_causal, positions=position_ids, memory=memory,
                               memory_mask=cross_mask, need_weights=output_attentions, key_positions=key_positions,
                               cache=cache.layers[i] if cache is not None else None)
            if hidden is not None:
                hidden.append(x)
            if attentions is not None:
                attentions.append(weights)
        if self.final_norm is not None:
            x = self.final_norm(x)
            if hidden is not None:
                hidden[-1] = x
        if select is not None:  # back in place: (1, N, D) -> (B, T, D), zeros at padding
            x = _unpack(x, select)
        return StackOutput(x, hidden, attentions)

    def _packs(self, attention_mask: torch.Tensor | None, x: torch.Tensor, cache: KVCache | None,
               per_layer: bool) -> bool:
        """Whether this forward runs unpadded: a bidirectional, uncached stack with padding to drop, no relative
        positions (their bias needs the padded grid), no per-layer outputs, no attention dropout (the flash
        kernel has none), `unpad` allowing it here, and not inside torch.compile: there the check below, the
        packing's data-dependent shapes and the kernel's integer max length would break the graph and recompile it
        for each batch (18 breaks and 16 graphs for 5 batches), so a compiled forward stays padded."""
        cfg = self.config
        if (self.unpad == "never" or self.causal or cache is not None or attention_mask is None or per_layer
                or cfg.positions == "relative" or (self.training and cfg.attention_dropout > 0)
                or torch.compiler.is_compiling()):
            return False
        if self.unpad == "auto":
            half = (torch.is_autocast_enabled(x.device.type) and torch.get_autocast_dtype(x.device.type)
                    in (torch.float16, torch.bfloat16)) or x.dtype in (torch.float16, torch.bfloat16)
            if not (half and varlen_ready(x.device, cfg.d_head)):
                return False
        return not bool(attention_mask.bool().all())  # nothing to drop: the padded path is the same work


def _pack(x: torch.Tensor, select: torch.Tensor, position_ids: torch.Tensor | None
          ) -> tuple[torch.Tensor, Packed, torch.Tensor]:
    """x (B, T, D) and the real-token mask `select` (B, T) -> the real tokens as one row (1, N, D), the `Packed`
    description of its sequences, and each token's position id (N,) (default: its place in its padded row)."""
    b, t = select.shape
    lengths = select.sum(dim=1)  # (B,)
    cu_seqlens = F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0))  # (B + 1,)
    if position_ids is None:
        position_ids = torch.arange(t, device=x.device)
    positions = position_ids.expand(b, t)[select]  # (N,)
    return x[select][None], Packed(cu_seqlens, int(lengths.max())), positions


def _unpack(x: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
    """The packed states (1, N, D) back in their padded places (B, T, D) (`select` (B, T): the real tokens). Padding
    positions hold zeros; consumers must not rely on it (padded positions are undefined: `attention` module)."""
    return x.new_zeros(*select.shape, x.shape[-1]).index_put((select,), x[0])  # (B, T, D)


def _cat_positions(past: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Join cached and new position ids, (Tp,)|(B, Tp) + (T,)|(B, T) -> (Tp+T,)|(B, Tp+T)."""
    if past.dim() != new.dim():
        b = max(past.shape[0] if past.dim() == 2 else 1, new.shape[0] if new.dim() == 2 else 1)
        past, new = (p if p.dim() == 2 else p.expand(b, -1) for p in (past, new))
    return torch.cat([past, new], dim=-1)


class Encoder(_Stack):
    """Bidirectional stack (BERT): every token attends to every real token."""

    def __init__(self, cfg: ModelConfig, embeddings: Embeddings | None = None):
        super().__init__(cfg, cfg.n_layers, cross=False, embeddings=embeddings)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False) -> StackOutput:
        """input_ids (B, T); attention_mask (B, T), 1 at real tokens and 0 at padding."""
        return self._run(input_ids, attention_mask, token_type_ids, position_ids, None, None,
                         output_hidden_states, output_attentions)


class Decoder(_Stack):
    """Causal stack (GPT); with `cross=True` every block also attends to the encoder's final states."""

    causal = True

    def __init__(self, cfg: ModelConfig, n_layers: int | None = None, cross: bool = False,
                 embeddings: Embeddings | None = None):
        super().__init__(cfg, n_layers or cfg.n_layers, cross=cross, embeddings=embeddings)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                memory: torch.Tensor | None = None, memory_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False,
                cache: KVCache | None = None) -> StackOutput:
        """input_ids (B, T); memory (B, S, D) and memory_mask (B, S) for cross-attention. With a `cache` the tokens
        continue the cached ones: attention_mask then covers cached and new tokens (B, Tk), position_ids only the
        new ones (default: the next positions), and the cache grows by T."""
        return self._run(input_ids, attention_mask, token_type_ids, position_ids, memory, memory_mask,
                         output_hidden_states, output_attentions, cache)


class EncoderDecoder(nn.Module):
    """The original Transformer: an Encoder over the source, a cross-attending Decoder over the target.

    With `share_embeddings` the two sides share one token embedding matrix (a joint vocabulary).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg, n_layers=cfg.n_decoder_layers, cross=True)
        if cfg.share_embeddings:
            self.decoder.embeddings.token.weight = self.encoder.embeddings.token.weight

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs) -> StackOutput:
        """Source (B, S) -> encoder states (B, S, D)."""
        return self.encoder(input_ids, attention_mask, **kwargs)

    def forward(self, input_ids: torch.Tensor | None, decoder_input_ids: torch.Tensor,
                attention_mask: torch.Tensor | None = None, decoder_attention_mask: torch.Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False,
                memory: torch.Tensor | None = None, cache: KVCache | None = None,
                decoder_position_ids: torch.Tensor | None = None) -> StackOutput:
        """Source (B, S) and target prefix (B, T) -> decoder states (B, T, D). Decoding step by step passes the
        encoder states once computed (`memory`, with `attention_mask` the source mask) and a `cache`."""
        if memory is None:
            memory = self.encode(input_ids, attention_mask).last_hidden_state  # (B, S, D)
        return self.decoder(decoder_input_ids, decoder_attention_mask, memory=memory, memory_mask=attention_mask,
                            position_ids=decoder_position_ids, output_hidden_states=output_hidden_states,
                            output_attentions=output_attentions, cache=cache)


def set_unpad(module: nn.Module, mode: Unpad) -> None:
    """Set how every stack inside `module` treats padded batches: "auto" | "always" | "never" (see `_Stack`)."""
    if mode not in ("auto", "always", "never"):
        raise ValueError(f"unpad must be auto, always or never, got {mode!r}")
    for m in module.modules():
        if isinstance(m, _Stack):
            m.unpad = mode


def build_backbone(cfg: ModelConfig) -> nn.Module:
    """The stack named by `cfg.architecture`."""
    if cfg.architecture == "encoder":
        return Encoder(cfg)
    if cfg.architecture == "decoder":
        return Decoder(cfg)
    return EncoderDecoder(cfg)
