"""sentence-transformers folders <-> bertkit sentence encoders.

A sentence-transformers model is a list of modules (modules.json): a Transformer (an HF BERT folder, at the top or
in a subfolder), a Pooling (1_Pooling/config.json: cls | mean | max), optionally Normalize, and the
sentence_bert_config.json's `max_seq_length`. bertkit holds the same thing as an encoder run with a `[sentence]`
section, so both directions are plain file mappings; neither imports sentence-transformers.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from bertkit.config import SentenceConfig
from bertkit.errors import BertkitError, a_or_an
from bertkit.interop.hf import write_hf_folder
from bertkit.run.directory import load_run
from bertkit.run.files import atomic_dir
from bertkit.run.outputs import ST_EXPORT, claim

_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
_MODES = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean", "pooling_mode_max_tokens": "max"}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BertkitError(f"{path}: unreadable ({exc})") from None


def read_sentence_config(src: str | Path) -> tuple[Path, SentenceConfig] | None:
    """For a sentence-transformers folder: where its HF BERT files are, and its pooling / normalisation / length.
    None for a plain HF folder (no modules.json). Modules bertkit cannot reproduce are refused by name."""
    src = Path(src)
    if not (src / "modules.json").is_file():
        return None
    modules = _json(src / "modules.json")
    if not isinstance(modules, list):
        raise BertkitError(f"{src / 'modules.json'}: expected a list of modules")
    transformer, pooling, normalize = None, "mean", False
    if not all(isinstance(m, dict) for m in modules):
        raise BertkitError(f"{src / 'modules.json'}: expected a list of module objects")
    for module in sorted(modules, key=lambda m: m.get("idx", 0)):
        kind, path = module.get("type", ""), src / module.get("path", "")
        if kind == _TRANSFORMER and transformer is None:
            transformer = path
        elif kind == _POOLING:
            config = _json(path / "config.json")
            modes = [mode for key, mode in _MODES.items() if config.get(key)]
            others = [key for key, value in config.items() if key.startswith("pooling_mode") and value
                      and key not in _MODES]
            if len(modes) != 1 or others:
                raise BertkitError(f"import-hf: pooling {' + '.join(others + modes) or 'none'} is not supported "
                                   "(allowed: exactly one of cls, mean, max)")
            pooling = modes[0]
        elif kind == _NORMALIZE:
            normalize = True
        else:
            raise BertkitError(f"import-hf: sentence-transformers module {kind or module!r} is not supported "
                               "(allowed: Transformer, Pooling, Normalize)")
    if transformer is None:
        raise BertkitError(f"{src / 'modules.json'}: no Transformer module")
    settings = {}
    for folder in (transformer, src):
        if (folder / "sentence_bert_config.json").is_file():
            settings = _json(folder / "sentence_bert_config.json")
            break
    if settings.get("do_lower_case"):
        raise BertkitError("import-hf: sentence_bert_config.json has do_lower_case = true (lower-casing outside the "
                           "tokenizer), which bertkit does not reproduce")
    window = settings.get("max_seq_length") or tokenizer_window(transformer, src)
    return transformer, SentenceConfig(pooling=pooling, normalize=normalize, max_seq_length=window)


def tokenizer_window(transformer: Path, src: Path) -> int | None:
    """The tokenizer's model_max_length where it is shorter than max_position_embeddings, else None (the model's
    own): the window sentence-transformers embeds within without a max_seq_length, and that transformers'
    `truncation=True` cuts an imported task model's inputs at (its import's task.max_length)."""
    limit = None
    for folder in (transformer, src):
        if (folder / "tokenizer_config.json").is_file():
            limit = _json(folder / "tokenizer_config.json").get("model_max_length")
            break
    positions = _json(transformer / "config.json").get("max_position_embeddings") \
        if (transformer / "config.json").is_file() else None
    if isinstance(limit, (int, float)) and isinstance(positions, int) and 0 < limit < positions:
        return int(limit)
    return None


def export_sentence_transformers(run: str | Path, out: str | Path, overwrite: bool = False) -> dict[str, Any]:
    """Write a folder `sentence_transformers.SentenceTransformer(out)` loads unchanged and that embeds like
    bertkit: the HF BERT files (BertModel layout), modules.json, 1_Pooling, [2_Normalize], max_seq_length."""
    run = Path(run)
    config, model = load_run(run)
    if config.model.architecture != "encoder":
        raise BertkitError(f"export --format sentence-transformers: {run} is {a_or_an(config.model.architecture)}, "
                           "not an encoder")
    task_heads = [h for h in config.heads.names if h not in ("mlm", "pooler")]
    if task_heads:  # a sentence run trained with the softmax objective keeps its classifier: not part of the encoder
        model.heads = type(model.heads)({k: v for k, v in model.heads.items() if k not in task_heads})
        config = dataclasses.replace(config, heads=dataclasses.replace(
            config.heads, names=tuple(h for h in config.heads.names if h not in task_heads)))
    sentence = config.sentence
    modules = [{"idx": 0, "name": "0", "path": "", "type": _TRANSFORMER},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": _POOLING}]
    if sentence.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": _NORMALIZE})
    pooling = {"word_embedding_dimension": config.model.d_model, **{key: sentence.pooling == mode
                                                                    for key, mode in _MODES.items()},
               "pooling_mode_mean_sqrt_len_tokens": False}
    claim(out, ST_EXPORT, overwrite, inputs=(run,), hint="choose another output or pass --overwrite")
    with atomic_dir(out, overwrite=overwrite) as tmp:
        tensors = write_hf_folder(tmp, run, config, model, with_mlm=False,
                                  command="export --format sentence-transformers")
        (tmp / "modules.json").write_text(json.dumps(modules, indent=2) + "\n", encoding="utf-8")
        (tmp / "1_Pooling").mkdir()
        (tmp / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2) + "\n", encoding="utf-8")
        if sentence.normalize:
            (tmp / "2_Normalize").mkdir()
        st_config = {"max_seq_length": sentence.window(config.model.max_len), "do_lower_case": False}
        (tmp / "sentence_bert_config.json").write_text(json.dumps(st_config, indent=2) + "\n", encoding="utf-8")
        (tmp / "config_sentence_transformers.json").write_text(
            json.dumps({"similarity_fn_name": "cosine", "prompts": {}, "default_prompt_name": None}, indent=2)
            + "\n", encoding="utf-8")
    return {"out": str(out), "tensors": tensors}
