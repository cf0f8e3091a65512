"""Corpora: files or directories of .txt / .gz / .jsonl / .csv / .tsv / .parquet, read once into an Arrow file.

Reading streams line by line (or Parquet batch by batch) into a `pyarrow` stream file in the cache; the result is
opened as a memory-mapped `datasets.Dataset`, so peak memory does not grow with the corpus. The cache key is the
files' paths, sizes and modification times plus the reading options; a damaged cache is rebuilt (text/cache.py).
"""

from __future__ import annotations

import codecs
import csv
import gzip
import hashlib
import itertools
import json
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING
from pathlib import Path

import pyarrow as pa
from rich.console import Console

from bertkit.errors import BertkitError
from bertkit.paths import cache_root, resolve_data_path, where_looked
from bertkit.run.files import atomic_dir
from bertkit.text.cache import open_or_build, write_manifest

if TYPE_CHECKING:  # types only: the CSV helpers that task readers import need no datasets
    from datasets import Dataset

FORMATS = {".txt": "text", ".text": "text", ".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv",
           ".parquet": "parquet"}
_VERSION = "corpus-v4"  # v2: TSV read without quote processing; a .csv whose header is tab-separated reads as TSV;
# v3: a quoted CSV field keeps its line breaks, a byte-order mark is not text, a JSON text is text (not a repr);
# v4: a byte-order mark opening any document is not text (files joined with `cat`), as the stream reads it; the key
# holds each file's inode and change time (an edit that kept size and modification time reused the old corpus)
# compressions other than gzip, refused by name (what each suffix is: the message says)
COMPRESSED = {".xz": "xz-compressed", ".lzma": "lzma-compressed", ".bz2": "bzip2-compressed",
              ".zst": "zstd-compressed", ".lz4": "lz4-compressed", ".zip": "a zip archive", ".7z": "a 7z archive",
              ".tar": "a tar archive", ".tgz": "a tar archive"}
_CACHE_VERSION = "corpus-cache-v1"  # the cache folder's layout (manifest.json), apart from how files are read
_BATCH = 10_000
# Python's csv refuses a field over 128 kB (field_size_limit() is 131072), and a document or a review can be longer.
# 64 MiB still bounds the memory one malformed field (an unclosed quote) can take, and fits the C long that
# csv.field_size_limit takes on every platform (sys.maxsize does not, on Windows).
CSV_FIELD_LIMIT = 64 * 2**20


@dataclass
class ReadStats:
    """What reading a corpus found."""

    files: int = 0
    documents: int = 0
    characters: int = 0
    bad_lines: int = 0
    empty_lines: int = 0
    bad_rows: int = 0  # CSV / TSV rows with more fields than the header, skipped (skip_bad_lines)


def find_files(paths: list[str] | tuple[str, ...]) -> list[Path]:
    """Expand files and directories into the readable corpus files, sorted; clear errors for what is missing.
    A directory's hidden files and folders are not read (a notebook's `.ipynb_checkpoints` holds a copy of each
    file: every document was read twice, and validation held out copies of training documents), a file named twice
    (`a.txt ./a.txt`, or a folder and a file in it) is read once, and a compressed file bertkit cannot decompress
    is refused by name (a folder left its .zst shards out without a word) unless its unpacked copy is beside it."""
    if not paths:
        raise BertkitError("no corpus given (pass --corpus FILE_OR_DIR, or set data.corpus in the recipe)")
    files: list[Path] = []
    for raw in paths:
        path = resolve_data_path(Path(raw))
        if path.is_file():
            _check_compression(path)
            files.append(path)
        elif path.is_dir():
            every = [p for p in path.rglob("*") if p.is_file()]
            found = sorted(p for p in every if not any(part.startswith(".") for part in p.relative_to(path).parts))
            listed = set(found)
            for candidate in found:
                unpacked = candidate.with_suffix("")
                # part-0.jsonl.zst: a corpus shard, not an unrelated file; unless its unpacked copy is beside it
                # (`unzip`, `zstd -d`, `xz -dk` keep the archive: the folder was refused after the user unpacked it)
                if candidate.suffixes[-2:-1] and file_format(unpacked, strict=False) and not \
                        {unpacked, unpacked.with_name(unpacked.name + ".gz")} & listed:
                    _check_compression(candidate)
            found = [p for p in found if file_format(p, strict=False)]
            if not found:
                hidden = len(every) - len(listed)  # (a notebook's checkpoints, dot-files)
                raise BertkitError(f"{path}: directory has no readable text files "
                                   f"(looked for {', '.join(sorted(FORMATS))}, optionally .gz)"
                                   + (f"; {hidden:,} hidden file(s) passed over: name one to read it" if hidden
                                      else ""))
            files.extend(found)
        else:
            raise BertkitError(f"{path}: no such file or directory{where_looked(path)}")
    unique: dict[Path, Path] = {}
    for file in files:
        unique.setdefault(file.resolve(), file)  # each file once, where it was first named
    return list(unique.values())


def _check_compression(path: Path) -> None:
    """Refuse a file compressed other than with gzip: read as text, its bytes were invalid UTF-8, and the error's
    --skip-bad-lines trained on junk."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes[-1:] == [".gz"]:
        suffixes = suffixes[:-1]  # .tar.gz: the archive inside the gzip
    if suffixes and suffixes[-1] in COMPRESSED:  # the outermost suffix only: "notes.7z.txt" is text
        raise BertkitError(f"{path}: {COMPRESSED[suffixes[-1]]}, which bertkit does not read (it reads plain files "
                           "and .gz): unpack it, or recompress it with gzip")


def file_format(path: Path, strict: bool = True) -> str | None:
    """text | jsonl | csv | tsv | parquet, from the suffix (before .gz); unknown suffixes read as text when strict."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    fmt = FORMATS.get(suffixes[-1]) if suffixes else None
    if fmt is None and strict:
        return "text"
    return fmt


def allow_long_fields() -> None:
    """Let csv read fields up to CSV_FIELD_LIMIT (its default stops at 128 kB); call before reading. Never lowers a
    limit someone else raised."""
    if csv.field_size_limit() < CSV_FIELD_LIMIT:
        csv.field_size_limit(CSV_FIELD_LIMIT)


def csv_error(path: Path, line: int, exc: csv.Error, suffix: str) -> BertkitError:
    """One line for a CSV / TSV file csv cannot read: a field over the limit, or malformed quoting."""
    kind = "TSV" if suffix == ".tsv" else "CSV"
    if "field limit" in str(exc):
        limit = csv.field_size_limit()
        size = f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit:,} characters"
        return BertkitError(f"{path}:{line}: a field is longer than {size}, the most bertkit reads from one {kind} "
                            "field (an unclosed quote? else split the text, or use .jsonl)")
    return BertkitError(f"{path}:{line}: not valid {kind} ({exc})")


@contextmanager
def csv_errors(path: Path, reader, suffix: str) -> Iterator[None]:
    """Turn csv.Error while iterating `reader` (a csv.reader) into a BertkitError naming the file and line."""
    try:
        yield
    except csv.Error as exc:
        raise csv_error(path, reader.line_num, exc, suffix) from None


def csv_dialect(first_line: str, suffix: str) -> dict:
    """csv.reader arguments for a delimited file, from its first line: .tsv is tab-separated; a .csv is too when
    its first line has more tab- than comma-separated fields (the STS benchmark's .csv files are TSV). Tab-separated
    files are read without quote processing: GLUE's and STS-B's sentences hold literal quote characters."""
    tab = suffix == ".tsv"
    if suffix == ".csv" and "\t" in first_line:
        allow_long_fields()
        try:
            commas = len(next(csv.reader([first_line]), []))
        except csv.Error:  # a field over the limit: the reader proper reports it with the file and line
            commas = first_line.count(",") + 1
        tab = len(first_line.split("\t")) > commas
    return {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if tab else {"delimiter": ",", "quoting": csv.QUOTE_MINIMAL}


def record_key(value, where: str) -> str:
    """A document id as a string: ids must be strings or integers (so 1 and "1" are the same id, and a null or
    a float is not silently turned into one)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise BertkitError(f"{where}: id {value!r} is not a string or an integer")
    return str(value)


def _lines(path: Path, skip_bad_lines: bool | None, stats: ReadStats, ends: bool = False) -> Iterator[str]:
    """Decoded lines of a (possibly gzipped) file, without their line endings unless `ends` (csv's reader needs
    them: a quoted field that spans lines keeps its line break); a UTF-8 byte-order mark opening the file is not
    text. Invalid UTF-8 stops with the byte offset, or is skipped. None: the caller's command cannot skip such
    lines, so the error does not offer it (embed, index build)."""
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    refuse_non_text(path)  # UTF-16 or binary, from its first 64 KiB (a stray NUL further on: a bad line)
    offset, number = 0, 0
    try:
        with opener(path, "rb") as fh:
            for number, raw in enumerate(fh, start=1):
                # (a byte-order mark, a UTF-16 head: refused above) a UTF-16 part past the head: never text
                if b"\x00" in raw and _looks_utf16(raw):
                    raise _nul_error(path, raw, offset, number)
                try:
                    if b"\x00" in raw:  # a stray NUL in UTF-8 text (scraped pages have some): a bad line
                        raise UnicodeDecodeError("utf-8", raw, raw.index(b"\x00"), raw.index(b"\x00") + 1, "NUL")
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    if not skip_bad_lines:
                        # embed and index build cannot skip a line (a row would go missing): the file must be
                        # re-encoded, and only its owner knows from what (iconv -f latin1 would garble a UTF-8 file
                        # with one stray byte)
                        hint = (f"; re-encode it as UTF-8 (a Windows-1252 file: `iconv -f cp1252 -t utf-8 {path}`; "
                                f"stray bytes in a UTF-8 file: `iconv -f utf-8 -t utf-8 -c {path}` drops them)"
                                if skip_bad_lines is None and path.suffix.lower() != ".gz" else
                                "; re-encode it as UTF-8" if skip_bad_lines is None else
                                "; pass --skip-bad-lines (data.skip_bad_lines in a recipe) to skip such lines")
                        what = "a NUL byte" if exc.reason == "NUL" else "invalid UTF-8"
                        raise BertkitError(f"{path}: {what} at byte {offset + exc.start} (line {number}){hint}") \
                            from None
                    stats.bad_lines += 1
                    offset += len(raw)
                    continue
                if number == 1:  # a BOM (Excel's "CSV UTF-8"): it hid a header's first column, ended in a text
                    line = line.removeprefix("\ufeff")
                offset += len(raw)
                yield line if ends else line.rstrip("\r\n")
    except (OSError, EOFError, zlib.error) as exc:  # truncated or damaged: where it stops (as text/stream.py says)
        raise BertkitError(f"{path}: unreadable at byte {offset}, line {number + 1} ({exc}); repair or replace "
                           "the file") from None


_UTF16 = (b"\xff\xfe", b"\xfe\xff")  # UTF-16's byte-order marks, little- and big-endian


def refuse_non_text(path: Path) -> None:
    """A text / JSONL / CSV / TSV file's first 64 KiB must not read as UTF-16 (a byte-order mark; `_not_utf8_text`) or
    binary: checked as each file is opened, packed or streamed (a stray NUL further on is the reader's: a bad line)."""
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            head = fh.read(1 << 16)
    except (OSError, EOFError, zlib.error):
        return  # the stream's own reading says where the file is damaged
    if head[:2] in _UTF16:
        raise _nul_error(path, head, 0, 1)
    if (nul := head.find(b"\x00")) >= 0 and _not_utf8_text(head):
        start = head.rfind(b"\n", 0, nul) + 1  # the line holding it: its first byte, and its number
        raise _nul_error(path, head[start:], start, head.count(b"\n", 0, nul) + 1)


def _not_utf8_text(head: bytes) -> bool:
    """Whether a file's first bytes, holding a NUL, are UTF-16 (of any script: its spaces and line ends are NULs in
    one byte of two) or binary rather than UTF-8 text with a stray NUL: NULs in 1% of them or more, or bytes that are
    not UTF-8 once the NULs are set aside (a UTF-16 file of Cyrillic or CJK text, an image named .txt). (A few NULs
    in a short file are strays: UTF-16 of a few words has more.)"""
    if (nuls := head.count(b"\x00")) >= 4 and nuls * 100 >= len(head):
        return True
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head.replace(b"\x00", b""), final=False)  # (a cut last char)
    except UnicodeDecodeError:
        return True
    return False


def _looks_utf16(raw: bytes) -> bool:
    """Whether a line holding NUL bytes reads as UTF-16 (or binary) rather than UTF-8 text with a stray NUL: at least
    a quarter of its bytes NUL (ASCII in UTF-16: every other byte)."""
    return raw.count(b"\x00") * 4 >= len(raw)


def _nul_error(path: Path, raw: bytes, offset: int, number: int) -> BertkitError:
    """A file that reads as UTF-16 (ASCII text in UTF-16 is valid UTF-8 with a NUL after each character, and was
    trained on so) or binary. Not skippable: every line of such a file is alike (a stray NUL in UTF-8 text is a bad
    line, skippable)."""
    if number == 1 and raw[:2] in _UTF16:
        what, where = "UTF-16 (its byte-order mark says so)", 0
    else:
        what, where = "NUL bytes (UTF-16 text, or not a text file?)", raw.index(b"\x00")
    return BertkitError(f"{path}: {what} at byte {offset + where} (line {number}); re-encode it as UTF-8 "
                        f"(`iconv -f utf-16 -t utf-8 {path}`)")


def json_kind(value) -> str:
    """A parsed JSON value's kind as JSON names it (null, array, string, number, boolean), for errors."""
    kinds = {type(None): "null", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return kinds.get(type(value), type(value).__name__)


@dataclass(frozen=True)
class Record:
    """One document as read: its 1-based line (or row) number in the file, its id (when an id field is read), and
    its text (not stripped; may be empty)."""

    number: int
    id: str | None
    text: str


def _delimited_records(path: Path, fmt: str, text_field: str, id_field: str | None, skip_bad_lines: bool | None,
                       stats: ReadStats) -> Iterator[Record]:
    """The rows of a .csv / .tsv file as records (`iter_records`): line endings kept for csv's reader, a row with
    fewer fields than the text needs refused, one with more (a delimiter inside a text) refused or skipped."""
    lines = _lines(path, skip_bad_lines, stats, ends=True)
    first = next(lines, None)
    if first is None:
        return
    suffix = f".{fmt}"
    allow_long_fields()
    reader = csv.reader(itertools.chain([first], lines), **csv_dialect(first.rstrip("\r\n"), suffix))
    with csv_errors(path, reader, suffix):
        header = next(reader)
    columns = []
    for field, role in ((text_field, "--text-field"), (id_field, "--id-field")):
        if field is not None and field not in header:
            raise BertkitError(f"{path}: no column '{field}' (found: {', '.join(header)}); set {role}")
        columns.append(None if field is None else header.index(field))
    width = max(c for c in columns if c is not None) + 1
    line = reader.line_num + 1  # where the next row starts: a quoted field may span lines, and a row is named (and
    while True:                 # its id made) by its first line, as the finetuning reader names it
        with csv_errors(path, reader, suffix):  # not around the yield: the caller's errors are its own
            row = next(reader, None)
        start, line = line, reader.line_num + 1
        if row is None:
            break
        if not row:
            continue
        if len(row) < width:  # never a silently dropped (or shifted) row
            raise BertkitError(f"{path}:{start}: {len(row)} fields, the header has {len(header)}")
        if any(extra.strip() for extra in row[len(header):]):  # a delimiter inside a text: cut there, silently
            if skip_bad_lines:
                stats.bad_rows += 1
                continue
            inside = "an unquoted comma inside a text? quote the field" if reader.dialect.delimiter == "," \
                else "a tab inside a text? a TSV cannot hold one: replace it"
            offer = "" if skip_bad_lines is None else "; or pass --skip-bad-lines to skip and count such rows"
            raise BertkitError(f"{path}:{start}: {len(row)} fields, the header has {len(header)} "
                               f"({inside}){offer}")
        key = None if columns[1] is None else record_key(row[columns[1]], f"{path}:{start}")
        yield Record(start, key, row[columns[0]])


def iter_records(path: Path, text_field: str = "text", skip_bad_lines: bool | None = None,
                 stats: ReadStats | None = None, id_field: str | None = None) -> Iterator[Record]:
    """Every document of one file in order, streamed: a line of .txt (.gz), a record of .jsonl, a row of .csv /
    .tsv / .parquet. Blank JSONL lines are not records; empty texts are (the caller decides). `skip_bad_lines`:
    skip lines of invalid UTF-8; False stops at one and offers --skip-bad-lines, None stops without the offer."""
    stats = stats if stats is not None else ReadStats()
    fmt = file_format(path)
    if fmt == "text":
        if id_field is not None:
            raise BertkitError(f"{path}: a plain text file has no id field; use .jsonl / .csv / .tsv / .parquet "
                               "for ids")
        for number, line in enumerate(_lines(path, skip_bad_lines, stats), start=1):
            yield Record(number, None, line)
    elif fmt == "jsonl":
        lines = "; a .json corpus is read as JSON lines, one object per line (a JSON array or a pretty-printed " \
            "file is not)" if ".json" in [x.lower() for x in path.suffixes[-2:]] else ""  # once a file
        for number, line in enumerate(_lines(path, skip_bad_lines, stats), start=1):
            line = line.removeprefix("\ufeff")  # a BOM opening a line of files joined by `cat`, as the stream reads it
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BertkitError(f"{path}:{number}: not valid JSON ({exc.msg}){lines}") from None
            if not isinstance(record, dict):  # a one-line JSON array of records said "no field 'text' (found: list)"
                raise BertkitError(f"{path}:{number}: a JSON {json_kind(record)}, not an object with a "
                                   f"'{text_field}' field{lines}")
            for field, role in ((text_field, "--text-field"), (id_field, "--id-field")):
                if field is not None and field not in record:
                    raise BertkitError(f"{path}:{number}: no field '{field}' (found: {', '.join(record)}); set {role}")
            key = None if id_field is None else record_key(record[id_field], f"{path}:{number}")
            yield Record(number, key, document_text(record[text_field], text_field, lambda: f"{path}:{number}"))
    elif fmt in ("csv", "tsv"):
        yield from _delimited_records(path, fmt, text_field, id_field, skip_bad_lines, stats)
    else:
        import pyarrow.parquet as pq

        try:
            parquet = pq.ParquetFile(path)
        except Exception as exc:  # pyarrow raises ArrowInvalid and friends
            raise BertkitError(f"{path}: not a readable Parquet file ({exc})") from None
        wanted = [f for f in (text_field, id_field) if f is not None]
        for field, role in zip(wanted, ("--text-field", "--id-field")):
            if field not in parquet.schema_arrow.names:
                raise BertkitError(f"{path}: no column '{field}' (found: {', '.join(parquet.schema_arrow.names)}); "
                                   f"set {role}")
        number = 0
        for batch in parquet.iter_batches(columns=wanted, batch_size=_BATCH):
            texts = batch.column(0).to_pylist()
            ids = batch.column(1).to_pylist() if id_field is not None else [None] * len(texts)
            for text, key in zip(texts, ids):
                number += 1
                yield Record(number, None if id_field is None else record_key(key, f"{path}: row {number}"),
                             document_text(text, text_field, lambda: f"{path}: row {number}"))


def document_text(value, field: str, where: Callable[[], str]) -> str:
    """A JSON record's text field as text: a string as it is, a number as written, null as empty; a list, an
    object or a boolean is refused (a list of paragraphs was trained on as its Python repr, and 0 or false read as
    an empty document). `where` names the record, called only for the error (it runs once per document)."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    kind = {bool: "a boolean", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)
    raise BertkitError(f"{where()}: field '{field}' holds {kind}, not text; join it into one string (or set "
                       "--text-field)")


def _documents(path: Path, text_field: str, skip_bad_lines: bool, stats: ReadStats) -> Iterator[str]:
    for record in iter_records(path, text_field, skip_bad_lines, stats):
        yield record.text


def iter_corpus(files: list[Path], text_field: str = "text", skip_bad_lines: bool = False,
                stats: ReadStats | None = None) -> Iterator[str]:
    """Every non-empty document of every file, stripped."""
    stats = stats if stats is not None else ReadStats()
    for path in files:
        stats.files += 1
        for doc in _documents(path, text_field, skip_bad_lines, stats):
            doc = doc.removeprefix("\ufeff").strip()  # a BOM opening a line of files joined by `cat`: not text
            if not doc:
                stats.empty_lines += 1
                continue
            stats.documents += 1
            stats.characters += len(doc)
            yield doc


def corpus_fingerprint(files: list[Path], text_field: str, skip_bad_lines: bool) -> str:
    """Changes whenever a file is added, removed, resized, touched or written, or a reading option changes (the
    inode's change time moves on every write, and `touch -r` / `rsync -a` cannot set it back)."""
    h = hashlib.sha256(_VERSION.encode())
    for path in files:
        st = path.stat()
        h.update(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{st.st_ctime_ns}\n".encode())
    h.update(f"{text_field}|{skip_bad_lines}".encode())
    return h.hexdigest()[:20]


def load_corpus(paths: list[str] | tuple[str, ...], text_field: str = "text", skip_bad_lines: bool = False,
                console: Console | None = None) -> tuple[Dataset, ReadStats, str]:
    """Read (or reuse the cached) corpus. Returns a memory-mapped Dataset with a `text` column, the read stats and
    the corpus fingerprint (the key later caches build on). A damaged cache is read again, with a warning on
    `console` (stderr when None)."""
    files = find_files(paths)
    key = corpus_fingerprint(files, text_field, skip_bad_lines)

    def build(folder: Path) -> None:
        stats = ReadStats()
        with atomic_dir(folder, overwrite=True) as tmp:
            schema = pa.schema([("text", pa.string())])
            with pa.OSFile(str(tmp / "corpus.arrow"), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
                batch: list[str] = []
                for doc in iter_corpus(files, text_field, skip_bad_lines, stats):
                    batch.append(doc)
                    if len(batch) == _BATCH:
                        writer.write_batch(pa.record_batch([pa.array(batch, pa.string())], schema=schema))
                        batch = []
                if batch:
                    writer.write_batch(pa.record_batch([pa.array(batch, pa.string())], schema=schema))
            if stats.documents == 0:
                raise BertkitError(f"corpus is empty: {stats.files} file(s) read, no non-empty text "
                                   f"({', '.join(str(f) for f in files[:3])}{' …' if len(files) > 3 else ''})")
            write_manifest(tmp, _CACHE_VERSION, {"corpus.arrow": stats.documents}, stats=stats.__dict__)

    def read(manifest: dict, opened: dict[str, Dataset]) -> tuple[Dataset, ReadStats]:
        return opened["corpus.arrow"], ReadStats(**manifest["stats"])

    dataset, stats = open_or_build(cache_root() / "corpus" / key, _CACHE_VERSION, build, read, "corpus", console)
    return dataset, stats, key


__all__ = ["CSV_FIELD_LIMIT", "ReadStats", "Record", "allow_long_fields", "corpus_fingerprint", "csv_dialect",
           "csv_error", "csv_errors", "document_text", "file_format", "find_files", "iter_corpus", "iter_records",
           "load_corpus", "refuse_non_text"]
