"""`Model`: a backbone (Encoder | Decoder | EncoderDecoder) plus named heads — the unit a run directory stores.

`Model(ModelConfig, HeadsConfig)` builds the subclass for the stack the config names (`EncoderModel`,
`DecoderModel`, `EncoderDecoderModel`), whose `forward` takes exactly that stack's inputs (typed, by name or
position) and runs the heads on its output. state_dict keys are frozen as `backbone.<stack keys>` and
`heads.<name>.<head keys>`, so any job can take the backbone of any run and put its own head on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from bertkit.config import HeadsConfig, ModelConfig
from bertkit.nn.electra import Generator, ReplacedTokenHead, sample_tokens
from bertkit.nn.heads import (DensePooler, HeadInput, LMHead, MLMHead, PairClassifier, SequenceClassifier,
                               TiedProjection, TokenClassifier)
from bertkit.nn.heads import pool as pool_states
from bertkit.nn.attention import KVCache
from bertkit.nn.transformer import StackOutput, build_backbone



@dataclass(frozen=True)
class HeadSpec:
    """One entry of the head registry: the module, and what the rest of the package may do with it."""

    module: type  # built as module(ModelConfig, HeadsConfig); called as module(HeadInput) -> Tensor
    task: bool = False  # the head of a finetuned task model (`predict`, `evaluate`)
    logits: bool = False  # `Model.forward(head=name)` runs it and puts its output on `.logits`


# Every head a model can carry, by the name `heads.names` lists (config.HEADS holds the same names, for validation).
HEADS: dict[str, HeadSpec] = {
    "pooler": HeadSpec(DensePooler),  # BERT's [CLS] pooler (HF checkpoints round-trip)
    "mlm": HeadSpec(MLMHead),  # forward(mlm_select=...)
    "lm": HeadSpec(LMHead, logits=True),
    "classifier": HeadSpec(SequenceClassifier, task=True, logits=True),
    "tagger": HeadSpec(TokenClassifier, task=True, logits=True),
    "pair_classifier": HeadSpec(PairClassifier, logits=True),
    "rtd": HeadSpec(ReplacedTokenHead),  # forward(rtd_labels=...)
    "generator": HeadSpec(Generator),
}
TASK_HEADS = tuple(name for name, spec in HEADS.items() if spec.task)


class Model(nn.Module):
    """Backbone + heads, built from a ModelConfig (the architecture) and a HeadsConfig (what sits on it: none by
    default) and initialised BERT-style (normal(0, init_std), zero biases). `Model(cfg, heads)` is an instance of
    the subclass for `cfg.architecture`, whose forward is typed for that stack."""

    def __new__(cls, cfg: ModelConfig | None = None, heads: HeadsConfig | None = None):
        # one constructor for callers, one typed forward per stack (copy/pickle call __new__ with no arguments)
        if cls is Model and cfg is not None:
            cls = STACK_MODELS[cfg.architecture]
        return super().__new__(cls)

    def __init__(self, cfg: ModelConfig, heads: HeadsConfig = HeadsConfig()):
        super().__init__()
        if type(self) is not STACK_MODELS[cfg.architecture]:  # EncoderModel(decoder config) would mis-wire forward
            raise ValueError(f"{type(self).__name__} cannot hold a {cfg.architecture} (build it as Model(cfg))")
        heads.check(cfg)
        self.config, self.head_config = cfg, heads
        self.backbone = build_backbone(cfg)
        self.heads = nn.ModuleDict()
        for name in heads.names:
            self.heads[name] = HEADS[name].module(cfg, heads)
        for module in self.heads.modules():  # tied heads project onto the output side's token embedding
            if isinstance(module, TiedProjection):
                module.tie(self.token_embedding)
        self.apply(self._init_weights)
        if cfg.scale_embeddings:
            # Vaswani et al. scale token embeddings by sqrt(d_model) because they are initialised with std
            # d_model^-0.5 (as fairseq does): scaled, they have unit size, like the sinusoidal positions they are
            # added to. With BERT's std 0.02 the positions would drown the tokens (0.02 * sqrt(256) = 0.32).
            for stack in (self.backbone.encoder, self.backbone.decoder) if cfg.architecture == "encoder-decoder" \
                    else (self.backbone,):
                nn.init.normal_(stack.embeddings.token.weight, mean=0.0, std=cfg.d_model ** -0.5)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.init_std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
            nn.init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def _on_top(self, out: StackOutput, mask: torch.Tensor | None, mlm_select: torch.Tensor | None,
                head: str | None, pool: str | None) -> StackOutput:
        """The heads on a stack's output (`mask`: its padding mask, 1 at real tokens). With `mlm_select` (B, T) bool
        (or the (N,) flat positions it selects) the MLM head runs on the selected positions and `.logits` holds
        their (N, V) scores. With `pool` (cls | mean | max) `.pooled` holds one (B, D) vector per sequence (not
        normalised). With `head` (a registered head
        with `logits=True`) `.logits` is that head's output: classifier (B, C), tagger (B, T, C), lm (B, T, V),
        pair_classifier (B/2, C) from the pooled [u; v]. Heads run inside forward so that they stay under
        DistributedDataParallel's gradient hooks."""
        if mlm_select is not None:
            hidden = out.last_hidden_state  # (B, T, D)
            if mlm_select.dtype == torch.bool:
                out.logits = self.mlm_logits(hidden[mlm_select])
            else:  # flat positions into the (B * T) tokens (MLMObjective.prepare)
                out.logits = self.mlm_logits(hidden.reshape(-1, hidden.shape[-1]).index_select(0, mlm_select))
        if pool is not None:
            out.pooled = pool_states(out.last_hidden_state, mask, pool)  # (B, D)
        if head is not None:
            if head not in self.heads or not HEADS[head].logits:
                raise ValueError(f"this model has no {head!r} head with logits (heads: "
                                 f"{', '.join(self.heads) or 'none'})")
            out.logits = self.heads[head](HeadInput(out.last_hidden_state, mask, out.pooled))
        return out

    def replaced_token_detection(self, input_ids: torch.Tensor, labels: torch.Tensor, seed: int,
                                 attention_mask: torch.Tensor | None = None) -> StackOutput:
        """ELECTRA's pretraining pass, in one forward (so it stays under DDP's hooks): the generator predicts the
        masked positions of `input_ids` (those where `labels` (B, T) holds the original token, >= 0); its seeded
        samples replace them; the discriminator reads the result. Returns `.logits` (N, V) the generator's
        scores, `.rtd_logits` (B, T) the discriminator's, `.replaced` (B, T) bool what was really replaced
        (a sample equal to the original counts as original) and `.sampled` (N,) the samples."""
        if "rtd" not in self.heads or "generator" not in self.heads:
            raise ValueError("this model has no replaced-token-detection heads")
        select = labels >= 0  # (B, T)
        gen_logits = self.generator_logits(input_ids, select, attention_mask)  # (N, V)
        sampled = sample_tokens(gen_logits, seed)  # (N,)
        original = torch.where(select, labels, input_ids)  # (B, T)
        corrupted = original.clone()
        corrupted[select] = sampled
        out = self.backbone(corrupted, attention_mask=attention_mask)
        out.logits, out.sampled = gen_logits, sampled
        out.rtd_logits = self.heads["rtd"](HeadInput(out.last_hidden_state))  # (B, T)
        out.replaced = corrupted != original
        return out

    def generator_logits(self, input_ids: torch.Tensor, select: torch.Tensor,
                         attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The ELECTRA generator's vocabulary scores for the selected positions (fill-mask on an rtd run):
        (B, T) ids, (B, T) bool -> (N, V)."""
        if "generator" not in self.heads:
            raise ValueError("this model has no generator")
        embedded = self.backbone.embeddings(input_ids)
        return self.heads["generator"](HeadInput(embedded, attention_mask, select=select))

    def layer_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Every layer's token states of the stack that reads the input: (B, T) -> (B, T, L + 1, D), [:, :, 0] the
        embeddings output and [:, :, -1] the last layer (after the final norm of a pre-norm stack). An
        encoder-decoder reads with its encoder; a decoder's states are causal (each token sees only its past)."""
        stack = self.backbone.encoder if self.config.architecture == "encoder-decoder" else self.backbone
        out = stack(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                    output_hidden_states=True)
        return torch.stack(out.hidden_states, dim=2)  # (B, T, L + 1, D)

    @property
    def layer_count(self) -> int:
        """Entries of `layer_states`: the embeddings output plus one per block of the reading stack."""
        return self.config.n_layers + 1

    @property
    def token_embedding(self) -> nn.Embedding:
        """The (output-side) token embedding that tied heads project onto."""
        stack = self.backbone.decoder if hasattr(self.backbone, "decoder") else self.backbone
        return stack.embeddings.token

    def mlm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits for selected positions: (N, D) -> (N, V) through the tied MLM head."""
        if "mlm" not in self.heads:
            raise ValueError("this model has no MLM head")
        return self.heads["mlm"](HeadInput(hidden))

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits: (…, D) -> (…, V) through the tied LM head."""
        if "lm" not in self.heads:
            raise ValueError("this model has no LM head")
        return self.heads["lm"](HeadInput(hidden))

    def parameter_counts(self) -> dict[str, int]:
        """Parameters by part: embeddings / blocks (incl. final norm) / heads / total; tied weights counted once."""
        counts = {"embeddings": 0, "blocks": 0, "heads": 0}
        seen: set[int] = set()
        for name, param in self.named_parameters():  # named_parameters already skips tied duplicates
            if id(param) in seen:
                continue
            seen.add(id(param))
            part = "heads" if name.startswith("heads.") else "embeddings" if ".embeddings." in name else "blocks"
            counts[part] += param.numel()
        counts["total"] = sum(counts.values())
        return counts

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device


class _LightMeta(TorchFunctionMode):
    """Inside `torch.device("meta")`: random-normal initialisation as a no-op (a meta tensor has no values to set). A
    meta normal_ runs through torch._refs, whose first call imports torch._dynamo: 2-3 s of a process's start on an
    AVX2 host (`info`; a training process's memory check, refusing before its optimizer imports it), for nothing.
    (The sinusoidal table, whose exp / sin would too, is an empty meta tensor: `sinusoidal_table`.)"""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.init.normal_ or func is torch.Tensor.normal_:
            return args[0] if args else kwargs["tensor"]  # (init.normal_ passes it by name)
        return func(*args, **kwargs)


def meta_model(cfg: ModelConfig, heads: HeadsConfig) -> Model:
    """The model `cfg` / `heads` build, on the meta device: its parameter counts and shapes without allocating a
    weight (`bertkit info`, the memory check)."""
    with torch.device("meta"), _LightMeta():
        return Model(cfg, heads)


class EncoderModel(Model):
    """A Model over an Encoder (BERT): MLM, ELECTRA, classifier, tagger and sentence heads."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False, *,
                mlm_select: torch.Tensor | None = None, head: str | None = None, pool: str | None = None,
                rtd_labels: torch.Tensor | None = None, rtd_seed: int = 0) -> StackOutput:
        """input_ids (B, T); attention_mask (B, T), 1 at real tokens. The heads as `_on_top` says; with `rtd_labels`
        it is ELECTRA's pass (`replaced_token_detection`)."""
        if rtd_labels is not None:
            return self.replaced_token_detection(input_ids, rtd_labels, rtd_seed, attention_mask)
        out = self.backbone(input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states,
                            output_attentions)
        return self._on_top(out, attention_mask, mlm_select, head, pool)


class DecoderModel(Model):
    """A Model over a causal Decoder (GPT): the tied next-token head."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False, cache: KVCache | None = None, *,
                head: str | None = None, pool: str | None = None) -> StackOutput:
        """input_ids (B, T); attention_mask (B, T), 1 at real tokens (with a `cache`: cached and new tokens, as
        `Decoder.forward` says). `head="lm"`: next-token logits (B, T, V)."""
        out = self.backbone(input_ids, attention_mask, token_type_ids=token_type_ids, position_ids=position_ids,
                            output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                            cache=cache)
        return self._on_top(out, attention_mask, None, head, pool)


class EncoderDecoderModel(Model):
    """A Model over an EncoderDecoder (the original Transformer): the tied next-token head on the decoder."""

    def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor,
                attention_mask: torch.Tensor | None = None, decoder_attention_mask: torch.Tensor | None = None,
                output_hidden_states: bool = False, output_attentions: bool = False,
                memory: torch.Tensor | None = None, cache: KVCache | None = None,
                decoder_position_ids: torch.Tensor | None = None, *,
                head: str | None = None, pool: str | None = None) -> StackOutput:
        """Source (B, S) with its mask, target prefix (B, T) with its: the decoder's states, and the heads on them
        (`head="lm"`: (B, T, V)); `memory` and `cache` as `EncoderDecoder.forward` says."""
        out = self.backbone(input_ids, decoder_input_ids, attention_mask, decoder_attention_mask,
                            output_hidden_states=output_hidden_states, output_attentions=output_attentions,
                            memory=memory, cache=cache, decoder_position_ids=decoder_position_ids)
        return self._on_top(out, decoder_attention_mask, None, head, pool)


STACK_MODELS = {"encoder": EncoderModel, "decoder": DecoderModel, "encoder-decoder": EncoderDecoderModel}
