"""Compressed index vectors (`bertkit index build --vectors float32|int8|binary`): how each precision stores a
shard's (n, D) unit vectors and scores float queries against them.

float32  4·D bytes a vector: the vectors themselves.
int8     D bytes: each vector turned by an orthonormal DCT-II (cosines unchanged), then each of its coordinates
         mapped linearly from its calibrated range [low, high] onto -128..127. The ranges are the 10⁻⁵ and
         1 − 10⁻⁵ quantiles of each coordinate over (a sample of ≤ 100k of) the indexed vectors (below 1,000, widened
         to a normal fit's where that is wider), computed when the index is built and kept by every `index add`,
         which clips a new vector into them, and refuses new vectors more than 1% of whose coordinates it would
         clip (MAX_CLIPPED). Why the turn: a
         sentence encoder's few large-spread dimensions set coarse steps for themselves alone; the DCT spreads
         them over every coordinate, and the quantiles keep one rare value from widening a range. On 1M
         all-MiniLM-L6-v2 vectors recall@10 against exact float search rose from 0.986 (per-dimension minimum /
         maximum, no turn) to 0.990 (benchmarks/index_compression.py). A float query, turned the same way, is
         scored against the dequantized codes directly (FAISS's scalar-quantizer flat index over the codes as they
         are: `int8_flat`), so every candidate is scored by the float query: what rescoring does for a quantized
         query, done for all of them.
         Indexes built before the turn (no "rotation" in their calibration) are read as they were written.
binary   ⌈D / 8⌉ bytes: the sign of each dimension, packed (numpy.packbits order). Candidates come from the Hamming
         distance of the query's signs (FAISS's binary flat index: popcount over packed bits), `rescore` × k of them,
         then are rescored by the float query against their ±1 / √D vectors (the cosine with the sign vector).

Shard files: shard-NNNNN.f32 / .i8 / .b1. A shard is written as float32 first (ShardWriter) and then compressed in
place of it (`compress_shard`: temp → fsync → rename, then the float file removed), so an interrupted build or add
leaves only files index.json does not name, which the next `index add` removes.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from bertkit.errors import BertkitError
from bertkit.run.files import atomic_file, content_digest, fsync_dir

PRECISIONS = ("float32", "int8", "binary")
SUFFIX = {"float32": "f32", "int8": "i8", "binary": "b1"}
# `index build --refine`: a finer copy of each vector kept on disk (memory-mapped, only candidates read) that
# rescores the candidates the codes find; which copies each precision may keep, and their files' suffixes
REFINES = {"int8": ("float32",), "binary": ("int8", "float32")}
REFINE_SUFFIX = {"float32": "r32", "int8": "r8"}
DTYPE = {"float32": np.float32, "int8": np.int8, "binary": np.uint8}
RESCORE = 4  # binary: candidates per result rescored by the float query (search --rescore)
# ... and for a binary index with a --refine copy: on 1M all-MiniLM-L6-v2 vectors, recall@10 0.62 / 0.84 / 0.90 /
# 0.94 at 4 / 16 / 32 / 64 (benchmarks/index_compression.py); 64 candidates a result cost 640 rows of the copy
REFINED_BINARY_RESCORE = 64


def default_rescore(precision: str, refine: str | None) -> int:
    """`search --rescore` when it is not given: 64 for a binary index with a refine copy (the copy can order what
    the signs cannot), else 4."""
    return REFINED_BINARY_RESCORE if precision == "binary" and refine else RESCORE
_BLOCK = 1 << 16  # rows compressed at a time


def row_width(precision: str, dim: int) -> int:
    """Stored values per vector: D (float32, int8) or ⌈D / 8⌉ packed bytes (binary)."""
    return (dim + 7) // 8 if precision == "binary" else dim


def row_bytes(precision: str, dim: int) -> int:
    """Bytes per stored vector."""
    return row_width(precision, dim) * np.dtype(DTYPE[precision]).itemsize


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise BertkitError(f"--vectors {precision!r}: not allowed (allowed: {'|'.join(PRECISIONS)})")
    return precision


# ---------------------------------------------------------------------------------------------------------- int8

ROTATIONS = ("none", "dct")
QUANTILE = 1e-5  # int8 ranges: each coordinate's 10⁻⁵ and 1 − 10⁻⁵ quantiles
_SAMPLE = 100_000  # vectors calibrated on at most (evenly spaced over the index)
# A sample of n vectors spans only about its 1/(n + 1) and n/(n + 1) quantiles, so a small one's ranges are too
# narrow for the vectors an `index add` brings: 2 / (n + 1) of their coordinates would be clipped. Below 1,000
# (0.2%) each range is widened to the normal fit's 10⁻⁵ quantiles, mean ± 4.265 σ, where that is wider (DCT
# coordinates are sums of many: near normal), what a large sample's own quantiles are for such coordinates. On the
# review's SST-2 probe (a 20-step tiny encoder, recall@10 against exact float search over 2,999 sentences), ranges
# from the first 5 / 20 / 100 sentences clipped 2.4% / 0.1% / 0.0% of the rest's coordinates, recall 0.75 / 0.91 /
# 0.90 (unwidened: 38% / 8.8% / 1.7%, recall 0.12 / 0.43 / 0.87; from all 2,999: 0.91)
NORMAL_BELOW, NORMAL_Z = 1000, 4.265


@functools.lru_cache(maxsize=8)
def dct_matrix(dim: int) -> np.ndarray:
    """The orthonormal DCT-II of `dim` points as a (D, D) float32 matrix C (C Cᵀ = I): y = C x turns a vector."""
    k, n = np.arange(dim)[:, None], np.arange(dim)[None, :]
    c = np.sqrt(2.0 / dim) * np.cos(np.pi * (2 * n + 1) * k / (2 * dim))
    c[0] /= np.sqrt(2.0)
    c = c.astype(np.float32)
    c.flags.writeable = False  # cached: no caller may change it
    return c


def rotate(vectors: np.ndarray, calibration: dict | None) -> np.ndarray:
    """(n, D) vectors in the basis an int8 index stores them in: turned by the DCT, or as they are (an index from
    before the turn, or not int8). Queries go through it too: inner products are unchanged."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if (calibration or {}).get("rotation", "none") == "none":
        return vectors
    return vectors @ dct_matrix(vectors.shape[1]).T


def unrotate(values: np.ndarray, calibration: dict | None) -> np.ndarray:
    """`rotate`'s inverse: stored-basis (n, D) values back to the vectors' own basis."""
    if (calibration or {}).get("rotation", "none") == "none":
        return values
    return values @ dct_matrix(values.shape[1])


def calibrate(vectors: np.ndarray) -> dict:
    """int8's rotation and per-coordinate ranges for (n, D) vectors (memory-mapped: at most `_SAMPLE` rows read;
    `sample` records how many, for the message of an `index add` that falls outside them)."""
    rows = np.unique(np.linspace(0, len(vectors) - 1, min(len(vectors), _SAMPLE)).round().astype(np.int64))
    turned = rotate(np.asarray(vectors[rows], dtype=np.float32), {"rotation": "dct"}).astype(np.float64)
    low, high = np.quantile(turned, [QUANTILE, 1 - QUANTILE], axis=0)
    if 1 < len(rows) < NORMAL_BELOW:  # too few to hold their own 10⁻⁵ quantiles: a normal fit's, where wider
        mean, spread = turned.mean(axis=0), NORMAL_Z * turned.std(axis=0, ddof=1)
        low, high = np.minimum(low, mean - spread), np.maximum(high, mean + spread)
    return {"rotation": "dct", "quantile": QUANTILE, "low": [float(x) for x in low], "high": [float(x) for x in high],
            "sample": len(rows)}


# `index add` refuses new vectors that more than this share of whose coordinates fall outside the index's int8
# ranges: clipped, they lose their place (the recall figures above, NORMAL_BELOW; a float32 copy does not win it
# back: from 20 unwidened, 0.43 with it, as the copy only rescores the candidates the clipped codes find)
MAX_CLIPPED = 0.01


def clipped_share(vectors: np.ndarray, calibration: dict) -> float:
    """The share of the (n, D) vectors' coordinates outside the calibrated ranges (by more than half a step): what
    `encode` clips. Read a block at a time (a memory-mapped shard)."""
    outside, total = 0, 0
    for start in range(0, len(vectors), _BLOCK):
        codes = _steps(vectors[start:start + _BLOCK], calibration)  # (n, D) before rounding
        outside += int(((codes < -128.5) | (codes > 127.5)).sum())
        total += codes.size
    return outside / total if total else 0.0


def _scale(calibration: dict) -> tuple[np.ndarray, np.ndarray]:
    """(scale, offset) per coordinate: value = (code + 128) · scale + low. (D,) float32 each."""
    low = np.asarray(calibration["low"], dtype=np.float64)
    high = np.asarray(calibration["high"], dtype=np.float64)
    scale = np.maximum(high - low, 1e-12) / 255.0
    return scale.astype(np.float32), (low + 128 * scale).astype(np.float32)


def check_calibration(calibration: object, dim: int) -> bool:
    """A well-formed int8 calibration of `dim` dimensions (index.json is untrusted input)."""
    if not isinstance(calibration, dict) or calibration.get("rotation", "none") not in ROTATIONS:
        return False
    try:
        low = np.asarray(calibration["low"], dtype=np.float64)
        high = np.asarray(calibration["high"], dtype=np.float64)
    except (KeyError, TypeError, ValueError):
        return False
    return low.shape == high.shape == (dim,) and bool(np.isfinite(low).all() and np.isfinite(high).all()
                                                      and (high >= low).all())


def encode(vectors: np.ndarray, precision: str, calibration: dict | None = None) -> np.ndarray:
    """(n, D) float32 → the stored codes: (n, D) int8 (values clipped into the calibrated range) or (n, ⌈D/8⌉)
    packed sign bits; float32 as it is."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if precision == "float32":
        return vectors
    if precision == "binary":
        return np.packbits(vectors > 0, axis=1)
    return np.clip(np.rint(_steps(vectors, calibration)), -128, 127).astype(np.int8)


def _steps(vectors: np.ndarray, calibration: dict) -> np.ndarray:
    """(n, D) vectors in int8 steps from the middle of their turned ranges, before rounding and clipping."""
    scale, offset = _scale(calibration)
    return (rotate(vectors, calibration) - offset) / scale


def dequantize(codes: np.ndarray, calibration: dict) -> np.ndarray:
    """int8 codes → (n, D) float32 in the stored (turned) basis: what FAISS's indexes hold and score turned queries
    against."""
    scale, offset = _scale(calibration)
    return np.asarray(codes, dtype=np.float32) * scale + offset


def decode(codes: np.ndarray, precision: str, dim: int, calibration: dict | None = None) -> np.ndarray:
    """Stored codes → (n, D) float32 in the vectors' own basis: dequantized int8 turned back, or ±1 / √D sign
    vectors (unit length) for binary."""
    if precision == "float32":
        return np.asarray(codes, dtype=np.float32)
    if precision == "binary":
        signs = np.unpackbits(np.asarray(codes), axis=1, count=dim).astype(np.float32)
        return (2 * signs - 1) / np.float32(np.sqrt(dim))
    return unrotate(dequantize(codes, calibration), calibration)


def int8_flat(shards: list[np.ndarray], calibration: dict, dim: int, faiss):
    """FAISS's scalar-quantizer flat index (QT_8bit, inner product) holding the shards' int8 codes as they are: it
    scores a float query (turned: `rotate`) against the dequantized codes with SIMD over the bytes (no float copy of
    the vectors). Its
    decoding is vmin + (code + 0.5) · vdiff / 255 over codes 0..255; with vmin = low − half a step it is ours."""
    index = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT)
    _set_ranges(index.sq, calibration)
    index.is_trained = True
    for shard in shards:
        for start in range(0, len(shard), _BLOCK):
            codes = np.asarray(shard[start:start + _BLOCK], dtype=np.int16) + 128  # int8 → FAISS's 0..255
            index.add_sa_codes(np.ascontiguousarray(codes, dtype=np.uint8))
    return index


# -------------------------------------------------------------------------------------------------------- binary

def binary_flat(shards: list[np.ndarray], dim: int, faiss):
    """FAISS's exact binary index (popcount Hamming distance) over every shard's packed signs, in row order."""
    index = faiss.IndexBinaryFlat(row_width("binary", dim) * 8)
    for shard in shards:
        for start in range(0, len(shard), _BLOCK):
            index.add(np.ascontiguousarray(shard[start:start + _BLOCK], dtype=np.uint8))
    return index


def hamming_candidates(flat, queries: np.ndarray, count: int) -> np.ndarray:
    """The `count` rows nearest each query by the Hamming distance of their signs: (Q, count) global rows."""
    _, rows = searched(flat, np.ascontiguousarray(encode(queries, "binary")), count)
    return rows  # (Q, count)


def searched(index, queries: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """`index.search(queries, count)`, complete: where an IVF index's probed lists held fewer than `count` vectors
    for a query (FAISS pads its rows with -1), that query is searched again probing twice the lists, until they
    hold enough or every list is probed, so each query gets min(count, vectors) results. The index's nprobe is
    left as it was."""
    scores, rows = index.search(queries, count)
    nlist, nprobe = getattr(index, "nlist", 0), getattr(index, "nprobe", 0)
    short = np.flatnonzero((rows < 0).any(axis=1))
    try:
        while len(short) and nlist and index.nprobe < nlist:
            index.nprobe = min(2 * index.nprobe, nlist)
            scores[short], rows[short] = index.search(np.ascontiguousarray(queries[short]), count)
            short = short[(rows[short] < 0).any(axis=1)]
    finally:
        if nlist:
            index.nprobe = nprobe
    return scores, rows


TIE_DECIMALS = 6  # scores equal to 1e-6 are one score for which rows come back (below: matrix products' noise)


def in_row_order(scores: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Q, k) hits best first, equal scores (to TIE_DECIMALS) in row order, missing hits (row -1) last: the order
    exact search gives, where FAISS's int8 search returned tied rows in any order (d99, d63, d42 for the float
    index's d42, d63, d99; a review, 2026-11-28)."""
    key = np.where(rows < 0, np.inf, -np.round(scores, TIE_DECIMALS))
    order = np.lexsort((rows, key), axis=1)
    return np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)


def rescore(shards: list[np.ndarray], queries: np.ndarray, rows: np.ndarray, k: int, precision: str, dim: int,
            calibration: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The best k of each query's candidate rows (-1: none) by the float query against their decoded vectors;
    scores (Q, k), rows (Q, k), best first."""
    starts = np.cumsum([0] + [len(s) for s in shards])
    if precision == "int8":  # the queries turned once into the codes' basis (same inner products; no per-query
        queries = rotate(queries, calibration)  # matrix product to turn each candidate back)
    scores_out = np.full((len(queries), k), -np.inf, dtype=np.float32)
    rows_out = np.full((len(queries), k), -1, dtype=np.int64)
    for q, candidates in enumerate(rows):
        candidates = candidates[candidates >= 0]
        if not len(candidates):
            continue
        shard_of = np.searchsorted(starts, candidates, side="right") - 1
        codes = np.stack([np.asarray(shards[s][r - starts[s]]) for s, r in zip(shard_of, candidates)])
        values = dequantize(codes, calibration) if precision == "int8" else decode(codes, precision, dim)
        scores = values @ queries[q]  # (candidates,)
        top = np.lexsort((candidates, -np.round(scores, TIE_DECIMALS)))[:k]  # equal scores in row order
        scores_out[q, :len(top)], rows_out[q, :len(top)] = scores[top], candidates[top]
    return scores_out, rows_out


# ---------------------------------------------------------------------------------------------------------- IVF

def build_ivf(shards: list[np.ndarray], precision: str, dim: int, calibration: dict | None, nlist: int, faiss,
              seed: int = 0):
    """FAISS IVF over compressed shards (index.py's build_faiss for float32), trained on a sample of ≤ 64 vectors a
    list and holding every row in row order. int8: IndexIVFScalarQuantizer (QT_8bit, inner product, absolute
    vectors) decoding with the index's own ranges, so it scores as the flat path does; binary: IndexBinaryIVF over
    the packed signs (Hamming), whose candidates are rescored like the flat ones."""
    count = sum(len(s) for s in shards)
    nlist = max(1, min(nlist, count // 4))  # k-means needs points per centroid
    rows = np.sort(np.random.default_rng(seed).choice(count, min(count, 64 * nlist), replace=False))
    sample = gather_rows(shards, rows)
    if precision == "binary":
        bits = row_width("binary", dim) * 8
        index = faiss.IndexBinaryIVF(faiss.IndexBinaryFlat(bits), bits, nlist)
        index.cp.seed, index.cp.niter = seed, 10
        index.train(sample)
    else:
        index = faiss.IndexIVFScalarQuantizer(faiss.IndexFlatIP(dim), dim, nlist, faiss.ScalarQuantizer.QT_8bit,
                                              faiss.METRIC_INNER_PRODUCT, False)  # by_residual False: our ranges
        index.cp.seed, index.cp.niter = seed, 10
        index.train(dequantize(sample, calibration))  # the turned basis, as the codes are
        _set_ranges(index.sq, calibration)
    for shard in shards:
        add_ivf(index, shard, precision, dim, calibration)
    return index


def add_ivf(index, codes: np.ndarray, precision: str, dim: int, calibration: dict | None) -> None:
    """Append a shard's codes to a compressed IVF index a block at a time (int8: their decoded vectors, which the
    index encodes back to the same codes)."""
    for start in range(0, len(codes), _BLOCK):
        block = np.asarray(codes[start:start + _BLOCK])
        index.add(np.ascontiguousarray(block if precision == "binary" else dequantize(block, calibration)))


def _set_ranges(quantizer, calibration: dict) -> None:
    """A FAISS QT_8bit scalar quantizer decoding as bertkit's int8 does (see int8_flat)."""
    import faiss

    low = np.asarray(calibration["low"], dtype=np.float32)
    vdiff = np.maximum(np.asarray(calibration["high"], dtype=np.float32) - low, np.float32(1e-12))
    faiss.copy_array_to_vector(np.concatenate([low - 0.5 * vdiff / 255, vdiff]).astype(np.float32), quantizer.trained)


def gather_rows(shards: list[np.ndarray], rows: np.ndarray) -> np.ndarray:
    """Rows (sorted global indices) of memory-mapped shards, as stored."""
    out, base = [], 0
    for shard in shards:
        local = rows[(rows >= base) & (rows < base + len(shard))] - base
        if len(local):
            out.append(np.asarray(shard[local]))
        base += len(shard)
    return np.ascontiguousarray(np.concatenate(out))


# ------------------------------------------------------------------------------------------------------- writing

def compress_shard(directory: Path, shard: dict, dim: int, precision: str, calibration: dict | None,
                   refine: str | None = None) -> dict:
    """Replace a written float32 shard's vectors by their `precision` codes (a new file under the shard's number,
    temp → fsync → rename; the float file removed after, or kept as the `refine` float32 copy under its own name,
    or encoded as the int8 one); the shard's new index.json entry."""
    if precision == "float32":
        return shard
    directory = Path(directory)
    source = directory / shard["vectors"]
    stem = source.name.rsplit(".", 1)[0]
    vectors = np.memmap(source, dtype=np.float32, mode="r", shape=(shard["count"], dim)) if shard["count"] else \
        np.zeros((0, dim), np.float32)
    written = {"vectors": (stem + "." + SUFFIX[precision], precision)}
    if refine == "int8":
        written["refine"] = (stem + "." + REFINE_SUFFIX["int8"], "int8")
    for name, codec in written.values():
        with atomic_file(directory / name) as tmp, tmp.open("wb") as fh:  # temp → fsync → rename
            for start in range(0, len(vectors), _BLOCK):
                fh.write(np.ascontiguousarray(encode(vectors[start:start + _BLOCK], codec, calibration)).tobytes())
    del vectors
    if refine == "float32":  # the float file is the copy: renamed, not rewritten
        written["refine"] = (stem + "." + REFINE_SUFFIX["float32"], "float32")
        source.rename(directory / written["refine"][0])
    else:
        source.unlink()
    fsync_dir(directory)
    digests = {**(shard.get("digests") or {}), **{key: content_digest(directory / name)
                                                   for key, (name, _) in written.items()}}
    return {**shard, **{key: name for key, (name, _) in written.items()}, "digests": digests}
