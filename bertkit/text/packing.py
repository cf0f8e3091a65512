"""Tokenise a corpus with parallel workers and pack it into fixed-length blocks (no padding), cached on disk.

Every block is `[CLS]` followed by `block_size - 1` tokens of the running token stream, in which each document
ends with `[SEP]`: documents are packed back to back, their boundaries marked. A per-token `word_start` flag (from
the pre-tokenizer's word ids, i.e. from offsets, not from '##' prefixes) serves whole-word masking.

The cache key is (corpus fingerprint, tokenizer.json contents, block size, validation split); the result is a pair
of memory-mapped Arrow datasets.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from datasets import Dataset, Features, Sequence, Value, concatenate_datasets
from tokenizers import Tokenizer

from bertkit.errors import BertkitError
from bertkit.paths import cache_root
from bertkit.text.tokenizer import special_ids

_VERSION = "pack-v1"
_DOCS_PER_BATCH = 1000  # a batch's last partial block is dropped: < block_size tokens per 1000 documents


@dataclass
class Packed:
    """Train and validation blocks (columns `input_ids`, `word_start`) and what packing produced."""

    train: Dataset
    validation: Dataset
    block_size: int
    stats: dict


@lru_cache(maxsize=4)
def _tokenizer(tokenizer_json: str) -> Tokenizer:  # one parse per worker process
    return Tokenizer.from_str(tokenizer_json)


def _pack_batch(batch: dict, tokenizer_json: str, block_size: int, cls_id: int, sep_id: int) -> dict:
    encodings = _tokenizer(tokenizer_json).encode_batch(batch["text"], add_special_tokens=False)
    ids, starts = [], []
    for enc in encodings:
        words = np.asarray([-1 if w is None else w for w in enc.word_ids], dtype=np.int64)
        start = np.ones(len(words) + 1, dtype=bool)  # + the closing [SEP], a word of its own
        start[1:len(words)] = words[1:] != words[:-1]
        ids.append(np.asarray(enc.ids + [sep_id], dtype=np.int64))
        starts.append(start)
    stream = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    stream_starts = np.concatenate(starts) if starts else np.zeros(0, dtype=bool)
    body = block_size - 1
    n = len(stream) // body
    blocks = np.empty((n, block_size), dtype=np.int64)
    blocks[:, 0] = cls_id
    blocks[:, 1:] = stream[: n * body].reshape(n, body)
    block_starts = np.ones((n, block_size), dtype=bool)
    block_starts[:, 1:] = stream_starts[: n * body].reshape(n, body)
    return {"input_ids": blocks, "word_start": block_starts}


def pack_key(corpus_key: str, tokenizer: Tokenizer, block_size: int, validation_fraction: float) -> str:
    """The cache key of one packing."""
    h = hashlib.sha256(f"{_VERSION}|{corpus_key}|{block_size}|{validation_fraction}|".encode())
    h.update(tokenizer.to_str().encode())
    return h.hexdigest()[:20]


def _split(corpus: Dataset, validation_fraction: float) -> tuple[Dataset, Dataset]:
    """Every k-th document (k = 1 / fraction) is validation: deterministic, spread over the whole corpus."""
    if validation_fraction <= 0:
        return corpus, corpus.select([])
    stride = max(2, round(1 / validation_fraction))
    n = len(corpus)
    val = np.arange(stride - 1, n, stride)
    train = np.setdiff1d(np.arange(n), val, assume_unique=True)
    return corpus.select(train), corpus.select(val)


def pack_corpus(corpus: Dataset, corpus_key: str, tokenizer: Tokenizer, block_size: int,
                validation_fraction: float = 0.01, max_validation_blocks: int = 1000, workers: int = 1) -> Packed:
    """Tokenise and pack (or reuse the cache). Refuses a corpus too small for one block."""
    key = pack_key(corpus_key, tokenizer, block_size, validation_fraction)
    folder = cache_root() / "packed" / key
    if not (folder / "manifest.json").is_file():
        _build(folder, corpus, tokenizer, block_size, validation_fraction, workers, key)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    splits = {name: concatenate_datasets([Dataset.from_file(str(folder / f)) for f in files])
              if files else Dataset.from_dict({"input_ids": [], "word_start": []})
              for name, files in manifest["files"].items()}
    train, validation = splits["train"], splits["validation"]
    if len(train) == 0:
        raise BertkitError(f"corpus too small: its {manifest['stats']['documents']:,} document(s) do not fill one "
                           f"training block of {block_size} tokens (add text or lower data.block_size)")
    if len(validation) > max_validation_blocks:
        validation = validation.select(range(max_validation_blocks))
    return Packed(train, validation, block_size, manifest["stats"])


def _build(folder: Path, corpus: Dataset, tokenizer: Tokenizer, block_size: int, validation_fraction: float,
           workers: int, key: str) -> None:
    ids = special_ids(tokenizer)
    dtype = "uint16" if tokenizer.get_vocab_size() <= np.iinfo(np.uint16).max else "int32"
    features = Features({"input_ids": Sequence(Value(dtype)), "word_start": Sequence(Value("bool"))})
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=folder.parent))
    kwargs = dict(tokenizer_json=tokenizer.to_str(), block_size=block_size, cls_id=ids.cls, sep_id=ids.sep)
    if workers > 1:  # the worker processes are the parallelism: keep tokenizers' own threads from oversubscribing
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        files, stats = {}, {}
        for name, docs in zip(("train", "validation"), _split(corpus, validation_fraction)):
            if len(docs) == 0:
                files[name], stats[f"{name}_blocks"], stats[f"{name}_tokens"] = [], 0, 0
                continue
            packed = docs.map(_pack_batch, batched=True, batch_size=_DOCS_PER_BATCH, fn_kwargs=kwargs,
                              remove_columns=docs.column_names, features=features,
                              num_proc=workers if workers > 1 and len(docs) >= 2 * _DOCS_PER_BATCH else None,
                              cache_file_name=str(tmp / f"{name}.arrow"), new_fingerprint=f"{key}-{name}",
                              desc=f"tokenising and packing {name}")
            files[name] = [Path(f["filename"]).name for f in packed.cache_files]
            stats[f"{name}_blocks"] = len(packed)
            stats[f"{name}_tokens"] = len(packed) * block_size
        stats["documents"] = len(corpus)
        manifest = {"version": _VERSION, "block_size": block_size, "files": files, "stats": stats}
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
