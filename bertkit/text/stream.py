"""Streaming corpora (`data.streaming = true`): documents read through `datasets`' streaming API, tokenised and
packed on the fly, never written to the disk cache.

The source is the corpus's local files (a builder per format: text, json, csv, parquet) or a Hub dataset
(`hf:NAME` or `hf:NAME@SPLIT`, for users with internet). Documents are stripped and empty ones skipped, the ones
text/packing.held_out picks are validation (data.validation_fraction of them, spread evenly), and the training
documents are packed into blocks exactly as the cached path packs them (text/packing.py), in the same order — the
same blocks for the same corpus (tested), except
where a .txt line holds a lone carriage return: the text builder reads in text mode, which ends a line there, and
the cached path does not.

Batches: blocks are served in windows of `data.shuffle_window` global batches, each window shuffled with a seed of
its own (seed, window), so a step's batch is still a pure function of (seed, step) and the corpus. Reading the
stream records where each window starts (the source's `state_dict`, the document count and the tokens carried
into the window's first block); a checkpoint stores that point for its step, and a resume seeks the source there
and re-reads at most that window — never the stream from its start (datasets re-reads at most the current file).
When the stream ends it starts again (the next epoch), its last partial block dropped like the cached path's.
"""

from __future__ import annotations

import functools
import itertools
import gzip
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from datasets import Dataset
from pandas.errors import ParserError as _ParserError  # datasets' csv builder reads with pandas (its dependency)
from tokenizers import Tokenizer

from bertkit.errors import BertkitError
from bertkit.text.corpus import document_text, file_format, find_files, json_kind, refuse_non_text
from bertkit.text.packing import Packed, cut_blocks, held_out, tokenize_documents, validation_share
from bertkit.text.tokenizer import special_ids

HUB_PREFIX = "hf:"
_DOCS = 256  # documents tokenised together (a resume point sits before each such batch)
# datasets' builder per file format, read as text/corpus.py reads it (TSV without quote processing: QUOTE_NONE;
# no missing values: pandas would read a document "NA", "null" or "nan" as none, and the stream would skip it)
_TABLE = {"keep_default_na": False, "na_filter": False}
# JSON lines through the text builder, each parsed here as the packed path parses it: datasets' json builder fixes a
# schema from the first 10 MB, and a field beside the text that appeared or changed type later was a traceback
READER = "jsonl-lines"  # Point.reader
_BUILDERS = {"text": ("text", {}), "jsonl": ("text", {}), "csv": ("csv", _TABLE),
             "tsv": ("csv", {"sep": "\t", "quoting": 3, **_TABLE}), "parquet": ("parquet", {})}


def open_source(corpus: tuple[str, ...] | list[str]):
    """The corpus as a `datasets.IterableDataset` (streaming): one Hub dataset, or local files of one format."""
    import datasets

    hub = [c for c in corpus if str(c).startswith(HUB_PREFIX)]
    if hub:
        if len(corpus) != 1:
            raise BertkitError(f"data.corpus: a Hub dataset ({hub[0]}) streams alone; give it as the only entry")
        name, _, split = str(hub[0])[len(HUB_PREFIX):].partition("@")
        try:
            return datasets.load_dataset(name, split=split or "train", streaming=True)
        except Exception as exc:  # the Hub's errors are many; each is one line to the user
            raise BertkitError(f"data.corpus: cannot stream {hub[0]} ({str(exc).splitlines()[0][:200]})") from None
    files = find_files(corpus)
    formats = {file_format(f) for f in files}
    if len(formats) != 1:
        raise BertkitError(f"data.corpus: a streamed corpus is files of one format, found {', '.join(sorted(formats))}")
    for path in files:
        if file_format(path) != "parquet":  # a UTF-16 file read as UTF-8 is text with a NUL between characters
            refuse_non_text(path)
    builder, options = _BUILDERS[formats.pop()]
    try:  # datasets reads the first file's first chunk here (its schema)
        return datasets.load_dataset(builder, data_files=[str(f) for f in files], split="train", streaming=True,
                                     **options)
    except _READ_ERRORS as exc:
        raise unreadable(files, exc) from None


# What a truncated or damaged file raises while it is read: gzip's EOFError ("Compressed file ended before the
# end-of-stream marker was reached"; click would print it as a bare "Aborted."), BadGzipFile (an OSError), zlib's
# error (a damaged deflate stream or CRC)
_READ_ERRORS = (OSError, EOFError, zlib.error)


def unreadable(files: list[Path], exc: BaseException) -> BertkitError:
    """A read error of datasets' streaming readers as one line naming the file and where it stops: they do not say
    which file they were reading, so the files are read again, in order, up to the first that fails (only after an
    error, so a clean stream pays nothing)."""
    for path in files:
        opener = gzip.open if path.suffix.lower() == ".gz" else open
        done, line, line_start = 0, 1, 0  # bytes read; the line being read and its first byte (as corpus.py says)
        try:
            with opener(path, "rb") as fh:
                while chunk := fh.read1(1 << 20):  # read1: the bytes before the damage still come back
                    if (last := chunk.rfind(b"\n")) >= 0:
                        line, line_start = line + chunk.count(b"\n"), done + last + 1
                    done += len(chunk)
        except _READ_ERRORS as error:
            return BertkitError(f"{path}: unreadable at byte {line_start}, line {line} ({error}); repair or replace "
                                "the file, or leave it out of data.corpus")
    where = ", ".join(map(str, files[:2])) + (", …" if len(files) > 2 else "")
    return BertkitError(f"data.corpus: {where}: unreadable ({exc})")


def too_wide(corpus) -> BertkitError:
    """The error for a streamed CSV / TSV whose rows hold more fields than its header."""
    return BertkitError(f"data.corpus: {', '.join(map(str, corpus[:2]))} has rows with more fields than its header "
                        "(an unquoted comma or a tab inside a text, or a trailing delimiter), which a stream cannot "
                        "read: fix the file, or pack it (data.streaming = false), which refuses or skips "
                        "(--skip-bad-lines) such rows by line")


def _decoded(source, corpus) -> Iterator[dict]:
    """The source's rows; a file that is not valid UTF-8, or truncated or damaged, is one line (a stream cannot skip
    such lines)."""
    try:
        yield from source
    except UnicodeDecodeError as exc:
        raise BertkitError(f"data.corpus: {', '.join(map(str, corpus[:2]))} is not valid UTF-8 ({exc.reason} at byte "
                           f"{exc.start} of a chunk); a streamed corpus cannot skip bad lines: fix the file or pack it "
                           "(data.streaming = false, --skip-bad-lines)") from None
    except _ParserError:  # a row wider than its header after the first chunk: pandas' own error, a traceback
        raise too_wide(corpus) from None
    except _READ_ERRORS as exc:
        if any(str(c).startswith(HUB_PREFIX) for c in corpus):  # no local files to blame: the Hub's stream broke
            raise BertkitError(f"data.corpus: the stream of {corpus[0]} broke off ({exc})") from None
        raise unreadable(find_files(corpus), exc) from None


@dataclass
class Point:
    """Where a run of blocks starts in the stream: the source's state before a batch of documents, how many
    documents came before it, the tokens carried into it, and how many of its blocks to skip; the epoch."""

    source: dict | None = None
    doc: int = 0
    carry_ids: list[int] = field(default_factory=list)
    carry_starts: list[bool] = field(default_factory=list)
    skip: int = 0
    epoch: int = 0
    # the reader whose `source` state this is: JSONL is read as lines since 2026-11-29 (datasets' json builder
    # before); a point stored without it ("") holds the json builder's state, which the line reader took as "that
    # chunk is done": a resume skipped the rest of the file without a word
    reader: str = READER


class BlockStream:
    """The corpus as a stream of packed blocks (`blocks(point)`), and its first validation blocks."""

    def __init__(self, corpus, text_field: str, tokenizer: Tokenizer, block_size: int, validation_fraction: float):
        self.corpus, self.text_field, self.block_size = tuple(corpus), text_field, block_size
        self.tokenizer_json = tokenizer.to_str()
        self.ids = special_ids(tokenizer)
        self.share = validation_share(validation_fraction)  # text/packing.py's split: the same documents held out

    def _documents(self, source, first_doc: int) -> Iterator[tuple[int, str]]:
        """(document index, text) of every non-empty document from where `source` stands."""
        formats = self._formats  # (the corpus's files are listed once, not at every pass)
        doc, first = first_doc, bool(formats) and formats <= {"csv", "tsv"}  # one schema: its first row says
        json_lines = formats == {"jsonl"}
        for row in _decoded(source, self.corpus):
            if json_lines and (row := self._record(row["text"], doc)) is None:
                continue
            if first and any(str(key).startswith("__index_level_") for key in row):
                # pandas reads a CSV whose first rows hold more fields than its header with the first fields as an
                # index: the text was the row's tail, or empty (a review, 2026-11-28)
                raise too_wide(self.corpus)
            first = False
            if self.text_field not in row:
                raise BertkitError(f"data.text_field: the streamed corpus {', '.join(map(str, self.corpus[:2]))} has "
                                   f"no field {self.text_field!r} (fields: {', '.join(map(str, row))}); set "
                                   "data.text_field")
            # (datasets gives a record without the field None, as a null: read as empty, where the packed path
            # refuses the file; docs/pretraining.md says so)
            text = document_text(row[self.text_field], self.text_field, lambda: f"data.corpus: document {doc + 1}")
            text = text.removeprefix("\ufeff").strip()  # a file's byte-order mark, as the packed path drops it
            if "\x00" in text:  # past the first 64 KiB `refuse_non_text` read (the packed path checks every line)
                raise BertkitError(f"data.corpus: a NUL byte in document {doc + 1:,} of the streamed corpus: remove "
                                   "it (`tr -d '\\000'`), or read the corpus packed (data.streaming = false) with "
                                   "--skip-bad-lines")
            if text:
                yield doc, text
                doc += 1

    @functools.cached_property
    def _formats(self) -> set[str]:
        """The local files' formats (empty for a Hub dataset): CSV / TSV are read by pandas, which takes a too-wide
        row's first fields for an index (a Parquet file's or a Hub dataset's own index columns are no such sign);
        JSONL comes as lines, parsed by `_record`."""
        if any(str(c).startswith(HUB_PREFIX) for c in self.corpus):
            return set()
        return {file_format(f) for f in find_files(self.corpus)}

    def _record(self, line: str, doc: int) -> dict | None:
        """A JSONL line as its record, as the packed path reads it (None: a blank line, not a record)."""
        line = line.removeprefix("\ufeff")
        if not line.strip():
            return None
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BertkitError(f"data.corpus: {', '.join(map(str, self.corpus[:2]))}: not valid JSON ({exc.msg}) after"
                               f" document {doc:,}; data.streaming = false names its file and line") from None
        if not isinstance(record, dict):
            raise BertkitError(f"data.corpus: {', '.join(map(str, self.corpus[:2]))}: a JSON line after document "
                               f"{doc:,} is a JSON {json_kind(record)}, not an object with a {self.text_field!r} field")
        return record

    def _pack(self, texts: list[str], carry_ids: np.ndarray, carry_starts: np.ndarray):
        """Blocks of `texts` after the carried tokens, as text/packing.py packs them; the new carry."""
        tokens = tokenize_documents({"text": texts}, self.tokenizer_json, self.ids.sep)
        return cut_blocks(tokens["ids"], tokens["starts"], carry_ids, carry_starts, self.block_size, self.ids.cls,
                          np.int64)

    def blocks(self, point: Point, validation: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray, Point]]:
        """(input_ids, word_start, the point a resume restarts this block from) for every training (or
        validation) block from `point` on; training wraps around at the end of the stream (the next epoch)."""
        while True:
            source = open_source(self.corpus)
            # a JSONL point of the json builder's (`Point.reader`): its state means another place to this reader, so
            # the stream is read again from its start up to the point's document (slow, but where the run stood)
            replay = point.source is not None and point.reader != READER and "jsonl" in self._formats
            if point.source is not None and not replay:
                source.load_state_dict(point.source)
            docs = self._documents(source, 0 if replay else point.doc)
            if replay and point.doc:
                next(itertools.dropwhile(lambda item: item[0] + 1 < point.doc, docs), None)
            carry_ids = np.asarray(point.carry_ids, dtype=np.int64)
            carry_starts = np.asarray(point.carry_starts, dtype=bool)
            skip, produced, next_doc = point.skip, 0, point.doc
            # datasets reports a loaded state only once iteration has begun: keep our own
            seeked = None if replay else point.source
            while True:
                # a resume point before each batch of documents: the source's state, the documents read, the carry
                before = Point(seeked if seeked is not None else source.state_dict(), next_doc, carry_ids.tolist(),
                               carry_starts.tolist(), 0, point.epoch)
                seeked = None
                texts = []
                for doc, text in docs:
                    next_doc = doc + 1
                    if held_out(doc, self.share):  # validation
                        if validation:
                            texts.append(text)
                    elif not validation:
                        texts.append(text)
                    if len(texts) == _DOCS:
                        break
                if not texts:
                    break
                blocks, starts, carry_ids, carry_starts = self._pack(texts, carry_ids, carry_starts)
                for i in range(skip, len(blocks)):
                    produced += 1
                    yield blocks[i], starts[i], Point(before.source, before.doc, before.carry_ids,
                                                      before.carry_starts, i, point.epoch)
                skip = 0
            if validation:
                return
            if produced == 0 and point == Point(epoch=point.epoch):
                raise BertkitError(f"corpus too small: the streamed corpus does not fill one training block of "
                                   f"{self.block_size} tokens (add text or lower data.block_size)")
            point = Point(epoch=point.epoch + 1)  # the stream again from its start; the last partial block dropped

    def validation(self, limit: int) -> Dataset:
        """The first `limit` validation blocks (the cached path's, for the same corpus): a prefix of the stream."""
        ids, starts = [], []
        if self.share is not None:
            for block, start, _ in self.blocks(Point(), validation=True):
                ids.append(block)
                starts.append(start)
                if len(ids) == limit:
                    break
        return Dataset.from_dict({"input_ids": [b.tolist() for b in ids], "word_start": [s.tolist() for s in starts]})


class StreamedBatches:
    """Global batches from a `BlockStream`: windows of `window` batches, each shuffled with its own seed; a step's
    rows are a pure function of (seed, step). `position(step)` is the point a resume at that step seeks to."""

    def __init__(self, stream: BlockStream, columns: list[str], global_batch: int, seed: int, window: int):
        self.stream, self.columns, self.global_batch = stream, columns, global_batch
        self.seed, self.window = seed, window
        self.starts: dict[int, Point] = {0: Point()}  # window -> where it starts in the stream (as far as known)
        self._current: tuple[int, dict[str, np.ndarray]] | None = None  # the window in memory
        self._reader: Iterator | None = None
        self._next: tuple[int, tuple] | None = None  # (window of the reader's next block, that block)

    def seek(self, point: dict, step: int) -> None:
        """Continue from a checkpoint: `point` is `position(step)` as stored."""
        self.starts = {step // self.window: Point(**{"reader": "", **point})}  # (stored before Point.reader: "")
        self._current = self._reader = self._next = None

    def position(self, step: int) -> dict:
        """Where the window of `step` starts (JSON-ready)."""
        window = step // self.window
        if window not in self.starts:
            self._load(window)
        return dict(vars(self.starts[window]))

    def _load(self, window: int) -> None:
        """Read window `window`: on from the reader when it is the next one, else from its recorded start (or,
        never in a run that goes step by step, from the nearest earlier start, skipping blocks)."""
        if self._next is None or self._next[0] != window:
            known = max((w for w in self.starts if w <= window), default=None)
            start = Point() if known is None else self.starts[known]
            known = known or 0
            self._reader = self.stream.blocks(start)
            for _ in range((window - known) * self.window * self.global_batch):
                next(self._reader)
            self._next = (window, next(self._reader))
        block = self._next[1]
        ids, starts = [], []
        self.starts[window] = block[2]
        for _ in range(self.window * self.global_batch):
            ids.append(block[0])
            starts.append(block[1])
            block = next(self._reader)
        self._next = (window + 1, block)
        self.starts = {window: self.starts[window], window + 1: block[2]}
        order = np.random.default_rng([self.seed, window]).permutation(len(ids))
        rows = {"input_ids": np.stack(ids)[order], "word_start": np.stack(starts)[order]}
        self._current = (window, {c: rows[c] for c in self.columns})

    def rows(self, step: int) -> dict[str, np.ndarray]:
        """Step `step`'s global batch, {column: (global_batch, block_size)}."""
        window, within = divmod(step, self.window)
        if self._current is None or self._current[0] != window:
            self._load(window)
        part = slice(within * self.global_batch, (within + 1) * self.global_batch)
        return {c: v[part] for c, v in self._current[1].items()}

    def first_rows(self) -> dict[str, np.ndarray]:
        """The first window's blocks (what the unigram baseline counts when the corpus streams)."""
        if self._current is None or self._current[0] != 0:
            self._load(0)
        return self._current[1]


def streamed_packed(corpus, text_field: str, tokenizer: Tokenizer, block_size: int, validation_fraction: float,
                    max_validation_blocks: int) -> Packed:
    """A `Packed` whose training blocks stream (`packed.train` is the BlockStream) and whose validation blocks
    are the stream's first ones (read now: a missing text field or an empty corpus is an error before anything is
    written)."""
    stream = BlockStream(corpus, text_field, tokenizer, block_size, validation_fraction)
    validation = stream.validation(max_validation_blocks)
    next(stream.blocks(Point()))  # one training block, or the corpus-too-small error now
    return Packed(stream, validation, block_size, {"train_blocks": None, "validation_blocks": len(validation)})


__all__ = ["BlockStream", "HUB_PREFIX", "Point", "StreamedBatches", "open_source", "streamed_packed"]
