"""`Model`: a backbone (Encoder | Decoder | EncoderDecoder) plus named heads — the unit a run directory stores.

state_dict keys are frozen as `backbone.<stack keys>` and `heads.<name>.<head keys>`, so any job can take the
backbone of any run and put its own head on it.
"""

from __future__ import annotations

import torch
from torch import nn

from bertkit.config import ModelConfig
from bertkit.nn.electra import Generator, ReplacedTokenHead, sample_tokens
from bertkit.nn.heads import DensePooler, LMHead, MLMHead, PairClassifier, SequenceClassifier, TokenClassifier
from bertkit.nn.heads import pool as pool_states
from bertkit.nn.transformer import StackOutput, build_backbone

HEAD_TYPES = {"pooler": DensePooler, "mlm": MLMHead, "lm": LMHead, "classifier": SequenceClassifier,
              "tagger": TokenClassifier, "pair_classifier": PairClassifier, "rtd": ReplacedTokenHead,
              "generator": Generator}
TASK_HEADS = ("classifier", "tagger")  # heads of finetuned task models (predict / evaluate)
LOGIT_HEADS = TASK_HEADS + ("pair_classifier", "lm")  # heads whose output `forward(head=...)` returns as `.logits`


class Model(nn.Module):
    """Backbone + heads, built from a ModelConfig and initialised BERT-style (normal(0, init_std), zero biases)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.backbone = build_backbone(cfg)
        self.heads = nn.ModuleDict()
        for name in cfg.heads:
            self.heads[name] = HEAD_TYPES[name](cfg)
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

    def forward(self, *args, mlm_select: torch.Tensor | None = None, head: str | None = None,
                pool: str | None = None, rtd_labels: torch.Tensor | None = None, rtd_seed: int = 0, **kwargs):
        """Runs the backbone (see Encoder / Decoder / EncoderDecoder.forward). With `mlm_select` (B, T) bool, the
        MLM head also runs on the selected positions and `.logits` holds their (N, V) scores; with
        `head="classifier"` `.logits` is (B, C), with `head="tagger"` (B, T, C), with `head="lm"` (a decoder's
        next-token scores) (B, T, V). With `pool` (cls | mean | max)
        `.pooled` holds one (B, D) vector per sequence (not normalised); `head="pair_classifier"` reads those as
        [u; v] and gives (B/2, C). Heads run inside forward so that they stay under DistributedDataParallel's
        gradient hooks. With `rtd_labels` it is ELECTRA's pass (`replaced_token_detection`)."""
        if rtd_labels is not None:
            return self.replaced_token_detection(*args, labels=rtd_labels, seed=rtd_seed, **kwargs)
        out = self.backbone(*args, **kwargs)
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        if mlm_select is not None:
            out.logits = self.mlm_logits(out.last_hidden_state[mlm_select])
        if pool is not None:
            out.pooled = pool_states(out.last_hidden_state, mask, pool)  # (B, D)
        if head is not None:
            if head not in LOGIT_HEADS or head not in self.heads:
                raise ValueError(f"this model has no {head!r} head (heads: {', '.join(self.heads) or 'none'})")
            if head == "lm":
                out.logits = self.lm_logits(out.last_hidden_state)  # (B, T, V)
            elif head == "pair_classifier":
                if out.pooled is None:
                    raise ValueError("the pair classifier reads pooled embeddings: pass pool=")
                out.logits = self.heads[head](out.pooled)
            else:
                out.logits = self.heads[head](out.last_hidden_state, mask)
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
        embedded = self.backbone.embeddings(input_ids)  # (B, T, D): the shared embeddings of the masked input
        gen_logits = self.heads["generator"](embedded, select, self.token_embedding.weight, attention_mask)
        sampled = sample_tokens(gen_logits, seed)  # (N,)
        original = torch.where(select, labels, input_ids)  # (B, T)
        corrupted = original.clone()
        corrupted[select] = sampled
        out = self.backbone(corrupted, attention_mask=attention_mask)
        out.logits, out.sampled = gen_logits, sampled
        out.rtd_logits = self.heads["rtd"](out.last_hidden_state)  # (B, T)
        out.replaced = corrupted != original
        return out

    def generator_logits(self, input_ids: torch.Tensor, select: torch.Tensor,
                         attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The ELECTRA generator's vocabulary scores for the selected positions (fill-mask on an rtd run):
        (B, T) ids, (B, T) bool -> (N, V)."""
        if "generator" not in self.heads:
            raise ValueError("this model has no generator")
        embedded = self.backbone.embeddings(input_ids)
        return self.heads["generator"](embedded, select, self.token_embedding.weight, attention_mask)

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
        return self.heads["mlm"](hidden, self.token_embedding.weight)

    def lm_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits: (…, D) -> (…, V) through the tied LM head."""
        if "lm" not in self.heads:
            raise ValueError("this model has no LM head")
        return self.heads["lm"](hidden, self.token_embedding.weight)

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
