"""Vector indexes over sentence embeddings: exact search (numpy) for small ones, FAISS IVF for large ones.

INDEX/ (a directory)
  index.json            format, version, the model (path, identity, settings), dim, count, shards, backend
  shard-00000.f32       (n, D) float32 L2-normalised embeddings, raw (the shape is in index.json)
  shard-00000.jsonl     one {"id", "text"} per row
  shard-00000.offsets   int64 byte offset of each jsonl line, plus the file's size (n + 1 values)
  ivf-00000.faiss       FAISS IndexIVFFlat (inner product) over every row, when the backend is faiss
  (compressed indexes: shard-00000.i8 / .b1 in place of .f32, and with `--refine` a finer copy, .r32 or .r8,
  read only for the candidates a search rescores; index_codec)

Vectors are normalised, so the inner product is the cosine similarity on both paths. Building writes a temporary
directory and renames it into place; appending writes new shard files (and a new FAISS file) under fresh names and
then replaces index.json in one rename, so a crash at any moment leaves the previous index whole. Every file is
written to a temporary, fsynced and renamed (then the directory fsynced), so a power cut cannot leave a committed
index.json naming a torn file; what an interrupted append leaves behind is removed by the next one (under the lock).
Every file's size is checked against index.json on opening: a truncated or corrupt index is an error, never a wrong
answer.

index.json is untrusted input (indexes are shared): every file name in it must be one of the names bertkit writes
(shard-NNNNN.f32 / .i8 / .b1 / .r32 / .r8 / .jsonl / .offsets, ivf-NNNNN.faiss), a plain name inside the index
directory, so no index can make bertkit read, overwrite or delete a file elsewhere. Nothing is unpickled: vectors
are raw arrays, documents JSON, and the FAISS file is read by FAISS's own (non-executable) format.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.errors import BertkitError
from bertkit.index_codec import (DTYPE, REFINE_SUFFIX, SUFFIX, add_ivf, binary_flat, build_ivf, default_rescore,
                                 gather_rows, hamming_candidates, int8_flat, rotate, row_bytes, row_width, searched)
from bertkit.index_codec import TIE_DECIMALS, in_row_order
from bertkit.index_codec import rescore as _rescore
from bertkit.index_files import (FORMAT, INDEX_FILE, VERSION, file_number, next_number,  # noqa: F401 (re-exported)
                                 read_meta, remove_leftovers, shard_files, write_meta)
from bertkit.run.files import content_digest, fsync_dir, replace
from bertkit.run.lock import hold

BACKENDS = ("auto", "exact", "faiss")
# `auto` switches to FAISS at this many vectors. Measured on 2 cores (benchmarks/search_latency.py, 256-d): exact
# numpy search takes 6 ms per query at 100k vectors and 18 ms at 300k, with recall 1; IVF answers in 1.4 / 3.4 ms at
# recall@10 0.93 / 0.95. Below 300k exact is fast enough that approximate recall is not worth it; at 1M (75 ms exact
# vs ~8 ms) it is.
FAISS_MIN = 300_000
# FAISS computes distances with BLAS only from this many queries at once (faiss 1.15's default: 20); below it, a
# per-query OpenMP loop, reported ~12x slower on 2 cores. That did not reproduce here: with faiss 1.15.1 on this
# 2-core machine the two paths measured the same for 16 and 64 queries, 10k to 1M vectors (0.9-1.1x,
# benchmarks/search_latency.py). 1 (BLAS for every batch) is kept: never slower in those runs.
BLAS_THRESHOLD = 1
_EXACT_CHUNK = 1 << 17  # rows of a shard scored (or added to FAISS) at once: 64 MB of scores at 128 queries

def _faiss():
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss-cpu is a dependency
        raise BertkitError("the faiss backend needs faiss-cpu (pip install faiss-cpu)") from None
    faiss.cvar.distance_compute_blas_threshold = BLAS_THRESHOLD
    import torch

    faiss.omp_set_num_threads(torch.get_num_threads())
    return faiss


def ivf_params(count: int) -> tuple[int, int]:
    """(nlist, nprobe) for an IVF index of `count` vectors: ~4 sqrt(N) lists, and a sixteenth of them probed.

    Measured on real sentence embeddings (benchmarks/search_latency.py, 2 cores): recall@10 0.93 at 100k and 0.97
    at 1M vectors (8 ms per query against 75 ms for exact search); probing a 32nd gave only 0.83 / 0.93."""
    nlist = int(min(65536, max(16, 4 * math.sqrt(count))))
    return nlist, max(8, nlist // 16)


@dataclass(frozen=True)
class Hit:
    """One search result: global row, cosine similarity, and the document."""

    row: int
    score: float
    id: str
    text: str


class VectorIndex:
    """An index directory opened for search and appends; every file is checked against index.json."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.meta = read_meta(self.path)
        self.dim = int(self.meta["dim"])
        self.shards = self.meta["shards"]
        self.precision = self.meta.get("vectors", "float32")  # how the vectors are stored (index_codec)
        self.calibration = self.meta.get("calibration")  # int8 (codes or refine copy): the turn and the ranges
        self.refine = self.meta.get("refine")  # the finer copy on disk that rescores candidates (index build --refine)
        self.count = sum(s["count"] for s in self.shards)
        if self.count != self.meta["count"]:
            raise BertkitError(f"{self.path}: corrupt index ({INDEX_FILE} says {self.meta['count']} rows, its shards "
                               f"hold {self.count})")
        for shard in self.shards:
            self._check_shard(shard)
        if self.backend == "faiss" and not (self.path / self.meta["faiss"]["file"]).is_file():
            raise BertkitError(f"{self.path / self.meta['faiss']['file']}: missing (the index is incomplete or was "
                               "moved in parts)")
        if self.backend == "faiss" and self.meta["faiss"].get("digest") is not None:
            self._check_content(self.path / self.meta["faiss"]["file"], self.meta["faiss"]["digest"])
        self._vectors: list[np.ndarray] = []
        self._refined: list[np.ndarray] = []
        self._offsets: list[np.ndarray] = []
        self._faiss = None  # the IVF file's index, read on first use
        self._flat = None  # int8 / binary: FAISS's flat index over the stored codes, built on first use

    @property
    def model(self) -> dict:
        """The model this index was built with: path, identity, pooling, normalize, max_length."""
        return self.meta["model"]

    @property
    def backend(self) -> str:
        return self.meta["backend"]

    def _check_shard(self, shard: dict) -> None:
        n = shard["count"]
        if not shard["vectors"].endswith("." + SUFFIX[self.precision]):
            raise BertkitError(f"{self.path}: {INDEX_FILE} names {shard['vectors']} for {self.precision} vectors "
                               "(corrupt index)")
        expected = {shard["vectors"]: n * row_bytes(self.precision, self.dim), shard["offsets"]: (n + 1) * 8}
        if self.refine:
            if not shard["refine"].endswith("." + REFINE_SUFFIX[self.refine]):
                raise BertkitError(f"{self.path}: {INDEX_FILE} names {shard['refine']} for a {self.refine} copy "
                                   "(corrupt index)")
            expected[shard["refine"]] = n * row_bytes(self.refine, self.dim)
        for name, size in expected.items():
            file = self.path / name
            if not file.is_file():
                raise BertkitError(f"{file}: missing (the index is incomplete or was moved in parts)")
            if file.stat().st_size != size:
                raise BertkitError(f"{file}: truncated or corrupt ({file.stat().st_size:,} bytes, expected "
                                   f"{size:,})")
        docs = self.path / shard["docs"]
        if not docs.is_file() or docs.stat().st_size != shard["docs_bytes"]:
            raise BertkitError(f"{docs}: missing, truncated or corrupt (expected {shard['docs_bytes']:,} bytes)")
        # contents: a file overwritten at the same size (an index from before digests were kept has none)
        digests = shard.get("digests")
        for key in shard_files(shard):
            if isinstance(digests, dict) and digests.get(key) is not None:
                self._check_content(self.path / shard[key], digests[key])

    def _check_content(self, file: Path, digest: object) -> None:
        if content_digest(file) != digest:
            raise BertkitError(f"{file}: its content is not what {INDEX_FILE} recorded (changed or corrupt); rebuild "
                               "the index")

    def vectors(self) -> list[np.ndarray]:
        """Each shard's stored vectors, memory-mapped read-only: (n, D) float32 or int8, (n, ⌈D/8⌉) packed bits."""
        if not self._vectors:
            self._vectors = [shard_vectors(self.path, s, self.dim, self.precision) for s in self.shards]
        return self._vectors

    def refined(self) -> list[np.ndarray]:
        """Each shard's refine copy, memory-mapped read-only ((n, D) float32 or int8): only the rows a search
        rescores are read, so it costs disk, not memory."""
        if not self._refined:
            self._refined = [shard_vectors(self.path, s, self.dim, self.refine, key="refine") for s in self.shards]
        return self._refined

    # --------------------------------------------------------------------------------------------------- search

    def search(self, queries: np.ndarray, k: int = 10, exact: bool | None = None, nprobe: int | None = None,
               rescore: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-k rows by cosine similarity for each query (Q, D) -> scores (Q, k'), rows (Q, k'), with
        k' = min(k, count). Queries are normalised here (the stored vectors already are). `exact` None: the
        index's backend; True scores every stored vector (numpy over float32 ones or a float32 copy; FAISS's flat
        index over int8 / binary codes). int8 vectors are scored by the float query against their dequantized
        values; binary ones are found by Hamming distance, `rescore` × k candidates per query, and
        ranked by the float query against their sign vectors (index_codec). An index with a refine copy on disk
        (`index build --refine`) takes `rescore` × k candidates from its codes either way and ranks them by the
        float query against that copy. `rescore` None: the index's default (index_codec.default_rescore)."""
        queries = np.asarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise BertkitError(f"queries of shape {queries.shape} do not fit an index of dimension {self.dim}")
        bad = ~np.isfinite(queries).all(axis=1)  # (Q,): a NaN query scored NaN, no hits or 'corrupt' by precision
        if bad.any():
            raise BertkitError(f"{int(bad.sum()):,} of {len(queries):,} query embedding(s) are not finite (NaN or "
                               f"inf; query {int(np.argmax(bad)) + 1} first): check the model (a diverged run?)")
        queries = np.ascontiguousarray(queries / np.maximum(np.linalg.norm(queries, axis=1, keepdims=True), 1e-12))
        k = min(k, self.count)
        if k < 1:
            return np.zeros((len(queries), 0), np.float32), np.zeros((len(queries), 0), np.int64)
        approximate = not exact and (exact is not None or self.backend == "faiss")
        if exact and self.refine == "float32":  # --exact with the full vectors on disk: an exact float search
            return self._exact(self.refined(), queries, k, "refine")
        if self.precision != "float32":
            rescore = default_rescore(self.precision, self.refine) if rescore is None else rescore
            return self._search_codes(queries, k, approximate, nprobe, rescore)
        if exact or (exact is None and self.backend != "faiss"):
            return self._exact(self.vectors(), queries, k, "vectors")
        index = self.faiss_index()
        index.nprobe = min(nprobe or self.meta["faiss"]["nprobe"], index.nlist)
        return self._checked(*searched(index, queries, k), _UNIT)

    def _exact(self, shards: list[np.ndarray], queries: np.ndarray, k: int, key: str) -> tuple[np.ndarray, np.ndarray]:
        """Exact float32 search over `shards` (the vectors, or a float32 refine copy: `key` names the file)."""
        try:
            return exact_search(shards, queries, k)
        except NotUnitLength as exc:
            file = self.path / self.shards[exc.shard][key]
            raise BertkitError(f"{file}: holds vectors that are not finite or not of unit length (changed or "
                               "corrupt); rebuild the index") from None

    def _search_codes(self, queries: np.ndarray, k: int, approximate: bool, nprobe: int | None,
                      rescore: int) -> tuple[np.ndarray, np.ndarray]:
        """`search` over int8 / binary vectors: FAISS's flat index over the codes (built once per opening) or the
        index's IVF file; binary candidates (`rescore` × k) rescored by the float query."""
        if approximate:
            index = self.faiss_index()
            index.nprobe = min(nprobe or self.meta["faiss"]["nprobe"], index.nlist)
        else:
            if self._flat is None:
                self._flat = (binary_flat(self.vectors(), self.dim, _faiss()) if self.precision == "binary" else
                              int8_flat(self.vectors(), self.calibration, self.dim, _faiss()))
            index = self._flat
        wanted = min(self.count, k * max(1, rescore)) if self.refine or self.precision == "binary" else k
        if self.precision == "binary":
            rows = hamming_candidates(index, queries, wanted)
        else:
            turned = np.ascontiguousarray(rotate(queries, self.calibration))  # the codes' basis (same products)
            scores, rows = self._checked(*searched(index, turned, wanted), _INT8_UNIT)
            if not self.refine:
                return in_row_order(scores, rows)
        if self.refine:  # the candidates rescored from the finer copy on disk (checked as FAISS's scores are)
            return self._checked(*_rescore(self.refined(), queries, rows, k, self.refine, self.dim, self.calibration),
                                 _UNIT if self.refine == "float32" else _INT8_UNIT)
        return _rescore(self.vectors(), queries, rows, k, "binary", self.dim)

    def _checked(self, scores: np.ndarray, rows: np.ndarray, bound: float) -> tuple[np.ndarray, np.ndarray]:
        """FAISS's (or a refine copy's) results, refused when a score is not a cosine of (near) unit vectors: a
        changed or corrupt file."""
        found = scores[rows >= 0]  # FAISS pads with -1 rows when a probe finds fewer than k
        if not (np.isfinite(found).all() and (np.abs(found) <= bound).all()):
            raise BertkitError(f"{self.path}: its FAISS index or shard files hold vectors that are not finite or not "
                               "of unit length (changed or corrupt); rebuild the index")
        return scores, rows

    def faiss_index(self):
        """The FAISS index, read once (checked against the row count)."""
        if self._faiss is None:
            if self.backend != "faiss":
                raise BertkitError(f"{self.path}: has no FAISS index (backend {self.backend})")
            faiss = _faiss()
            file = self.path / self.meta["faiss"]["file"]
            read = faiss.read_index_binary if self.precision == "binary" else faiss.read_index
            try:
                self._faiss = read(str(file))
            except (RuntimeError, MemoryError) as exc:  # FAISS's C++ errors (a bad_alloc too) arrive as these
                raise BertkitError(f"{file}: unreadable FAISS index ({str(exc).splitlines()[0][:120]})") from None
            dim = row_width("binary", self.dim) * 8 if self.precision == "binary" else self.dim  # binary: bits
            if self._faiss.ntotal != self.count or self._faiss.d != dim:
                raise BertkitError(f"{file}: holds {self._faiss.ntotal} vectors of dimension {self._faiss.d}, "
                                   f"expected {self.count} of {self.dim} (corrupt index)")
        return self._faiss

    def docs(self, rows: list[int]) -> list[dict]:
        """The {"id", "text"} of global rows, read by offset."""
        if not self._offsets:
            for shard in self.shards:
                with _reading(self.path / shard["offsets"]):
                    self._offsets.append(np.memmap(self.path / shard["offsets"], dtype=np.int64, mode="r"))
        starts = np.cumsum([0] + [s["count"] for s in self.shards])
        out = []
        for row in rows:
            shard = int(np.searchsorted(starts, row, side="right") - 1)
            local = row - starts[shard]
            begin, end = self._offsets[shard][local], self._offsets[shard][local + 1]
            with _reading(self.path / self.shards[shard]["docs"]), \
                    (self.path / self.shards[shard]["docs"]).open("rb") as fh:
                fh.seek(int(begin))
                raw = fh.read(int(end - begin))
            try:
                doc = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                doc = None
            if not (isinstance(doc, dict) and isinstance(doc.get("id"), str) and isinstance(doc.get("text"), str)):
                raise BertkitError(f"{self.path / self.shards[shard]['docs']}: corrupt document at row {row}")
            out.append(doc)
        return out

    def hits(self, scores: np.ndarray, rows: np.ndarray) -> list[list[Hit]]:
        """Search results with their documents, per query (FAISS's -1 for "no result" dropped). Scores are cosines,
        shown within [-1, 1]: an int8 code's dequantized vector is not quite unit length (1.0008 for a text's own
        copy), nor a float32 one after rounding (1.0000001); the order is the search's."""
        flat = sorted({int(r) for r in rows.ravel() if r >= 0})
        docs = dict(zip(flat, self.docs(flat)))
        return [[Hit(int(r), _cosine(s), docs[int(r)]["id"], docs[int(r)]["text"])
                 for s, r in zip(qs, qr) if r >= 0] for qs, qr in zip(scores, rows)]

    def ids(self) -> Iterator[str]:
        """Every document id, in row order (streamed)."""
        for shard in self.shards:
            with _reading(self.path / shard["docs"]), (self.path / shard["docs"]).open("rb") as fh:
                for number, line in enumerate(fh, start=1):
                    try:
                        yield json.loads(line)["id"]
                    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
                        raise BertkitError(f"{self.path / shard['docs']}:{number}: corrupt document") from None


def shard_vectors(path: Path, shard: dict, dim: int, precision: str = "float32", key: str = "vectors") -> np.ndarray:
    """One shard's stored vectors (or, key "refine", its refine copy), memory-mapped read-only: (n, D) float32 /
    int8 or (n, ⌈D/8⌉) packed bits."""
    if shard["count"] == 0:  # an empty file cannot be mapped
        return np.zeros((0, row_width(precision, dim)), DTYPE[precision])
    file = Path(path) / shard[key]
    with _reading(file):
        return np.memmap(file, dtype=DTYPE[precision], mode="r", shape=(shard["count"], row_width(precision, dim)))


def add_to_faiss(index, vectors: np.ndarray, precision: str = "float32", calibration: dict | None = None) -> None:
    """Append (memory-mapped) vectors, or int8 / binary codes, to a FAISS index a block at a time; ids continue the
    row order."""
    if precision != "float32":
        return add_ivf(index, vectors, precision, index.d, calibration)  # (index.d: int8's dimension)
    for start in range(0, len(vectors), _EXACT_CHUNK):
        index.add(np.ascontiguousarray(vectors[start:start + _EXACT_CHUNK], dtype=np.float32))


def index_lock(path: Path, wait: bool = True):
    """An exclusive lock on an index directory (its `.lock`) for the length of an append (a second `index add`
    waits) or a replacement (`wait=False`: an index in use is refused with the holder's pid)."""
    return hold(Path(path) / ".lock", path, "index", wait=wait, remove=False)


@contextlib.contextmanager
def _reading(file: Path) -> Iterator[None]:
    """A file that vanished or became unreadable after the checks on opening (moved meanwhile): one line."""
    try:
        yield
    except OSError as exc:
        raise BertkitError(f"{file}: cannot be read ({exc.strerror or exc}; was the index changed or moved "
                           "while in use?)") from None


def _cosine(score) -> float:
    """A score shown as a cosine, within [-1, 1]; NaN stays NaN (a query that embedded to NaN must not read -1)."""
    score = float(score)
    return score if math.isnan(score) else min(1.0, max(-1.0, score))


class NotUnitLength(Exception):
    """A shard scored outside [-1, 1] (or NaN) against unit queries: its vectors were changed."""

    def __init__(self, shard: int):
        super().__init__(shard)
        self.shard = shard


_UNIT = 1.001  # |cosine| of unit vectors, with float32 rounding
_INT8_UNIT = 1.05  # a dequantized unit vector is off by at most half a step per dimension




def _top_k(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of (Q, n) scores per query by score, then by lower row (unordered). Scores are compared to
    TIE_DECIMALS: a matrix product rounds one vector's score differently with the block's width and the number of
    queries (1.0 in a 46-row shard, 1.0000001 in a 266-row one), and argpartition alone picks arbitrarily among
    ties, so which copies of a duplicated text came back depended on the sharding. Only a query with a tie at the
    k-th sorts, and only its candidates."""
    take = min(k, scores.shape[1])
    if take == scores.shape[1]:
        return scores, rows
    key = np.round(scores, TIE_DECIMALS)
    top = np.argpartition(-key, take - 1, axis=1)[:, :take]  # (Q, take)
    kth = np.take_along_axis(key, top, 1).min(axis=1, keepdims=True)  # (Q, 1)
    for q in np.nonzero((key >= kth).sum(axis=1) > take)[0]:
        candidates = np.nonzero(key[q] >= kth[q])[0]
        top[q] = candidates[np.lexsort((rows[q, candidates], -key[q, candidates]))[:take]]
    return np.take_along_axis(scores, top, 1), np.take_along_axis(rows, top, 1)


def exact_search(shards: list[np.ndarray], queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k over memory-mapped shards, a chunk at a time (memory does not grow with N). Every
    score is checked (a cosine of unit vectors is finite and in [-1, 1]), so a shard changed where its digest did not
    sample is still caught, as `NotUnitLength`."""
    best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), 0), dtype=np.int64)
    base = 0
    for number, shard in enumerate(shards):
        for start in range(0, len(shard), _EXACT_CHUNK):
            block = np.asarray(shard[start:start + _EXACT_CHUNK])  # (n, D)
            scores = queries @ block.T  # (Q, n)
            if not np.isfinite(scores).all() or np.abs(scores).max(initial=0.0) > _UNIT:
                raise NotUnitLength(number)
            rows = np.broadcast_to(np.arange(base + start, base + start + scores.shape[1]), scores.shape)
            chunk_scores, chunk_rows = _top_k(scores, rows, k)  # (Q, ≤k), unordered
            best_scores, best_rows = _top_k(np.concatenate([best_scores, chunk_scores], axis=1),
                                            np.concatenate([best_rows, chunk_rows], axis=1), k)
        base += len(shard)
    return in_row_order(best_scores, best_rows)  # best first; equal scores (to TIE_DECIMALS) by row, any layout


# ----------------------------------------------------------------------------------------------------- writing

class ShardWriter:
    """Rows of (vector, id, text) streamed into one new shard's three files (temporaries until `close`)."""

    def __init__(self, directory: Path, number: int, dim: int):
        self.directory, self.dim, self.count, self.position = Path(directory), dim, 0, 0
        self.names = {"vectors": f"shard-{number:05d}.f32", "docs": f"shard-{number:05d}.jsonl",
                      "offsets": f"shard-{number:05d}.offsets"}
        self._tmp = {key: self.directory / f".{name}.tmp-{os.getpid()}" for key, name in self.names.items()}
        self._files = {key: tmp.open("wb") for key, tmp in self._tmp.items()}

    def add(self, vectors: np.ndarray, ids: list[str], texts: list[str]) -> None:
        bad = ~np.isfinite(vectors).all(axis=-1)  # (n,)
        if bad.any():  # a NaN row scores null against every query and an inf one wins them all: never stored
            first = ids[int(np.argmax(bad))]
            raise BertkitError(f"the model gave {int(bad.sum()):,} non-finite embedding(s) (NaN or inf; the first for "
                               f"{first!r}); nothing was written: check the model (a diverged run?)")
        self._files["vectors"].write(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
        offsets = []
        for key, text in zip(ids, texts):
            line = (json.dumps({"id": key, "text": text}, ensure_ascii=False) + "\n").encode("utf-8")
            offsets.append(self.position)
            self.position += len(line)
            self._files["docs"].write(line)
        self._files["offsets"].write(np.asarray(offsets, dtype=np.int64).tobytes())
        self.count += len(ids)

    def close(self) -> dict:
        """fsync the three files and rename them to their names (then fsync the directory); the shard's entry for
        index.json. Uncommitted until index.json names them."""
        self._files["offsets"].write(np.asarray([self.position], dtype=np.int64).tobytes())
        for fh in self._files.values():
            fh.flush()
            os.fsync(fh.fileno())
            fh.close()
        for key, tmp in self._tmp.items():
            os.replace(tmp, self.directory / self.names[key])
        fsync_dir(self.directory)
        digests = {key: content_digest(self.directory / name) for key, name in self.names.items()}
        return {**self.names, "count": self.count, "docs_bytes": self.position, "digests": digests}

    def discard(self) -> None:
        """Remove whatever this writer wrote (its names are new: never a committed file)."""
        for fh in self._files.values():
            with contextlib.suppress(OSError):  # a full disk can fail the final flush too
                fh.close()
        for key, tmp in self._tmp.items():
            tmp.unlink(missing_ok=True)
            (self.directory / self.names[key]).unlink(missing_ok=True)


def build_faiss(shards: list[np.ndarray], dim: int, nlist: int | None = None, seed: int = 0,
                precision: str = "float32", calibration: dict | None = None):
    """An IndexIVFFlat (inner product) trained on a sample of the vectors, holding all of them in row order; int8 /
    binary shards get index_codec.build_ivf's IVF over their codes."""
    if precision != "float32":
        count = sum(len(s) for s in shards)
        return build_ivf(shards, precision, dim, calibration, nlist or ivf_params(count)[0], _faiss(), seed)
    faiss = _faiss()
    count = sum(len(s) for s in shards)
    nlist = nlist or ivf_params(count)[0]
    nlist = max(1, min(nlist, count // 4))  # k-means needs points per centroid
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    index.cp.seed = seed
    index.cp.niter = 10
    # k-means on at most 64 points per list: enough for stable centroids, and bounded time on large corpora
    sample_size = min(count, 64 * nlist)
    rows = np.sort(np.random.default_rng(seed).choice(count, sample_size, replace=False))
    index.train(np.ascontiguousarray(gather_rows(shards, rows), dtype=np.float32))
    for shard in shards:
        add_to_faiss(index, shard)
    return index


def write_faiss(index, path: Path, number: int) -> str:
    """Write a FAISS index under a fresh name (temp, fsync, rename, fsync directory); returns the name."""
    faiss = _faiss()
    name = f"ivf-{number:05d}.faiss"
    tmp = Path(path) / f".{name}.tmp-{os.getpid()}"
    failed: list[OSError] = []

    def write(data: bytes) -> None:  # Python writes: a full disk is an OSError with its errno, not a RuntimeError
        try:
            fh.write(data)
        except OSError as exc:
            failed.append(exc)
            raise

    try:
        with tmp.open("wb") as fh:
            try:
                writer = faiss.write_index_binary if isinstance(index, faiss.IndexBinary) else faiss.write_index
                writer(index, faiss.PyCallbackIOWriter(write))
            except (RuntimeError, OSError):
                if failed:
                    raise failed[0] from None
                raise
            fh.flush()
            os.fsync(fh.fileno())
        replace(tmp, Path(path) / name)
    finally:
        tmp.unlink(missing_ok=True)
    return name


def resolve_backend(choice: str, count: int) -> str:
    """auto -> exact below FAISS_MIN vectors, faiss from there on."""
    if choice not in BACKENDS:
        raise BertkitError(f"--backend {choice!r}: not allowed (allowed: {'|'.join(BACKENDS)})")
    if choice == "auto":
        return "faiss" if count >= FAISS_MIN else "exact"
    if choice == "faiss" and count < 64:
        raise BertkitError(f"--backend faiss: {count} vectors are too few to train an IVF index (use exact)")
    return choice
