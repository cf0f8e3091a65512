"""Typed, frozen configs: one dataclass per concern, validated on construction (`recipes.py` reads them from TOML
recipes and applies `--set key=value` overrides).

One vocabulary in code, TOML and CLI: the field names below are the recipe keys and the `--set` keys. Every
error a user can make (unknown key, wrong type, unknown choice, invalid combination) raises `ConfigError` whose
message names the key and, for choices, the allowed values.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from bertkit.errors import ConfigError, suggest

Architecture = Literal["encoder", "decoder", "encoder-decoder"]
Norm = Literal["layernorm", "rmsnorm"]
NormPosition = Literal["post", "pre"]
Activation = Literal["relu", "gelu", "swiglu"]
Positions = Literal["learned", "sinusoidal", "relative", "rotary", "none"]
Objective = Literal["mlm", "clm", "rtd"]  # masked LM (encoder) | causal LM (decoder) | ELECTRA (encoder)
Schedule = Literal["linear", "cosine", "constant", "wsd"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]
Compile = Literal["auto", "on", "off"]
Auto = Literal["auto"]
Sharding = Literal["none", "fsdp"]
OnBadSteps = Literal["reload", "stop"]
Pooling = Literal["cls", "mean", "max"]
TaskKind = Literal["classify", "regress", "ner", "sentence", "seq2seq"]
Init = Literal["pretrained", "random"]
SentenceLoss = Literal["cosine", "mnrl", "softmax"]
ContrastiveViews = Literal["maskings", "halves"]  # two maskings of a block | its two halves (tasks/contrast.py)
HEADS = ("mlm", "lm", "pooler", "classifier", "tagger", "pair_classifier", "rtd", "generator")
SEEDS = 2**32  # seeds are in [0, SEEDS): numpy's generators refuse anything else (issue 38)
# train.max_steps of a run whose time budget is its only limit (recipes._with_limits; ablate sets more): no cap
# (TrainConfig's default of 1,000 steps ended a `pretrain --recipe mini --max-time 30m` after ~17 of its minutes)
BUDGET_STEPS = 1_000_000


# model keys that follow another when not given (None): key -> (the key it follows, its value from the config)
DERIVED_MODEL_KEYS = {"n_kv_heads": ("n_heads", lambda c: c.n_heads), "d_ff": ("d_model", lambda c: 4 * c.d_model),
                      "n_decoder_layers": ("n_layers", lambda c: c.n_layers)}


@dataclass(frozen=True)
class ModelConfig:
    """The transformer: which stack, its sizes, and every switch the classic lectures teach — the architecture only
    (what sits on top of it is `HeadsConfig`).

    `None` for `n_kv_heads`, `d_ff` and `n_decoder_layers` means "derive" (n_heads, 4 * d_model, n_layers); the
    derived value is filled in at construction so saved configs always show real numbers. A derived one follows its
    source when `--set` or `recipes.with_values` changes it (`derived` names them); one a recipe gives stays.
    """

    architecture: Architecture = "encoder"  # BERT-style encoder, GPT-style decoder, or the original Transformer
    vocab_size: int = 16000  # token embedding rows (the tokenizer's vocabulary must fit)
    d_model: int = 256  # the width of every hidden state
    n_layers: int = 4  # blocks in the stack (the encoder's, for an encoder-decoder)
    n_decoder_layers: int | None = None  # encoder-decoder only
    n_heads: int = 4  # attention heads (d_model must divide by it)
    n_kv_heads: int | None = None  # == n_heads: MHA; 1: MQA; in between: GQA
    d_ff: int | None = None  # FFN inner width (none: 4 x d_model)
    max_len: int = 512  # the longest sequence positions are built for
    type_vocab_size: int = 2  # segment (token type) embeddings; 0 disables them
    dropout: float = 0.1  # embeddings and every sublayer output before the residual add
    attention_dropout: float = 0.1  # on the attention weights
    norm: Norm = "layernorm"  # LayerNorm (BERT) or RMSNorm
    norm_eps: float = 1e-12  # the norms' epsilon
    norm_position: NormPosition = "post"  # post: after the residual add (BERT); pre: before each sublayer (GPT-2 on)
    embedding_norm: bool = True  # BERT normalises the summed embeddings
    scale_embeddings: bool = False  # Vaswani et al.: token embeddings times sqrt(d_model) before adding positions
    activation: Activation = "gelu"  # the FFN's activation (swiglu: gated, a third projection)
    bias: bool = True  # biases in attention and FFN projections
    positions: Positions = "learned"  # learned table, sinusoids, Shaw relative, rotary, or none
    max_distance: int = 16  # relative positions: offsets are clipped to [-max_distance, max_distance]
    rotary_base: float = 10000.0  # rotary positions: the frequency base
    share_embeddings: bool = True  # encoder-decoder: one token embedding for source and target
    generator_d_model: int | None = None  # ELECTRA's generator width (train.objective rtd; None: d_model / 4)
    pad_token_id: int = 0  # the [PAD] id: the tokenizer's (pretraining checks it); exports carry it; pads are masked
    init_std: float = 0.02  # std of the normal initialisation of linear and embedding weights

    def __post_init__(self) -> None:
        _check_types(self, "model")
        # which keys were derived here (not a field: equality and the stored config ignore it), so that
        # `recipes.with_values` re-derives them when what they follow changes, as --set does
        object.__setattr__(self, "derived", frozenset(k for k in DERIVED_MODEL_KEYS if getattr(self, k) is None))
        for key, (_, rule) in DERIVED_MODEL_KEYS.items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, rule(self))
        for key in ("vocab_size", "d_model", "n_layers", "n_decoder_layers", "n_heads", "n_kv_heads", "d_ff",
                    "max_len", "max_distance"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key}: must be >= 1, got {getattr(self, key)}")
        for key in ("type_vocab_size", "pad_token_id"):
            if getattr(self, key) < 0:
                raise ConfigError(f"model.{key}: must be >= 0, got {getattr(self, key)}")
        for key in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ConfigError(f"model.{key}: must be in [0, 1), got {getattr(self, key)}")
        for key in ("norm_eps", "rotary_base", "init_std"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"model.{key}: must be > 0, got {getattr(self, key)}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model: {self.d_model} is not divisible by model.n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"model.n_kv_heads: model.n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads} "
                f"(allowed: a divisor of {self.n_heads})")
        if self.positions == "rotary" and self.d_head % 2:
            raise ConfigError(f"model.positions: rotary needs an even head size, got d_model/n_heads={self.d_head}")
        if self.pad_token_id >= self.vocab_size:
            raise ConfigError(f"model.pad_token_id: {self.pad_token_id} is outside vocab_size={self.vocab_size}")
        if self.generator_d_model is not None:
            _at_least(self, "model", generator_d_model=2)  # 0 was read as "not set": a quarter of d_model
            self.check_generator()

    @property
    def d_head(self) -> int:
        """Size of one attention head."""
        return self.d_model // self.n_heads

    @property
    def generator_width(self) -> int:
        """ELECTRA's generator width: `generator_d_model`, or a quarter of d_model (at least 2)."""
        return self.generator_d_model or max(2, self.d_model // 4)

    @property
    def generator_heads(self) -> int:
        """The generator's attention heads: it keeps the head size where its width allows (at least one head)."""
        return max(1, self.generator_width // self.d_head)

    def check_generator(self) -> None:
        """ELECTRA's generator fits this model (its width, head split and rotary head size); ConfigError if not."""
        width, heads = self.generator_width, self.generator_heads
        if not 1 <= width <= self.d_model:
            raise ConfigError(f"model.generator_d_model: the generator ({width}) must be between 1 and the "
                              f"discriminator's width (model.d_model={self.d_model})")
        if width % heads:
            raise ConfigError(f"model.generator_d_model: {width} does not split into {heads} heads of equal size "
                              f"(choose a multiple of the head size {self.d_head})")
        if self.positions == "rotary" and (width // heads) % 2:
            raise ConfigError(f"model.generator_d_model: rotary needs an even head size; the generator's {width} "
                              "gives an odd one")


@dataclass(frozen=True)
class HeadsConfig:
    """What sits on the backbone: the heads a run carries and their sizes. The job that trains a run writes it
    (pretraining: the objective's heads; finetuning: the task's); users set only `classifier_pooling`."""

    # "mlm" (tied MLM head), "lm" (tied next-token head of a decoder / encoder-decoder), "pooler" (BERT's [CLS]
    # pooler), "classifier", "tagger", "pair_classifier" (SBERT's softmax objective over (u, v, |u - v|)),
    # "rtd" and "generator" (ELECTRA)
    names: tuple[str, ...] = ()
    num_labels: int = 0  # outputs of the classifier / tagger / pair classifier head
    # how the classifier head summarises a sequence: the [CLS] state, or the mean / max over real tokens
    classifier_pooling: Pooling = "cls"

    def __post_init__(self) -> None:
        _check_types(self, "heads")
        for head in self.names:
            if head not in HEADS:
                raise ConfigError(f"heads.names: {head!r} is not allowed (allowed: {'|'.join(HEADS)})")
        if len(set(self.names)) != len(self.names):
            raise ConfigError(f"heads.names: {list(self.names)} names a head twice")
        if self.num_labels < 0:
            raise ConfigError(f"heads.num_labels: must be >= 0, got {self.num_labels}")
        if {"classifier", "tagger", "pair_classifier"} & set(self.names) and self.num_labels < 1:
            raise ConfigError("heads.num_labels: a classifier or tagger head needs at least one label")

    def check(self, model: ModelConfig) -> None:
        """The heads fit the architecture (ConfigError naming the key if not)."""
        if "lm" in self.names and model.architecture == "encoder":
            raise ConfigError("heads.names: the 'lm' (next-token) head needs a decoder or encoder-decoder; an encoder "
                              "predicts masked tokens with 'mlm'")
        if {"rtd", "generator"} & set(self.names) and model.architecture != "encoder":
            raise ConfigError("heads.names: replaced-token detection ('rtd', 'generator') needs an encoder")
        if "pooler" in self.names and model.architecture != "encoder":
            raise ConfigError("heads.names: only an encoder has a [CLS] pooler")
        if "generator" in self.names:
            model.check_generator()


@dataclass(frozen=True)
class TokenizerConfig:
    """How a BPE vocabulary is trained (its size is `model.vocab_size`)."""

    byte_level: bool = True  # byte-level BPE: every byte is in the alphabet, nothing is ever [UNK]
    lowercase: bool = False  # lowercase the text before BPE
    nfkc: bool = True  # Unicode NFKC normalisation
    min_frequency: int = 2  # a merge must occur at least this often
    max_documents: int | None = None  # train on this many documents, spread evenly (streamed: the first N; None: all)

    def __post_init__(self) -> None:
        _check_types(self, "tokenizer")
        _at_least(self, "tokenizer", min_frequency=1, max_documents=1)


@dataclass(frozen=True)
class DataConfig:
    """The pretraining corpus and how it becomes batches."""

    corpus: tuple[str, ...] = ()  # files or directories: .txt .gz .jsonl .csv .tsv .parquet
    text_field: str = "text"  # the JSONL field / CSV, TSV or Parquet column holding the text
    block_size: int = 128  # tokens per packed block, [CLS] included
    validation_fraction: float = 0.01  # share of documents held out for validation
    max_validation_blocks: int = 1000  # cap on held-out blocks evaluated
    mlm_probability: float = 0.15  # share of tokens masked (80% [MASK], 10% random, 10% kept)
    whole_word_mask: bool = False  # mask every piece of a word together (words from the pre-tokenizer)
    tokenize_workers: int = 1  # processes for tokenising and packing (each also uses tokenizers' threads)
    skip_bad_lines: bool = False  # skip lines that are not valid UTF-8 (counted) instead of stopping
    # read the corpus through datasets' streaming API and pack it on the fly (nothing cached on disk; a Hub dataset
    # as corpus = ["hf:NAME"] or "hf:NAME@SPLIT"): bertkit/text/stream.py
    streaming: bool = False
    shuffle_window: int = 64  # streaming: global batches read and shuffled together

    def __post_init__(self) -> None:
        _check_types(self, "data")
        _at_least(self, "data", block_size=8, max_validation_blocks=1, tokenize_workers=1, shuffle_window=1)
        if not 0.0 <= self.validation_fraction < 0.5:
            raise ConfigError(f"data.validation_fraction: must be in [0, 0.5), got {self.validation_fraction}")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ConfigError(f"data.mlm_probability: must be in (0, 1), got {self.mlm_probability}")
        if self.streaming and self.skip_bad_lines:
            raise ConfigError("data.skip_bad_lines: a streamed corpus cannot skip lines of invalid UTF-8 (its reader "
                              "is datasets'); fix the files, or pack the corpus (data.streaming = false)")


@dataclass(frozen=True)
class TrainConfig:
    """The training loop: optimiser, schedule, budget, evaluation, checkpoints, precision."""

    objective: Objective = "mlm"  # masked LM (encoder), causal LM (decoder) or ELECTRA's replaced-token detection
    # sequences per device per micro-step; auto (pretraining): on a GPU the largest power of two that its measured
    # memory holds, up to 65,536 tokens a step; 32 on a CPU (bertkit/train/batch_size.py)
    batch_size: int | Auto = 32
    accumulation_steps: int = 1  # micro-steps per optimiser step (global batch = batch_size x processes x this)
    learning_rate: float | None = None  # peak rate; none (auto): 5e-4 for pretraining, from the model's width for
    #                                     finetuning (bertkit/train/defaults.py)
    # AdamW's, on every matrix (embedding, position and token-type tables included, as Google's BERT); never on
    # norms or biases (the 1-d parameters)
    weight_decay: float = 0.01
    adam_beta1: float = 0.9  # AdamW's first-moment decay
    adam_beta2: float = 0.98  # AdamW's second-moment decay
    adam_eps: float = 1e-6  # AdamW's epsilon
    schedule: Schedule = "linear"  # decay after warmup; wsd: warmup, stable at the peak, then a linear decay
    warmup_ratio: float = 0.06  # share of the steps spent warming up linearly: step s of w at (s+1)/(w+1) of the peak
    decay_ratio: float = 0.2  # wsd: share of the steps, at the end, spent decaying linearly to 0
    max_grad_norm: float = 1.0  # gradient clipping (0 disables)
    max_steps: int = 1000  # optimiser steps (epochs or max_time may set it or end a run first)
    epochs: float | None = None  # finetuning: passes over the training set (sets max_steps; None: use max_steps)
    max_time: str | None = None  # wall-clock budget ("30m", "2h", "90s"); the schedule is fitted to it
    eval_every: int = 200  # optimiser steps between validations (finetuning: once an epoch if it spans the run)
    log_every: int = 10  # optimiser steps between log lines (metrics.jsonl, TensorBoard)
    save_every: int = 500  # optimiser steps between checkpoints
    keep_checkpoints: int = 2  # checkpoints kept (the best one is kept besides)
    metric: str | None = None  # validation metric that picks the best checkpoint (None: the task's own, e.g. f1)
    patience: int = 0  # early stopping: evaluations without a better `metric` before stopping (0: never stop early)
    # layer-wise lr decay: block l (1..L) trains at lr * layer_decay^(L+1-l), the embeddings at l = 0, the heads at
    # the full rate (an encoder-decoder's decoder blocks are numbered on from its encoder's)
    layer_decay: float = 1.0
    # auto: bf16 autocast where the device computes bf16 natively (recent GPUs; CPUs with AVX512-BF16 / AMX whose
    # bf16 GEMM measures faster), else fp32 (bertkit/hardware.py: resolve_precision)
    precision: Precision = "auto"
    # torch.compile the model for training: on, off, or auto (on where it was measured to win back its compile
    # time within the run's planned steps: bertkit/train/defaults.py)
    compile: Compile = "auto"
    # with compile on, mlm pretraining on one CUDA GPU: torch.compile's reduce-overhead mode (CUDA graphs: a step
    # replays its recorded kernels without launching each), the masked-token count padded to a multiple of 128 so
    # that a few shapes are recorded. Pays where a step is bound by kernel launches (small models, small batches)
    cuda_graphs: bool = False
    # fp32 on a CUDA GPU of the Ampere generation or later: matrix products in TF32 on the tensor cores (10-bit
    # mantissa inputs, fp32 accumulation; ~7x the plain fp32 rate on an H100). false: full fp32 products
    tf32: bool = True
    # none: data-parallel (every process holds the whole model); fsdp: FSDP2 shards weights, gradients and AdamW
    # state over the processes (bertkit/train/sharding.py); an `accelerate launch` config with FSDP selects it too
    sharding: Sharding = "none"
    seed: int = 0  # seeds initialisation, masking, shuffling and dropout: same seed, same run
    rtd_weight: float = 50.0  # objective rtd: the discriminator's loss weight (ELECTRA's lambda) next to the MLM's
    # objective mlm: > 0 adds SimCSE's in-batch contrastive loss between two views of each block (contrastive_views),
    # this weight x its mean; each block then takes two rows of batch_size (bertkit/tasks/contrast.py)
    contrastive_weight: float = 0.0
    contrastive_scale: float = 20.0  # the contrastive loss's cosine scale (1 / SimCSE's temperature 0.05)
    # the two views of a block: "maskings" (the whole block twice, two maskings) or "halves" (its first and second
    # half as two rows of block_size / 2 tokens: no token shared, every row new text)
    contrastive_views: ContrastiveViews = "maskings"
    max_bad_steps: int = 3  # consecutive non-finite steps tolerated (each skipped) before on_bad_steps
    on_bad_steps: OnBadSteps = "reload"  # reload the last good checkpoint, or stop

    def __post_init__(self) -> None:
        if isinstance(self.max_time, (int, float)) and not isinstance(self.max_time, bool):
            # a recipe's `max_time = 45` is 45 seconds, as `--max-time 45` and `--set max_time=45` are
            object.__setattr__(self, "max_time", repr(self.max_time))
        _check_types(self, "train")
        _at_least(self, "train", batch_size=1, accumulation_steps=1, max_steps=1, eval_every=1, log_every=1,
                  save_every=1, keep_checkpoints=1, max_bad_steps=1, patience=0)
        if not 0 <= self.seed < SEEDS:
            raise ConfigError(f"train.seed: must be in [0, 2**32 - 1], got {self.seed}")
        if self.epochs is not None and self.epochs <= 0:
            raise ConfigError(f"train.epochs: must be > 0, got {self.epochs}")
        if not 0.0 < self.layer_decay <= 1.0:
            raise ConfigError(f"train.layer_decay: must be in (0, 1], got {self.layer_decay}")
        for key in ("learning_rate", "adam_eps"):
            if getattr(self, key) is not None and getattr(self, key) <= 0:
                raise ConfigError(f"train.{key}: must be > 0, got {getattr(self, key)}")
        for key in ("weight_decay", "max_grad_norm", "rtd_weight", "contrastive_weight"):
            if getattr(self, key) < 0:
                raise ConfigError(f"train.{key}: must be >= 0, got {getattr(self, key)}")
        for key in ("adam_beta1", "adam_beta2", "warmup_ratio"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ConfigError(f"train.{key}: must be in [0, 1), got {getattr(self, key)}")
        if self.contrastive_scale <= 0:
            raise ConfigError(f"train.contrastive_scale: must be > 0, got {self.contrastive_scale}")
        if self.contrastive_weight > 0 and self.objective != "mlm":
            raise ConfigError(f"train.contrastive_weight: the contrastive term trains with objective mlm only, not "
                              f"{self.objective!r} (set it to 0)")
        if self.contrastive_weight > 0 and self.batch_size != "auto" and self.batch_size % 2:
            raise ConfigError(f"train.batch_size: must be even with train.contrastive_weight > 0 (each block takes "
                              f"two rows, one per view), got {self.batch_size}")
        if not 0.0 < self.decay_ratio <= 1.0:
            raise ConfigError(f"train.decay_ratio: must be in (0, 1], got {self.decay_ratio}")
        if self.schedule == "wsd" and self.warmup_ratio + self.decay_ratio > 1.0:
            raise ConfigError(f"train.decay_ratio: warmup_ratio + decay_ratio must be <= 1 for the wsd schedule, got "
                              f"{self.warmup_ratio} + {self.decay_ratio}")
        # parsed once, here (the field keeps the text the user wrote: configs serialise it as given)
        seconds = None if self.max_time is None else parse_duration(self.max_time, "train.max_time")
        object.__setattr__(self, "_max_seconds", seconds)

    @property
    def max_seconds(self) -> float | None:
        """`max_time` in seconds (None: no budget)."""
        return self._max_seconds

    @property
    def halves(self) -> bool:
        """Whether a pretraining row is half a packed block: the contrastive term on, its views the block's halves."""
        return self.contrastive_weight > 0 and self.contrastive_views == "halves"


def means_none(text: str) -> bool:
    """A command-line word that clears an optional value: `none` or `null`, any case (--set, --max-time)."""
    return text.strip().lower() in ("none", "null")


def parse_duration(text: str, key: str) -> float:
    """'90s', '30m', '1.5h', '45' (seconds) -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    raw = str(text).strip().lower()
    try:
        value = float(raw[:-1]) * units[raw[-1]] if raw and raw[-1] in units else float(raw)
    except ValueError:
        raise ConfigError(f"{key}: {text!r} is not a duration (e.g. 90s, 30m, 2h)") from None
    if not math.isfinite(value) or value <= 0:  # nan passed `<= 0` and ended a run after a few steps
        raise ConfigError(f"{key}: must be a positive, finite duration, got {text!r}")
    return value


def _at_least(obj: Any, prefix: str, **minimums: int) -> None:
    for key, low in minimums.items():
        value = getattr(obj, key)
        if value is not None and not isinstance(value, str) and value < low:  # a str is a checked keyword ("auto")
            raise ConfigError(f"{prefix}.{key}: must be >= {low}, got {value}")


@dataclass(frozen=True)
class TaskConfig:
    """A finetuning task: which kind, which files and columns, how examples become model inputs — what every kind
    reads. A kind's own settings have their own section (`[sentence_loss]`, `[seq2seq]`); the classifier's pooling
    is `heads.classifier_pooling`."""

    kind: TaskKind = "classify"  # classify: a label per text (or text pair); regress: a score per text (or pair);
    #                              ner: a tag per word; sentence: SBERT;
    #                              seq2seq: a target text per source text (translation)
    train_file: str | None = None  # CSV / TSV / JSONL (classify) or CoNLL columns (ner); data-root relative is fine
    validation_file: str | None = None  # None: hold out `validation_split` of the training file
    validation_split: float = 0.05  # share of the training examples held out for validation (no validation_file)
    # sentence: text_column / text_pair_column are the two sentences (anchor / positive for mnrl), label_column
    # the gold score (cosine) or the pair's label (softmax)
    text_column: str = "text"
    text_pair_column: str | None = None  # sentence pairs: the second text's column
    label_column: str = "label"  # the column or field holding the label
    tag_column: int = -1  # CoNLL: which whitespace column holds the tag (-1: the last)
    max_length: int | None = None  # tokens per example, specials included; longer ones are truncated (None: max_len)
    max_train_examples: int | None = None  # the first N examples of the file (a slice, e.g. for the demo; a
    #                                        held-out validation share comes out of them)
    finetune_dropout: float | None = 0.1  # dropout while finetuning, backbone and head (None: keep the model's own)
    init: Init = "pretrained"  # random: the same architecture and tokenizer from random weights (an ablation)

    def __post_init__(self) -> None:
        _check_types(self, "task")
        _at_least(self, "task", max_length=4, max_train_examples=1)
        if not 0.0 < self.validation_split < 0.5:
            raise ConfigError(f"task.validation_split: must be in (0, 0.5), got {self.validation_split}")
        if self.finetune_dropout is not None and not 0.0 <= self.finetune_dropout < 1.0:
            raise ConfigError(f"task.finetune_dropout: must be in [0, 1), got {self.finetune_dropout}")

    def window(self, max_len: int) -> int:
        """Tokens per example for a model of `max_len` positions: max_length, capped by the model."""
        return min(self.max_length or max_len, max_len)


@dataclass(frozen=True)
class SentenceLossConfig:
    """How `finetune sentence` trains embeddings (SBERT's losses)."""

    loss: SentenceLoss = "cosine"  # cosine: regression of cos(u, v) on score / max_score; mnrl: multiple negatives
    #                                ranking with in-batch negatives; softmax: a classifier over (u, v, |u - v|)
    negative_column: str | None = None  # mnrl: a hard negative per row (optional)
    max_score: float = 5.0  # cosine: gold scores are divided by this (STS-B's 0..5 -> 0..1)
    scale: float = 20.0  # mnrl: cosine similarities are multiplied by this before the softmax
    # mnrl with several processes: every process's positives and negatives are candidates for every anchor (an
    # all_gather whose gradients return to the process that embedded them), so N processes of B rows train as one of
    # N x B (each micro-step's: accumulation adds rows, not candidates); false: each process's micro-batch only
    cross_process_negatives: bool = True

    def __post_init__(self) -> None:
        _check_types(self, "sentence_loss")
        for key in ("max_score", "scale"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"sentence_loss.{key}: must be > 0, got {getattr(self, key)}")


@dataclass(frozen=True)
class Seq2SeqConfig:
    """`finetune seq2seq`'s parallel text (one sentence per line, source and target files aligned by line) and its
    loss and validation."""

    train_source: str | None = None  # the source-side training file (one sentence a line)
    train_target: str | None = None  # the target-side training file, aligned by line
    validation_source: str | None = None  # None: hold out `task.validation_split` of the training pairs
    validation_target: str | None = None  # the target-side validation file, aligned by line
    label_smoothing: float = 0.1  # the target distribution puts this mass uniformly on the vocabulary
    joint_vocab: bool = True  # from a recipe: one BPE trained on both sides (false: one per side)
    bleu_examples: int = 300  # validation BLEU (greedy) on this many held-out pairs (0: loss only)

    def __post_init__(self) -> None:
        _check_types(self, "seq2seq")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(f"seq2seq.label_smoothing: must be in [0, 1), got {self.label_smoothing}")
        _at_least(self, "seq2seq", bleu_examples=0)


@dataclass(frozen=True)
class SentenceConfig:
    """How an encoder's token states become one sentence embedding (`embed`, `similarity`, `index`, SBERT).

    Every encoder run has these settings (the defaults where its config.json predates them); an import from
    sentence-transformers takes them from the model's own modules.json.
    """

    pooling: Pooling = "mean"  # mean over real tokens (SBERT's default), the [CLS] state, or max over tokens
    normalize: bool = True  # L2-normalise embeddings (cosine similarity becomes a dot product)
    # tokens per sentence, specials included; longer ones are cut (None: max_len). sentence-transformers' name.
    max_seq_length: int | None = None

    def __post_init__(self) -> None:
        _check_types(self, "sentence")
        _at_least(self, "sentence", max_seq_length=2)

    def window(self, max_len: int) -> int:
        """Tokens per sentence for a model of `max_len` positions: max_seq_length, capped by the model."""
        return min(self.max_seq_length or max_len, max_len)


@dataclass(frozen=True)
class Config:
    """A whole recipe: one section per concern. Jobs add their sections here."""

    model: ModelConfig = field(default_factory=ModelConfig)
    heads: HeadsConfig = field(default_factory=HeadsConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    sentence_loss: SentenceLossConfig = field(default_factory=SentenceLossConfig)
    seq2seq: Seq2SeqConfig = field(default_factory=Seq2SeqConfig)
    sentence: SentenceConfig = field(default_factory=SentenceConfig)

    def __post_init__(self) -> None:
        self.heads.check(self.model)  # the rules that read two sections
        if self.train.halves and self.data.block_size % 2:
            raise ConfigError(f"data.block_size: must be even with train.contrastive_views = \"halves\" (each block "
                              f"splits into two rows), got {self.data.block_size}")

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (TOML/JSON-serialisable)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config", stored: bool = False) -> Config:
        """Build from nested dicts; unknown sections and keys are errors that name them. A key an earlier bertkit
        used (`MOVED`) is moved to its place when the dict is a run's stored config.json (`stored`), and is an
        error naming its new name in a recipe or `--set`."""
        data = migrate(data) if stored else data
        for name, value in data.items():
            for key in value if isinstance(value, dict) else ():
                if f"{name}.{key}" in MOVED:
                    raise ConfigError(f"{source}: {name}.{key} is now {MOVED[f'{name}.{key}']}")
        sections = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for name, value in data.items():
            if name not in sections:
                raise ConfigError(f"{source}: unknown section [{name}]{suggest(name, sections)} "
                                  f"(allowed: {', '.join(sections)})")
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: [{name}] must be a table of key = value")
            kwargs[name] = _build_section(section_type(cls, name), value, name)
        return cls(**kwargs)


# Keys an earlier bertkit used, and where each lives now (issue 17: one name per concept, in one place). model.pooling
# (what a classifier head was built with) comes before task.pooling (what was asked for): where both are stored,
# the first wins.
MOVED = {
    "model.heads": "heads.names", "model.num_labels": "heads.num_labels", "model.pooling": "heads.classifier_pooling",
    "task.pooling": "heads.classifier_pooling", "task.dropout": "task.finetune_dropout",
    "task.validation_fraction": "task.validation_split", "sentence.max_length": "sentence.max_seq_length",
    **{f"task.{key}": f"sentence_loss.{key}" for key in ("loss", "negative_column", "max_score", "scale")},
    **{f"task.{key}": f"seq2seq.{key}" for key in ("train_source", "train_target", "validation_source",
                                                   "validation_target", "label_smoothing", "joint_vocab",
                                                   "bleu_examples")},
}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """A stored config of an earlier bertkit, its keys moved to where they live now (`MOVED`); others unchanged."""
    data = {name: dict(value) if isinstance(value, dict) else value for name, value in data.items()}
    for old, new in MOVED.items():
        (section, key), (to_section, to_key) = old.split(".", 1), new.split(".", 1)
        if isinstance(data.get(section), dict) and key in data[section]:
            value = data[section].pop(key)
            data.setdefault(to_section, {}).setdefault(to_key, value)
    return data


def section_type(cls: type, name: str) -> type:
    """The dataclass of section `name` of `cls` (a Config)."""
    return typing.get_type_hints(cls)[name]


def _build_section(section_cls: type, values: dict[str, Any], prefix: str):
    known = {f.name for f in dataclasses.fields(section_cls)}
    for key in values:
        if key not in known:
            raise ConfigError(f"{prefix}.{key}: unknown key{suggest(key, known)}")
    return section_cls(**values)


def _check_types(obj: Any, prefix: str) -> None:
    """Check every field's value against its annotation; messages name the key and the allowed values."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}.{f.name}"
        expected = hints[f.name]
        optional = False
        if typing.get_origin(expected) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(expected) if a is not type(None)]
            optional = len(args) < len(typing.get_args(expected))
            keywords = [v for a in args if typing.get_origin(a) is Literal for v in typing.get_args(a)]
            if len(args) > 1 and value in keywords:  # int | Literal["auto"]: the keyword is allowed as it is
                continue
            if len(args) > 1 and isinstance(value, str) and keywords:
                raise ConfigError(f"{key}: {value!r} is not allowed (a number or {'|'.join(keywords)})")
            expected = args[0]
        if value is None:
            if optional:
                continue
            raise ConfigError(f"{key}: a value is required")
        if typing.get_origin(expected) is Literal:
            allowed = typing.get_args(expected)
            if value not in allowed:
                raise ConfigError(f"{key}: {value!r} is not allowed (allowed: {'|'.join(allowed)})")
        elif expected is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{key}: expected true or false, got {value!r}")
        elif expected is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{key}: expected an integer, got {value!r}")
        elif expected is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{key}: expected a finite number, got {value!r}")
            object.__setattr__(obj, f.name, float(value))
        elif expected is str:
            if not isinstance(value, str):
                raise ConfigError(f"{key}: expected a string, got {value!r}")
        elif typing.get_origin(expected) is tuple:  # tuple[str, ...]: TOML lists arrive as lists
            if isinstance(value, str):
                value = (value,)
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{key}: expected a list of strings, got {value!r}")
            object.__setattr__(obj, f.name, tuple(value))
