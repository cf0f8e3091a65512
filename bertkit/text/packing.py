"""Tokenise a corpus with parallel workers and pack it into fixed-length blocks (no padding), cached on disk.

Every block is `[CLS]` followed by `block_size - 1` tokens of the running token stream, in which each document
ends with `[SEP]`: documents are packed back to back, their boundaries marked. A per-token `word_start` flag (from
the pre-tokenizer's word ids, i.e. from offsets, not from '##' prefixes) serves whole-word masking.

The cache key is (corpus fingerprint, tokenizer.json contents, block size, validation split); the result is a pair
of memory-mapped Arrow datasets. A damaged cache is packed again (text/cache.py), never a lasting error.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
from datasets import Dataset, Features, Sequence, Value, concatenate_datasets
from rich.console import Console
from tokenizers import Tokenizer

from bertkit.errors import BertkitError
from bertkit.paths import cache_root
from bertkit.run.files import atomic_dir
from bertkit.text.cache import open_or_build, write_manifest
from bertkit.text.tokenizer import special_ids, vocab_span

_VERSION = "pack-v5"  # v3: the manifest records every file's size, rows and a digest, checked on open; v4: the
# corpus's own "[SEP]", "[MASK]" … are text, not special tokens; v5: the held-out share is the fraction (held_out)
_DOCS_PER_BATCH = 1000


@dataclass
class Packed:
    """Train and validation blocks (columns `input_ids`, `word_start`) and what packing produced."""

    train: Dataset
    validation: Dataset
    block_size: int
    stats: dict


@lru_cache(maxsize=4)
def _tokenizer(tokenizer_json: str) -> Tokenizer:  # one parse per worker process
    tokenizer = Tokenizer.from_str(tokenizer_json)
    # a corpus's "[SEP]" or "[MASK]" is text (a paper about BERT, its code): read as the special tokens, it made a
    # false document boundary, or a mask with no label (a review, 2026-11-28)
    tokenizer.encode_special_tokens = True
    return tokenizer


def tokenize_documents(batch: dict, tokenizer_json: str, sep_id: int) -> dict:
    """Documents -> token ids + [SEP], and per-token word-start flags (the [SEP] is a word of its own)."""
    encodings = _tokenizer(tokenizer_json).encode_batch(batch["text"], add_special_tokens=False)
    ids, starts = [], []
    for enc in encodings:
        words = np.asarray([-1 if w is None else w for w in enc.word_ids], dtype=np.int64)
        start = np.ones(len(words) + 1, dtype=bool)
        start[1:len(words)] = words[1:] != words[:-1]
        ids.append(np.asarray(enc.ids + [sep_id], dtype=np.int64))
        starts.append(start)
    return {"ids": ids, "starts": starts}


def cut_blocks(ids: list[np.ndarray], starts: list[np.ndarray], carry_ids: np.ndarray, carry_starts: np.ndarray,
               block_size: int, cls_id: int, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The carried tokens and then tokenised documents (`tokenize_documents`), cut into [CLS] + (block_size - 1)
    -token blocks: (blocks (n, block_size), their word starts, the ids and word starts left over for the next
    documents). The one packing rule of the cached and the streamed corpus."""
    body = block_size - 1
    ids_all = np.concatenate([carry_ids, *ids])
    starts_all = np.concatenate([carry_starts, *starts])
    n = len(ids_all) // body
    blocks = np.empty((n, block_size), dtype=dtype)
    blocks[:, 0] = cls_id
    blocks[:, 1:] = ids_all[: n * body].reshape(n, body)
    block_starts = np.ones((n, block_size), dtype=bool)
    block_starts[:, 1:] = starts_all[: n * body].reshape(n, body)
    return blocks, block_starts, ids_all[n * body:], starts_all[n * body:]


def _write_blocks(tokens: Dataset, path: Path, block_size: int, cls_id: int, dtype: str) -> int:
    """Stream tokenised documents in order into [CLS] + (block_size - 1)-token blocks, carrying the remainder
    from batch to batch (so the result does not depend on how tokenising was split over workers)."""
    schema = pa.schema([("input_ids", pa.list_(pa.from_numpy_dtype(np.dtype(dtype)))),
                        ("word_start", pa.list_(pa.bool_()))])
    carry_ids, carry_starts = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    count = 0
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for batch in tokens.with_format("numpy").iter(batch_size=_DOCS_PER_BATCH):
            blocks, block_starts, carry_ids, carry_starts = cut_blocks(batch["ids"], batch["starts"], carry_ids,
                                                                       carry_starts, block_size, cls_id, dtype)
            n = len(blocks)
            if n == 0:
                continue
            writer.write_batch(pa.record_batch([
                pa.FixedSizeListArray.from_arrays(blocks.ravel(), block_size).cast(schema.field(0).type),
                pa.FixedSizeListArray.from_arrays(block_starts.ravel(), block_size).cast(schema.field(1).type)],
                schema=schema))
            count += n
    return count


def pack_key(corpus_key: str, tokenizer: Tokenizer, block_size: int, validation_fraction: float) -> str:
    """The cache key of one packing."""
    h = hashlib.sha256(f"{_VERSION}|{corpus_key}|{block_size}|{validation_fraction}|".encode())
    h.update(tokenizer.to_str().encode())
    return h.hexdigest()[:20]


def validation_share(fraction: float) -> tuple[int, int] | None:
    """The fraction as p / q (q at most 10^9), or None for none: document i is held out when
    ((i + 1) p) // q > (i p) // q, so every k-th one for a fraction 1 / k (0.01: every 100th), and exactly the
    fraction spread evenly for any other (0.4 held out every 2nd, half, when k was round(1 / fraction))."""
    if fraction <= 0:
        return None
    # a denominator up to 10^9: 1e-5 (a 10,000-document held-out set of a billion) is exact, never rounded to 0
    share = Fraction(fraction).limit_denominator(10 ** 9)
    return (share.numerator, share.denominator) if share.numerator else (1, 10 ** 9)


def held_out(doc, share: tuple[int, int] | None):
    """Whether document `doc` (0-based; or an int64 array of them: a boolean array) is a validation document under
    `validation_share`'s p / q."""
    return share is not None and ((doc + 1) * share[0]) // share[1] > (doc * share[0]) // share[1]


def _split(corpus: Dataset, validation_fraction: float) -> tuple[Dataset, Dataset]:
    """The documents `held_out` picks are validation: deterministic, spread over the whole corpus."""
    share = validation_share(validation_fraction)
    if share is None:
        return corpus, corpus.select([])
    validation = held_out(np.arange(len(corpus), dtype=np.int64), share)  # (n,)
    return corpus.select(np.flatnonzero(~validation)), corpus.select(np.flatnonzero(validation))


def pack_corpus(corpus: Dataset, corpus_key: str, tokenizer: Tokenizer, block_size: int,
                validation_fraction: float = 0.01, max_validation_blocks: int = 1000, workers: int = 1,
                console: Console | None = None) -> Packed:
    """Tokenise and pack (or reuse the cache; a damaged one is packed again, with a warning on `console`, stderr
    when None). Refuses a corpus too small for one block."""
    key = pack_key(corpus_key, tokenizer, block_size, validation_fraction)

    def build(folder: Path) -> None:
        _build(folder, corpus, tokenizer, block_size, validation_fraction, workers, key)

    def read(manifest: dict, opened: dict[str, Dataset]) -> tuple[dict[str, Dataset], dict]:
        splits = {name: concatenate_datasets([opened[f] for f in files]) if files
                  else Dataset.from_dict({"input_ids": [], "word_start": []})
                  for name, files in manifest["splits"].items()}
        return splits, manifest["stats"]

    splits, stats = open_or_build(cache_root() / "packed" / key, _VERSION, build, read, "packed corpus", console)
    train, validation = splits["train"], splits["validation"]
    if len(train) == 0:
        raise BertkitError(f"corpus too small: its {stats['documents']:,} document(s) do not fill one "
                           f"training block of {block_size} tokens (add text or lower data.block_size)")
    if len(validation) > max_validation_blocks:
        validation = validation.select(range(max_validation_blocks))
    return Packed(train, validation, block_size, stats)


def _build(folder: Path, corpus: Dataset, tokenizer: Tokenizer, block_size: int, validation_fraction: float,
           workers: int, key: str) -> None:
    ids = special_ids(tokenizer)
    # the largest id decides, not the token count: a hand-edited tokenizer.json can have gaps in its ids
    dtype = "uint16" if vocab_span(tokenizer) <= np.iinfo(np.uint16).max + 1 else "int32"
    features = Features({"ids": Sequence(Value(dtype)), "starts": Sequence(Value("bool"))})
    if workers > 1:  # the worker processes are the parallelism: keep tokenizers' own threads from oversubscribing
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    if not sys.stderr.isatty():  # progress bars only where someone watches; logs get the summary line
        datasets.disable_progress_bars()
    with atomic_dir(folder, overwrite=True) as tmp:
        files, stats, rows = {}, {}, {}
        for name, docs in zip(("train", "validation"), _split(corpus, validation_fraction)):
            if len(docs) == 0:
                files[name], stats[f"{name}_blocks"], stats[f"{name}_tokens"] = [], 0, 0
                continue
            tokens = docs.map(tokenize_documents, batched=True, batch_size=_DOCS_PER_BATCH,
                              fn_kwargs=dict(tokenizer_json=tokenizer.to_str(), sep_id=ids.sep),
                              remove_columns=docs.column_names, features=features,
                              num_proc=workers if workers > 1 and len(docs) >= 2 * _DOCS_PER_BATCH else None,
                              cache_file_name=str(tmp / f"tokens-{name}.arrow"), new_fingerprint=f"{key}-{name}",
                              desc=f"tokenising {name}")
            count = _write_blocks(tokens, tmp / f"{name}.arrow", block_size, ids.cls, dtype)
            for cache in tokens.cache_files:
                Path(cache["filename"]).unlink(missing_ok=True)
            files[name] = [f"{name}.arrow"] if count else []
            if count:
                rows[f"{name}.arrow"] = count
            else:
                (tmp / f"{name}.arrow").unlink()  # an empty stream: nothing to check or map
            stats[f"{name}_blocks"] = count
            stats[f"{name}_tokens"] = count * block_size
        stats["documents"] = len(corpus)
        write_manifest(tmp, _VERSION, rows, block_size=block_size, splits=files, stats=stats)
