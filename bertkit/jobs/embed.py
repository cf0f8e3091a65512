"""`bertkit embed`: sentence embeddings of a file (or several) to .npy or .parquet, in constant memory.

Inputs stream in chunks of `chunk_size` texts; inside a chunk, batches run sorted by length and the order is
restored; each chunk is written out before the next is read (`.npy`: a memory-mapped array sized by a first,
counting pass; `.parquet`: one row group per chunk). Output files are written beside the target and renamed into
place, so an existing file is never half-overwritten.

Row i of the output is the i-th non-empty input text. Empty texts are skipped and counted (their positions are
written to OUT.rows.npy for .npy output; Parquet rows carry `file` and `line`), or embedded as "" with
`keep_empty`. Rows never shift silently.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from bertkit.embedding import SentenceEncoder
from bertkit.errors import BertkitError
from bertkit.paths import atomic_file
from bertkit.text.corpus import Record, find_files, iter_records

FORMATS = (".npy", ".parquet")


@dataclass
class InputScan:
    """What a counting pass over the inputs found."""

    files: list[Path]
    rows: int = 0  # texts that get an embedding
    empty: int = 0  # empty texts (skipped unless keep_empty)
    empty_rows: list[int] = field(default_factory=list)  # their input positions (first 1,000)


def input_records(files: list[Path], text_field: str, id_field: str | None) -> Iterator[tuple[int, Path, Record]]:
    """(input position, file, record) over every file in order; the position counts empty texts too."""
    position = 0
    for path in files:
        for record in iter_records(path, text_field, id_field=id_field):
            yield position, path, record
            position += 1


def record_id(path: Path, record: Record) -> str:
    """A document's id: its id field, else `file:line` (unique within a corpus of distinct file names)."""
    return record.id if record.id is not None else f"{path.name}:{record.number}"


def scan(files: list[Path], text_field: str, id_field: str | None, keep_empty: bool, check_ids: bool = False,
         existing: set[str] | None = None) -> InputScan:
    """Count what will be embedded. With an id field (or `check_ids`: default `file:line` ids too), refuse a
    duplicate id, naming it and both places, or an id already in `existing` (an index being appended to)."""
    result = InputScan(files)
    seen: dict[str, tuple[Path, int]] = {}
    existing = existing or set()
    for position, path, record in input_records(files, text_field, id_field):
        if not record.text.strip():
            result.empty += 1
            if len(result.empty_rows) < 1000:
                result.empty_rows.append(position)
            if not keep_empty:
                continue
        if id_field is not None or check_ids:
            key = record_id(path, record)
            if key in seen:
                first = seen[key]
                raise BertkitError(f"{path}:{record.number}: duplicate id {key!r} (first at {first[0]}:{first[1]}); "
                                   "ids must be unique")
            if key in existing:
                raise BertkitError(f"{path}:{record.number}: id {key!r} is already in the index")
            seen[key] = (path, record.number)
        result.rows += 1
    return result


def chunks(files: list[Path], text_field: str, id_field: str | None, keep_empty: bool, size: int,
           ) -> Iterator[list[tuple[int, Path, Record]]]:
    """The records to embed, `size` at a time."""
    chunk = []
    for item in input_records(files, text_field, id_field):
        if not keep_empty and not item[2].text.strip():
            continue
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def run(model: Path, inputs: list[str], out: Path, text_field: str = "text", id_field: str | None = None,
        batch_size: int = 64, chunk_size: int = 8192, keep_empty: bool = False, overwrite: bool = False,
        progress: bool = True, console: Console | None = None) -> dict:
    """Embed every text of `inputs` with the sentence encoder of run `model` into `out` (.npy or .parquet)."""
    console = console or Console(stderr=True)
    out = Path(out)
    if out.suffix.lower() not in FORMATS:
        raise BertkitError(f"{out}: unknown output format (allowed: {', '.join(FORMATS)})")
    if out.is_dir():
        raise BertkitError(f"{out}: is a directory, expected a file path")
    if out.exists() and not overwrite:
        raise BertkitError(f"{out}: already exists (choose another --out or pass --overwrite)")
    if id_field is not None and out.suffix.lower() == ".npy":
        raise BertkitError(f"{out}: ids need a .parquet output (an .npy file holds only the matrix)")
    if chunk_size < batch_size:
        raise BertkitError(f"--chunk-size {chunk_size} is smaller than --batch-size {batch_size}")
    files = find_files(inputs)
    encoder = SentenceEncoder(model, batch_size=batch_size)
    found = scan(files, text_field, id_field, keep_empty)
    if found.rows == 0:
        raise BertkitError(f"{', '.join(map(str, inputs))}: no texts to embed"
                           + (f" ({found.empty:,} empty)" if found.empty else ""))
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    rows_file = out.with_suffix(".rows.npy")
    out.parent.mkdir(parents=True, exist_ok=True)
    bar = Progress(TextColumn("[bold]embed"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=console, disable=not progress)
    written, kept_rows = 0, []
    try:
        with bar:
            task = bar.add_task("embed", total=found.rows)
            writer = _Writer(tmp, out.suffix.lower(), found.rows, encoder.dim, id_field is not None)
            for chunk in chunks(files, text_field, id_field, keep_empty, chunk_size):
                vectors = encoder.encode([r.text for _, _, r in chunk],
                                         on_batch=lambda n: bar.advance(task, n))  # (n, D)
                writer.write(vectors, chunk)
                if found.empty and not keep_empty:
                    kept_rows.append(np.fromiter((position for position, _, _ in chunk), np.int64, len(chunk)))
                written += len(chunk)
            writer.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    if written != found.rows:
        raise BertkitError(f"the inputs changed while being embedded ({found.rows:,} texts counted, {written:,} read)")
    summary = {"out": str(out), "rows": written, "dim": encoder.dim, "empty": found.empty,
               "truncated": encoder.truncated, "model": encoder.identity}
    if encoder.truncated:
        console.print(f"[yellow]warning: {encoder.truncated:,} texts are longer than {encoder.max_length} tokens "
                      "and were truncated (sentence.max_length)")
    if found.empty and not keep_empty:
        if out.suffix.lower() == ".npy":
            with atomic_file(rows_file, overwrite=True) as tmp_rows:
                with tmp_rows.open("wb") as fh:
                    np.save(fh, np.concatenate(kept_rows))
            summary["rows_file"] = str(rows_file)
        where = f"{rows_file} maps each row to its input position" if out.suffix.lower() == ".npy" else \
            "each row carries its file and line"
        console.print(f"[yellow]skipped {found.empty:,} empty texts (input positions "
                      f"{', '.join(map(str, found.empty_rows[:5]))}{' …' if found.empty > 5 else ''}); {where}; "
                      "--keep-empty embeds them as empty strings instead")
    elif found.empty:
        console.print(f"{found.empty:,} empty texts were embedded as empty strings (--keep-empty)")
    elif rows_file.is_file() and out.suffix.lower() == ".npy":
        rows_file.unlink()  # a previous run's map would now be wrong
    console.print(f"wrote {written:,} × {encoder.dim} embeddings to {out}")
    return summary


class _Writer:
    """Chunks of embeddings into a memory-mapped .npy (size known up front) or Parquet row groups."""

    def __init__(self, path: Path, suffix: str, rows: int, dim: int, with_ids: bool):
        self.suffix, self.position = suffix, 0
        if suffix == ".npy":
            self.array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, dim))
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            fields = [("id", pa.string())] if with_ids else []
            fields += [("file", pa.string()), ("line", pa.int64()), ("embedding", pa.list_(pa.float32(), dim))]
            self.schema = pa.schema(fields)
            self.with_ids = with_ids
            self.writer = pq.ParquetWriter(path, self.schema)

    def write(self, vectors: np.ndarray, chunk: list[tuple[int, Path, Record]]) -> None:
        if self.suffix == ".npy":
            self.array[self.position:self.position + len(vectors)] = vectors
        else:
            import pyarrow as pa

            columns = [pa.array([r.id for _, _, r in chunk], pa.string())] if self.with_ids else []
            columns += [pa.array([str(p) for _, p, _ in chunk], pa.string()),
                        pa.array([r.number for _, _, r in chunk], pa.int64()),
                        pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()),
                                                          vectors.shape[1])]
            self.writer.write_table(pa.Table.from_arrays(columns, schema=self.schema))
        self.position += len(vectors)

    def close(self) -> None:
        if self.suffix == ".npy":
            self.array.flush()
            del self.array
        else:
            self.writer.close()
