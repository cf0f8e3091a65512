"""`bertkit index build|add|info`, `bertkit search` and `bertkit similarity`: semantic search over a corpus.

One module serves the five commands, so each has its own entry point, named after the command, with its own
Job / Result pair: `build` (IndexBuildJob), `add` (IndexAddJob), `search` (SearchJob), `info` (IndexInfoJob) and
`similarity` (SimilarityJob).

An index remembers the model that embedded it (path and identity, see `embedding.model_identity`); appends and
queries are embedded by that same model, and a different one is refused, so a query is never compared with vectors
from another embedding space.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from bertkit.deploy.manifest import is_onnx_export
from bertkit.embedding import SentenceEncoder, normalize_rows, truncation_warning
from bertkit.errors import BertkitError
from bertkit.index import (BACKENDS, FORMAT, INDEX_FILE, VERSION, Hit, ShardWriter, VectorIndex, add_to_faiss,
                           build_faiss, index_lock, ivf_params, next_number, read_meta, remove_leftovers,
                           resolve_backend, shard_vectors, write_faiss, write_meta)
from bertkit.index_codec import (MAX_CLIPPED, REFINE_SUFFIX, REFINES, SUFFIX, calibrate, check_precision,
                                 clipped_share, compress_shard, row_bytes)
from bertkit.index_files import version_of
from bertkit.paths import one_is_one, path_list
from bertkit.run.files import atomic_dir, content_digest, disk_errors, fsync_dir
from bertkit.run.lock import locked
from bertkit.run.outputs import INDEX, claim, refuse_nested
from bertkit.text.corpus import find_files
from bertkit.text.records import chunks, record_id, scan


def _fill(writer: ShardWriter, encoder: SentenceEncoder, files: list[Path], text_field: str, id_field: str | None,
          rows: int, chunk_size: int, progress: bool, console: Console) -> None:
    """Embed the corpus chunk by chunk into a shard (normalised vectors: inner product = cosine); exactly the
    `rows` texts the scan counted, or an error."""
    bar = Progress(TextColumn("[bold]index"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=console, disable=not progress)
    with bar:
        task = bar.add_task("index", total=rows)
        for chunk in chunks(files, text_field, id_field, False, chunk_size):
            texts = [record.text for _, _, record in chunk]
            vectors = normalize_rows(encoder.encode(texts, on_batch=lambda n: bar.advance(task, n)))
            writer.add(vectors, [record_id(path, record) for _, path, record in chunk], texts)
    if writer.count != rows:
        raise BertkitError(f"the corpus changed while being indexed ({rows:,} texts counted, {writer.count:,} read)")


def _report_skips(console: Console, found, encoder: SentenceEncoder) -> None:
    if found.empty:
        console.print(f"[yellow]skipped {found.empty:,} empty line{'s' if found.empty != 1 else ''}")
    truncation_warning(console, encoder)


def _model_entry(encoder: SentenceEncoder) -> dict:
    """index.json's record of the model: where, which (identity), how it pools, and the precision it embedded in
    (`index add` and `search` embed in it too unless told otherwise: an fp32 index's added vectors were bf16 where
    auto picks bf16, and a float32 refine copy's scores drifted from the true cosines)."""
    return {"path": str(encoder.run.resolve()), "identity": encoder.identity, "pooling": encoder.sentence.pooling,
            "normalize": encoder.sentence.normalize, "max_length": encoder.max_length,
            "precision": encoder.precision}


@dataclass(frozen=True)
class IndexBuildJob:
    """What `bertkit index build` is asked: the encoder run, the corpus files or directories, the index directory
    to write, how to read the corpus, and the search backend (with its FAISS settings)."""

    model: Path
    corpus: tuple[str, ...]
    out: Path
    text_field: str = "text"
    id_field: str | None = None
    backend: str = "auto"
    nlist: int | None = None
    nprobe: int | None = None
    batch_size: int = 64
    chunk_size: int = 8192
    overwrite: bool = False
    precision: str = "auto"
    progress: bool = True
    vectors: str = "float32"  # how the index stores them: float32 | int8 | binary (index_codec)
    refine: str | None = None  # a finer copy on disk that rescores candidates: float32 | int8 (index_codec.REFINES)

    def __post_init__(self) -> None:
        object.__setattr__(self, "corpus", path_list(self.corpus))  # one file given as a str is one file


@dataclass(frozen=True)
class IndexBuildResult:
    """The index written: its vectors, the backend chosen (exact or faiss), and the texts skipped as empty and
    truncated."""

    out: Path
    count: int
    backend: str
    empty: int
    truncated: int


def build(job: IndexBuildJob, console: Console | None = None) -> IndexBuildResult:
    """Embed every non-empty text of `job.corpus` with `job.model` into a new index directory `job.out`
    (atomically), holding the path's lock throughout (a run or index being written there is refused)."""
    refuse_nested(job.out)  # before the lock, whose file would be created inside the run
    with locked(job.out, "output"):
        return _build(job, console or Console(stderr=True))


def _build(job: IndexBuildJob, console: Console) -> IndexBuildResult:
    corpus, text_field, id_field, backend = job.corpus, job.text_field, job.id_field, job.backend
    nlist, nprobe, overwrite = job.nlist, job.nprobe, job.overwrite
    out = Path(job.out)
    hint = "append with `bertkit index add`, or pass --overwrite" if (out / "index.json").is_file() else \
        "choose another --out or pass --overwrite"
    claim(out, INDEX, overwrite, inputs=(*corpus, job.model), hint=hint)
    if backend not in BACKENDS:
        raise BertkitError(f"--backend {backend!r}: not allowed (allowed: {'|'.join(BACKENDS)})")
    for key, value in (("--nlist", nlist), ("--nprobe", nprobe)):
        if value is not None and value < 1:
            raise BertkitError(f"{key}: must be >= 1, got {value}")
        if value is not None and backend == "exact":
            raise BertkitError(f"{key}: only for a FAISS index (--backend faiss or auto), not --backend exact")
    vectors = check_precision(job.vectors)
    if job.refine is not None and job.refine not in REFINES.get(vectors, ()):
        allowed = "|".join(REFINES.get(vectors, ())) or "none: they are the full vectors already"
        raise BertkitError(f"--refine {job.refine!r}: not for --vectors {vectors} (allowed: {allowed})")
    files = find_files(corpus)
    encoder = SentenceEncoder(job.model, batch_size=job.batch_size, precision=job.precision)
    found = scan(files, text_field, id_field, keep_empty=False, check_ids=True)
    if found.rows == 0:
        raise BertkitError(f"{', '.join(corpus)}: no texts to index" + (f" ({found.empty:,} empty lines)"
                                                                      if found.empty else ""))
    chosen = resolve_backend(backend, found.rows)
    if chosen == "exact" and (nlist is not None or nprobe is not None):
        console.print(f"[yellow]warning: --nlist / --nprobe do nothing here: {found.rows:,} vectors get exact search "
                      "(--backend faiss builds a FAISS index at any size)")
    # replacing an index: hold its lock (an index in use is refused), so an `index add` committing meanwhile is
    # never silently thrown away
    held = index_lock(out, wait=False) if (Path(out) / INDEX_FILE).is_file() else contextlib.nullcontext()
    with held, atomic_dir(out, overwrite=overwrite) as tmp:
        writer = ShardWriter(tmp, 0, encoder.dim)
        _fill(writer, encoder, files, text_field, id_field, found.rows, job.chunk_size, job.progress, console)
        shard = writer.close()
        meta = {"format": FORMAT, "version": VERSION, "model": _model_entry(encoder), "dim": encoder.dim,
                "count": shard["count"], "shards": [shard], "backend": chosen, "backend_choice": backend}
        if vectors != "float32":  # calibrated on the indexed vectors, then the float shard replaced by its codes
            meta["vectors"] = vectors
            if job.refine:
                meta["refine"] = job.refine
            if "int8" in (vectors, job.refine):
                meta["calibration"] = calibrate(shard_vectors(tmp, shard, encoder.dim))
            meta["shards"] = [compress_shard(tmp, shard, encoder.dim, vectors, meta.get("calibration"), job.refine)]
            meta["version"] = version_of(meta)  # 2 where older bertkits must not read it
        if chosen == "faiss":
            meta["faiss"] = _new_faiss(tmp, meta, nlist, nprobe, 0, console)
        write_meta(tmp, meta)
    _report_skips(console, found, encoder)
    refined = "" if not job.refine else (f"; {'an' if job.refine == 'int8' else 'a'} {job.refine} copy of "
                                         f"{row_bytes(job.refine, encoder.dim):,} bytes each on disk, for rescoring")
    console.print(f"wrote {out}: {meta['count']:,} × {encoder.dim} {vectors} vectors "
                  f"({row_bytes(vectors, encoder.dim):,} bytes each{refined}), {chosen} search")
    return IndexBuildResult(out=out, count=meta["count"], backend=chosen, empty=found.empty,
                            truncated=encoder.truncated)


def _new_faiss(path: Path, meta: dict, nlist: int | None, nprobe: int | None, number: int, console: Console) -> dict:
    """Train and write an IVF index over every row of the index at `path` (its shards as listed in `meta`)."""
    count = meta["count"]
    default_nlist, default_nprobe = ivf_params(count)
    precision = meta.get("vectors", "float32")
    shards = [shard_vectors(path, s, meta["dim"], precision) for s in meta["shards"]]
    console.print(f"training a FAISS IVF index ({nlist or default_nlist:,} lists) on {count:,} {precision} vectors")
    index = build_faiss(shards, meta["dim"], nlist or default_nlist, precision=precision,
                        calibration=meta.get("calibration"))
    file = write_faiss(index, path, number)
    return {"file": file, "digest": content_digest(path / file), "nlist": int(index.nlist),
            "nprobe": int(nprobe or max(1, math.ceil(default_nprobe * index.nlist / default_nlist)))}


def _encoder_for(index: VectorIndex, model: Path | None, batch_size: int = 64,
                 precision: str | None = None) -> SentenceEncoder:
    """The index's own model (or `model`, which must embed identically), at `precision` (None: the one the index
    was built in, where index.json records it; else auto)."""
    recorded = Path(index.model.get("path") or "<not recorded>")
    if model is None and not recorded.is_dir():
        raise BertkitError(f"{index.path}: its model {recorded} is gone; pass --model with the same model")
    if precision is None:  # an ONNX export computes at its own precision: auto
        built = index.model.get("precision")
        precision = built if built in ("fp32", "bf16") and not is_onnx_export(model or recorded) else "auto"
    encoder = SentenceEncoder(model or recorded, batch_size=batch_size, precision=precision)
    if encoder.identity != index.model["identity"]:
        raise BertkitError(f"{model or recorded}: not the model {index.path} was built with ({recorded}, identity "
                           f"{index.model['identity']}; this one is {encoder.identity}): its embeddings are not "
                           "comparable; use that model or rebuild the index")
    return encoder


@dataclass(frozen=True)
class IndexAddJob:
    """What `bertkit index add` is asked: the index directory, the corpus files or directories to append, how to
    read them, and the index's model if it moved (None: the one index.json records)."""

    index: Path
    corpus: tuple[str, ...]
    model: Path | None = None
    text_field: str = "text"
    id_field: str | None = None
    batch_size: int = 64
    chunk_size: int = 8192
    progress: bool = True
    precision: str | None = None  # None: the precision the index was built in (index.json), else auto

    def __post_init__(self) -> None:
        object.__setattr__(self, "corpus", path_list(self.corpus))  # one file given as a str is one file


@dataclass(frozen=True)
class IndexAddResult:
    """The index appended to: the vectors added, its count after, its backend (an append may switch it to faiss),
    and the texts skipped as empty and truncated."""

    out: Path
    added: int
    count: int
    backend: str
    empty: int
    truncated: int


def add(job: IndexAddJob, console: Console | None = None) -> IndexAddResult:
    """Append a corpus to an index: new shard files, then one rename of index.json (the previous index stays whole
    if anything fails, a full disk included). Concurrent appends to one index wait for each other; what an
    interrupted one left behind is removed first."""
    console = console or Console(stderr=True)
    path, corpus, text_field, id_field = job.index, job.corpus, job.text_field, job.id_field
    VectorIndex(path)  # a clear error before taking a lock in a directory that is not an index
    with index_lock(path):
        index = VectorIndex(path)
        gone = remove_leftovers(index.path, index.meta)
        if gone:
            console.print(f"removed {gone} file(s) an interrupted `index add` left in {path}")
        encoder = _encoder_for(index, job.model, job.batch_size, job.precision)
        files = find_files(corpus)
        found = scan(files, text_field, id_field, keep_empty=False, check_ids=True, existing=index.ids,
                     existing_texts=lambda rows: [doc["text"] for doc in index.docs(rows)])  # a respelled file
        if found.rows == 0:
            raise BertkitError(f"{', '.join(corpus)}: no texts to add")
        meta = dict(index.meta)
        number = next_number(meta)
        with disk_errors(path):  # a full disk: one line; the previous index stays as it was
            writer = ShardWriter(index.path, number, index.dim)
            old_faiss = meta.get("faiss", {}).get("file")
            # every name this append may write under its number, compressed and refine copies included: a failure
            # before the commit removes whichever exist (the largest, a float32 copy, must not wait for the next add)
            stem = writer.names["docs"].rsplit(".", 1)[0]
            new_files = list(writer.names.values()) + [f"{stem}.{suffix}" for suffix in (*SUFFIX.values(),
                                                                                        *REFINE_SUFFIX.values())
                                                       if f"{stem}.{suffix}" != writer.names["vectors"]]
            try:
                _fill(writer, encoder, files, text_field, id_field, found.rows, job.chunk_size, job.progress,
                      console)
                written = writer.close()
                if index.calibration is not None:
                    _refuse_clipped(shard_vectors(index.path, written, index.dim), index)
                shard = compress_shard(index.path, written, index.dim, index.precision, index.calibration,
                                       index.refine)
                meta["shards"] = meta["shards"] + [shard]
                meta["count"] = meta["count"] + shard["count"]
                if meta["backend"] == "faiss":
                    faiss_index = index.faiss_index()
                    add_to_faiss(faiss_index, shard_vectors(index.path, shard, index.dim, index.precision),
                                 index.precision, index.calibration)
                    file = write_faiss(faiss_index, index.path, number)
                    meta["faiss"] = {**meta["faiss"], "file": file, "digest": content_digest(index.path / file)}
                    new_files.append(meta["faiss"]["file"])
                elif resolve_backend(meta.get("backend_choice", "exact"), meta["count"]) == "faiss":
                    meta["backend"] = "faiss"
                    meta["faiss"] = _new_faiss(index.path, meta, None, None, number, console)
                    new_files.append(meta["faiss"]["file"])
                write_meta(index.path, meta)  # the commit
            except BaseException:
                if not _committed(index.path, writer.names["docs"]):  # else only the final fsync failed
                    writer.discard()
                    for name in new_files:
                        (index.path / name).unlink(missing_ok=True)
                raise
        if old_faiss and old_faiss != meta.get("faiss", {}).get("file"):
            # read_meta checked the name (ivf-NNNNN.faiss in this directory); a crash before this unlink leaves a
            # file index.json no longer names, which the next append removes
            (index.path / old_faiss).unlink(missing_ok=True)
            fsync_dir(index.path)
    _report_skips(console, found, encoder)
    console.print(f"added {shard['count']:,} vector{'s' if shard['count'] != 1 else ''} to {path}: "
                  f"{meta['count']:,} in all, {meta['backend']} search")
    return IndexAddResult(out=Path(path), added=shard["count"], count=meta["count"], backend=meta["backend"],
                          empty=found.empty, truncated=encoder.truncated)


def _refuse_clipped(vectors: np.ndarray, index: VectorIndex) -> None:
    """New vectors that fall outside an int8 index's calibrated ranges (more than MAX_CLIPPED of their coordinates)
    are refused: clipped into them, their codes lose precision and they can lose their place in the ranking, a
    float32 copy's too (index_codec). A heuristic: how much a share costs depends on the texts around them."""
    share = clipped_share(vectors, index.calibration)
    if share > MAX_CLIPPED:
        sample = index.calibration.get("sample")
        sampled = isinstance(sample, int) and not isinstance(sample, bool) and sample > 0  # index.json is untrusted
        built = f"from {sample:,} of its vectors" if sampled else "when it was built"
        raise BertkitError(f"{index.path}: {share:.1%} of the new vectors' coordinates fall outside the int8 ranges "
                           f"calibrated {built} (at most {MAX_CLIPPED:.0%}): clipped into them, their codes lose "
                           "precision and can lose their place in the ranking (numbers added to an SST-2 index, "
                           "4.4% clipped: recall@10 0.79 against 0.92); nothing added; build the index again over "
                           "every file (`bertkit index build --overwrite`), whose ranges then fit them all")


def _committed(path: Path, docs: str) -> bool:
    """Whether index.json on disk already names the new shard (write_meta renamed it, then failed), by its
    documents file: the one name compression never changes (its vectors may be .i8 / .b1 by then)."""
    try:
        return any(s["docs"] == docs for s in read_meta(path)["shards"])
    except BertkitError:
        return False


@dataclass(frozen=True)
class SearchJob:
    """What `bertkit search` is asked: the index directory, the query texts, results per query, the index's model
    if it moved, exact or FAISS search (None: the index's backend) and its lists probed, and whether a query
    longer than the model's max_length is cut (else refused)."""

    index: Path
    queries: tuple[str, ...]
    k: int = 5
    model: Path | None = None
    exact: bool | None = None
    nprobe: int | None = None
    truncate: bool = False
    precision: str | None = None  # None: the precision the index was built in (index.json), else auto
    rescore: int | None = None  # binary vectors or a refine copy: candidates per result rescored by the float
    # query (None: the index's default, index_codec.default_rescore: 4, or 64 for binary with a refine copy)

    def __post_init__(self) -> None:
        one_is_one(self, "queries")  # one given as a str is one item


@dataclass(frozen=True)
class SearchResult:
    """The queries as given, in order, and for each its k nearest documents, most similar first."""

    queries: list[str]
    hits: list[list[Hit]]


def search(job: SearchJob, console: Console | None = None) -> SearchResult:
    """The k nearest documents of each query (cosine similarity), embedded by the index's own model."""
    console = console or Console(stderr=True)
    k, nprobe, truncate = job.k, job.nprobe, job.truncate
    if k < 1:
        raise BertkitError(f"-k: must be >= 1, got {k}")
    if nprobe is not None and nprobe < 1:
        raise BertkitError(f"--nprobe: must be >= 1, got {nprobe}")
    if job.rescore is not None and job.rescore < 1:
        raise BertkitError(f"--rescore: must be >= 1, got {job.rescore}")
    queries = [q.strip() for q in job.queries]
    if not queries or any(not q for q in queries):
        raise BertkitError("an empty query: give the text to search for")
    index = VectorIndex(job.index)
    if nprobe is not None and (index.backend == "exact" or job.exact):
        console.print(f"[yellow]warning: --nprobe {nprobe} does nothing here: "
                      + ("--exact scores every vector" if job.exact else f"{job.index} is an exact index"))
    encoder = _encoder_for(index, job.model, precision=job.precision)
    encoded = encoder.encoder.texts(queries)  # tokenised once: checked, then embedded
    for query, enc in zip(queries, encoded):
        if enc.truncated and not truncate:
            raise BertkitError(f"the query {query[:40]!r}… is longer than the model's {encoder.max_length} tokens: "
                               f"shorten it, or pass --truncate to search with its first {encoder.max_length}")
    vectors = encoder.embed_encoded(encoded, normalize=True)
    if job.rescore is not None and index.precision != "binary" and not index.refine:
        console.print(f"[yellow]warning: --rescore does nothing here: {index.precision} vectors are scored by the "
                      "float query already")
    scores, rows = index.search(vectors, k, exact=job.exact, nprobe=nprobe, rescore=job.rescore)
    return SearchResult(list(job.queries), index.hits(scores, rows))


@dataclass(frozen=True)
class IndexInfoJob:
    """What `bertkit index info` is asked: the index directory."""

    index: Path


@dataclass(frozen=True)
class IndexInfoResult:
    """What an index holds: vectors, dimension, backend, shard files, the model entry index.json records (path,
    identity, pooling, normalize, max_length; as written by the bertkit that built it), and the FAISS settings
    (file, nlist, nprobe) of a faiss index (None for an exact one)."""

    path: Path
    count: int
    dim: int
    backend: str
    shards: int
    model: dict[str, Any]
    faiss: dict[str, Any] | None = None
    vectors: str = "float32"  # how they are stored: float32 | int8 | binary
    bytes_per_vector: int = 0  # of the stored vectors (a FAISS file, if any, holds its own copy)
    refine: str | None = None  # the finer copy on disk that rescores candidates (index build --refine), if any
    refine_bytes_per_vector: int = 0  # its bytes per vector: on disk, read only for candidates


def info(job: IndexInfoJob) -> IndexInfoResult:
    """What an index holds (checks every file)."""
    index = VectorIndex(job.index)
    return IndexInfoResult(path=Path(job.index), count=index.count, dim=index.dim, backend=index.backend,
                           shards=len(index.shards), model=index.model,
                           faiss=index.meta["faiss"] if index.backend == "faiss" else None, vectors=index.precision,
                           bytes_per_vector=row_bytes(index.precision, index.dim), refine=index.refine,
                           refine_bytes_per_vector=row_bytes(index.refine, index.dim) if index.refine else 0)


@dataclass(frozen=True)
class SimilarityJob:
    """What `bertkit similarity` is asked: an encoder run, two texts, and the precision to embed them in."""

    model: Path
    a: str
    b: str
    precision: str = "auto"


@dataclass(frozen=True)
class SimilarityResult:
    """The cosine similarity of the two texts' embeddings."""

    cosine: float


def similarity(job: SimilarityJob, console: Console | None = None) -> SimilarityResult:
    """Cosine similarity of two texts' embeddings (a text longer than the model's window is cut, and said)."""
    a, b = job.a, job.b
    if not a.strip() or not b.strip():
        raise BertkitError("similarity needs two non-empty texts")
    encoder = SentenceEncoder(job.model, precision=job.precision)
    cosine = float(encoder.similarity([a], [b])[0])
    truncation_warning(console or Console(stderr=True), encoder)
    return SimilarityResult(cosine)


__all__ = ["IndexAddJob", "IndexAddResult", "IndexBuildJob", "IndexBuildResult", "IndexInfoJob", "IndexInfoResult",
           "SearchJob", "SearchResult", "SimilarityJob", "SimilarityResult", "add", "build", "info", "read_meta",
           "search", "similarity"]
