"""Hugging Face BERT checkpoints <-> bertkit encoders.

A BERT folder (config.json + model.safetensors or pytorch_model.bin) maps onto a post-norm, LayerNorm, GELU,
learned-position bertkit Encoder one tensor at a time; the mapping is a fixed table, used in both directions.
Neither direction imports transformers: the formats are plain files.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

import bertkit
from bertkit.config import Config, HeadsConfig, ModelConfig
from bertkit.errors import BertkitError
from bertkit.interop.hf_tasks import TASK_HEADS, imported_head, task_head
from bertkit.nn.model import Model
from bertkit.run.directory import TOKENIZER_FILE, load_run
from bertkit.run.files import atomic_dir, ordinary_mode
from bertkit.run.outputs import HF_EXPORT, claim
from bertkit.text.tokenizer import write_hf_tokenizer_config

# HF BertModel key (without the "bert." prefix) -> bertkit Model key.
_GLOBAL = {
    "embeddings.word_embeddings.weight": "backbone.embeddings.token.weight",
    "embeddings.position_embeddings.weight": "backbone.embeddings.position.weight",
    "embeddings.token_type_embeddings.weight": "backbone.embeddings.token_type.weight",
    "embeddings.LayerNorm.weight": "backbone.embeddings.norm.weight",
    "embeddings.LayerNorm.bias": "backbone.embeddings.norm.bias",
    "pooler.dense.weight": "heads.pooler.dense.weight",
    "pooler.dense.bias": "heads.pooler.dense.bias",
    "cls.predictions.transform.dense.weight": "heads.mlm.dense.weight",
    "cls.predictions.transform.dense.bias": "heads.mlm.dense.bias",
    "cls.predictions.transform.LayerNorm.weight": "heads.mlm.norm.weight",
    "cls.predictions.transform.LayerNorm.bias": "heads.mlm.norm.bias",
    "cls.predictions.bias": "heads.mlm.bias",
}
_LAYER = {  # inside encoder.layer.{i}. -> backbone.blocks.{i}.
    "attention.self.query": "self_attn.q",
    "attention.self.key": "self_attn.k",
    "attention.self.value": "self_attn.v",
    "attention.output.dense": "self_attn.o",
    "attention.output.LayerNorm": "self_attn_norm",
    "intermediate.dense": "ffn.w_in",
    "output.dense": "ffn.w_out",
    "output.LayerNorm": "ffn_norm",
}
_LAYER_KEY = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
_BK_LAYER_KEY = re.compile(r"^backbone\.blocks\.(\d+)\.(.+)\.(weight|bias)$")
# A buffer, and the MLM decoder's copies of tied tensors (the token embeddings and cls.predictions.bias).
_IGNORED = ("embeddings.position_ids", "cls.predictions.decoder.weight", "cls.predictions.decoder.bias")


def hf_to_bertkit_key(key: str) -> str | None:
    """Map one HF BERT key to bertkit's, or None for tensors bertkit does not hold (e.g. pretraining heads)."""
    key = key.removeprefix("bert.").replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta",
                                                                                             "LayerNorm.bias")
    if key in _GLOBAL:
        return _GLOBAL[key]
    match = _LAYER_KEY.match(key)
    if match and match.group(2) in _LAYER:
        return f"backbone.blocks.{match.group(1)}.{_LAYER[match.group(2)]}.{match.group(3)}"
    return None


def bertkit_to_hf_key(key: str, command: str = "export --format hf") -> str:
    """Inverse of `hf_to_bertkit_key` (BertModel layout, no prefix); `command` names the export in an error."""
    inverse_global = {v: k for k, v in _GLOBAL.items()}
    if key in inverse_global:
        return inverse_global[key]
    match = _BK_LAYER_KEY.match(key)
    inverse_layer = {v: k for k, v in _LAYER.items()}
    if match and match.group(2) in inverse_layer:
        return f"encoder.layer.{match.group(1)}.{inverse_layer[match.group(2)]}.{match.group(3)}"
    raise BertkitError(f"{command}: bertkit tensor '{key}' has no place in a BERT checkpoint")


def config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """A bertkit ModelConfig equivalent to an HF BertConfig dict; refuses what bertkit cannot reproduce."""
    if hf.get("model_type") not in ("bert", None):
        raise BertkitError(f"import-hf: model_type '{hf.get('model_type')}' is not BERT (only BERT is supported)")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise BertkitError(f"import-hf: position_embedding_type '{hf['position_embedding_type']}' is not supported "
                           "(allowed: absolute)")
    for flag in ("is_decoder", "add_cross_attention"):
        if hf.get(flag):
            raise BertkitError(f"import-hf: {flag}=true (a causal BERT) is not supported; bertkit imports "
                               "bidirectional BERT encoders")
    if hf.get("hidden_act", "gelu") != "gelu":
        raise BertkitError(f"import-hf: hidden_act '{hf['hidden_act']}' is not supported (allowed: gelu)")
    try:
        return ModelConfig(
            architecture="encoder", vocab_size=hf["vocab_size"], d_model=hf["hidden_size"],
            n_layers=hf["num_hidden_layers"], n_heads=hf["num_attention_heads"], d_ff=hf["intermediate_size"],
            max_len=hf.get("max_position_embeddings", 512), type_vocab_size=hf.get("type_vocab_size", 2),
            dropout=hf.get("hidden_dropout_prob", 0.1), attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
            norm="layernorm", norm_eps=hf.get("layer_norm_eps", 1e-12), norm_position="post", embedding_norm=True,
            activation="gelu", bias=True, positions="learned",
            pad_token_id=hf.get("pad_token_id") or 0, init_std=hf.get("initializer_range", 0.02))
    except KeyError as exc:
        raise BertkitError(f"import-hf: config.json lacks {exc.args[0]}") from None


def config_to_hf(cfg: ModelConfig, heads: HeadsConfig = HeadsConfig(), command: str = "export --format hf"
                 ) -> dict[str, Any]:
    """An HF BertConfig dict for a bertkit encoder (BertForMaskedLM where it carries an MLM head); refuses switches
    BERT cannot express, naming them (and `command`, the export asked for)."""
    required = {"architecture": "encoder", "norm": "layernorm", "norm_position": "post", "activation": "gelu",
                "positions": "learned", "bias": True, "embedding_norm": True, "scale_embeddings": False}
    for key, value in required.items():
        if getattr(cfg, key) != value:
            raise BertkitError(f"{command}: model.{key}={getattr(cfg, key)!r} cannot be expressed as BERT "
                               f"(BERT needs {key}={value!r})")
    if cfg.n_kv_heads != cfg.n_heads:
        raise BertkitError(f"{command}: model.n_kv_heads={cfg.n_kv_heads} (GQA/MQA) cannot be expressed as "
                           f"BERT (needs n_kv_heads == n_heads = {cfg.n_heads})")
    return {
        "architectures": ["BertForMaskedLM" if "mlm" in heads.names else "BertModel"], "model_type": "bert",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers, "num_attention_heads": cfg.n_heads,
        "intermediate_size": cfg.d_ff, "hidden_act": "gelu", "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout, "max_position_embeddings": cfg.max_len,
        "type_vocab_size": cfg.type_vocab_size or 2, "initializer_range": cfg.init_std,
        "layer_norm_eps": cfg.norm_eps, "pad_token_id": cfg.pad_token_id, "position_embedding_type": "absolute",
    }


def read_hf_config(src: str | Path) -> dict[str, Any]:
    """The config.json of an HF model folder."""
    src = Path(src)
    if not src.is_dir():
        raise BertkitError(f"{src}: not a directory")
    config_path = src / "config.json"
    if not config_path.is_file():
        raise BertkitError(f"{src}: no config.json (not a Hugging Face model folder)")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BertkitError(f"{config_path}: not valid JSON ({exc})") from None
    if isinstance(config, dict) and isinstance(config.get("model"), dict) and "vocab_size" not in config:
        # a bertkit run (its config.json holds sections): it was "config.json lacks vocab_size"
        raise BertkitError(f"{src}: a bertkit run directory already, not a Hugging Face folder: every bertkit "
                           "command takes it as it is")
    return config


def read_hf_weights(src: str | Path) -> dict[str, torch.Tensor]:
    """The state dict of an HF folder; safetensors preferred, pytorch_model.bin read weights-only (no pickle code)."""
    src = Path(src)
    if (src / "model.safetensors").is_file():
        try:
            return load_file(str(src / "model.safetensors"))
        except (SafetensorError, OSError) as exc:
            raise BertkitError(f"{src / 'model.safetensors'}: unreadable ({exc})") from None
    if (src / "pytorch_model.bin").is_file():
        try:
            return torch.load(src / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many types for a bad pickle
            raise BertkitError(f"{src / 'pytorch_model.bin'}: unreadable ({type(exc).__name__}: {exc})") from None
    raise BertkitError(f"{src}: no model.safetensors or pytorch_model.bin")


def _untied_decoder(weights: dict[str, torch.Tensor], hf_config: dict) -> bool:
    """Whether the checkpoint's MLM decoder is a matrix (or bias) of its own, not the word embeddings (and
    cls.predictions.bias) that bertkit's MLM head is tied to."""
    decoder, bias = weights.get("cls.predictions.decoder.weight"), weights.get("cls.predictions.decoder.bias")
    if decoder is None:
        return False  # saved once: tied
    if hf_config.get("tie_word_embeddings") is False:
        return True
    embeddings = weights.get("bert.embeddings.word_embeddings.weight", weights.get("embeddings.word_embeddings.weight"))
    shared_bias = weights.get("cls.predictions.bias")
    return (embeddings is None or not torch.equal(decoder, embeddings)
            or (bias is not None and shared_bias is not None and not torch.equal(bias, shared_bias)))


class HFModel(NamedTuple):
    """What an HF folder's weights became: the model, the HF keys skipped (an untied MLM decoder's note first), the
    imported task head's (kind, labels) (None: none), why a task head was left out (None: imported, or none there),
    and the folder's config.json."""

    model: Model
    skipped: list[str]
    task: tuple[str, list[str]] | None
    head_left_out: str | None
    hf_config: dict[str, Any]


def read_hf_model(src: str | Path) -> HFModel:
    """Build a bertkit Model holding an HF BERT folder's weights: an encoder, with its MLM head and pooler where
    it has them, or a finetuned BertForSequenceClassification / BertForTokenClassification with its task head
    (`hf_tasks.imported_head`); an untied MLM decoder's head is left out (bertkit's is tied to the embeddings)."""
    hf_config = read_hf_config(src)
    config_from_hf(hf_config)  # refuse a non-BERT folder before reading its weights
    weights = read_hf_weights(src)
    untied = _untied_decoder(weights, hf_config)
    state, skipped = {}, []
    if untied:
        skipped.append("cls.predictions (its decoder is not tied to the word embeddings, which bertkit's MLM head "
                       "is: the head is left out, the encoder imported)")
    head, task, left_out = imported_head(hf_config, weights)
    for key, tensor in weights.items():
        target = hf_to_bertkit_key(key)
        if key.startswith("classifier."):  # the task head's output layer (or a left-out head's, said apart)
            target = f"heads.{head}.out.{key.removeprefix('classifier.')}" if head else ""
        elif head and target and target.startswith("heads.pooler."):  # a classifier's dense + tanh is the pooler;
            # a token classifier never reads one
            target = target.replace("heads.pooler.", "heads.classifier.") if head == "classifier" else ""
        if not target:
            if target is None and not key.endswith(_IGNORED):
                skipped.append(key)
            continue
        if untied and target.startswith("heads.mlm."):
            continue
        state[target] = tensor.float()
    heads = tuple(h for h in ("mlm", "pooler") if f"heads.{h}.dense.weight" in state)
    num_labels = weights["classifier.weight"].shape[0] if head else 0
    model = Model(config_from_hf(hf_config), HeadsConfig(names=heads + ((head,) if head else ()),
                                                         num_labels=num_labels))
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as exc:  # shape mismatches
        raise BertkitError(f"import-hf: weights do not match config.json ({str(exc).splitlines()[-1].strip()})") \
            from None
    if missing or unexpected:
        raise BertkitError(f"import-hf: weights do not match config.json (missing: {missing[:3]}, "
                           f"unexpected: {unexpected[:3]})")
    return HFModel(model.eval(), skipped, task, left_out, hf_config)


def model_from_hf(src: str | Path) -> tuple[Model, list[str]]:
    """`read_hf_model`'s model and skipped keys."""
    imported = read_hf_model(src)
    return imported.model, imported.skipped


def copy_tokenizer(src: Path, dest: Path) -> bool:
    """Put a tokenizer.json in dest: copied, or built from vocab.txt (WordPiece) when the folder has only that."""
    if (src / TOKENIZER_FILE).is_file():
        shutil.copyfile(src / TOKENIZER_FILE, dest / TOKENIZER_FILE)
        return True
    if (src / "vocab.txt").is_file():
        from tokenizers.implementations import BertWordPieceTokenizer

        settings = {}
        if (src / "tokenizer_config.json").is_file():
            settings = json.loads((src / "tokenizer_config.json").read_text())
        # as transformers' BertTokenizer reads them: accents stripped where lowercasing unless strip_accents says
        # otherwise, Chinese characters split apart unless tokenize_chinese_chars is false (both were ignored, so
        # "café" was "cafe" where transformers gave [UNK]; a review, 2026-11-28)
        BertWordPieceTokenizer(str(src / "vocab.txt"), lowercase=settings.get("do_lower_case", True),
                               strip_accents=settings.get("strip_accents"),
                               handle_chinese_chars=settings.get("tokenize_chinese_chars", True)
                               ).save(str(dest / TOKENIZER_FILE))
        return True
    return False


def export_hf(run: str | Path, out: str | Path, overwrite: bool = False) -> dict[str, Any]:
    """Write an HF BERT folder (config.json, model.safetensors, tokenizer.json + tokenizer_config.json) that
    transformers loads unchanged: `BertModel` for an encoder (`AutoModelForMaskedLM` with an MLM head; a model
    without a pooler leaves BERT's pooler to transformers' random init), `BertForSequenceClassification` for a
    classifier or regressor, `BertForTokenClassification` for an NER tagger (their labels as id2label)."""
    config, model = load_run(run)
    claim(out, HF_EXPORT, overwrite, inputs=(run,), hint="choose another output or pass --overwrite")
    with atomic_dir(out, overwrite=overwrite) as tmp:
        tensors = write_hf_folder(tmp, Path(run), config, model, with_mlm=True)
    return {"out": str(out), "tensors": tensors}


def write_hf_folder(folder: Path, run: Path, config: Config, model: Model, with_mlm: bool,
                    command: str = "export --format hf") -> int:
    """The HF files of a run into `folder`: its encoder, an MLM head (BertForMaskedLM layout) only `with_mlm`, a
    classifier or tagger head in the layout of BERT's task class; `command` names the export in an error. Returns
    the number of tensors written."""
    hf_config = config_to_hf(config.model, config.heads, command)
    head, described = task_head(run, config, command)
    # ELECTRA's pretraining heads (generator, replaced-token detection) have no place in BERT: the encoder goes;
    # a task model's unread pooler neither (its classifier's dense layer is BERT's pooler)
    dropped = ("heads.rtd.", "heads.generator.") + (() if with_mlm else ("heads.mlm.",)) \
        + (("heads.pooler.",) if head else ())
    state, renamed = {}, TASK_HEADS[head][1] if head else {}
    for key, tensor in model.state_dict().items():
        prefix = next((p for p in renamed if key.startswith(p)), None)
        if prefix is not None:
            state[renamed[prefix] + key.removeprefix(prefix)] = tensor.contiguous()
        elif not key.startswith(dropped):
            state[bertkit_to_hf_key(key, command)] = tensor.contiguous()
    if head:  # BertFor*Classification: the encoder under "bert."
        state = {k if k.startswith(("bert.", "classifier.")) else f"bert.{k}": v for k, v in state.items()}
        hf_config.update(described)
    elif with_mlm and "mlm" in config.heads.names:  # BertForMaskedLM: the encoder under "bert.", the tied decoder
        state = {k if k.startswith("cls.") else f"bert.{k}": v for k, v in state.items()}
        state["cls.predictions.decoder.weight"] = state["bert.embeddings.word_embeddings.weight"].clone()
    else:
        hf_config["architectures"] = ["BertModel"]
    if config.model.type_vocab_size == 0:  # BERT always adds segment embeddings: zero rows are the same function
        key = "bert.embeddings.token_type_embeddings.weight" if "bert.embeddings.word_embeddings.weight" in state \
            else "embeddings.token_type_embeddings.weight"
        state[key] = torch.zeros(2, config.model.d_model)
    (folder / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n", encoding="utf-8")
    # "bertkit" in the metadata marks the folder as an export, so that `--overwrite` replaces only an export
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt", "bertkit": bertkit.__version__})
    ordinary_mode(folder / "model.safetensors")  # safetensors writes 0600
    if (run / TOKENIZER_FILE).is_file():
        shutil.copyfile(run / TOKENIZER_FILE, folder / TOKENIZER_FILE)
        # the tokens per input the run reads: transformers' `truncation=True` then cuts where bertkit cuts
        write_hf_tokenizer_config(folder, model_max_length=config.task.window(config.model.max_len))
    return len(state)
