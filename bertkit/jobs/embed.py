"""`bertkit embed`: sentence embeddings of a file (or several) to .npy or .parquet, in constant memory.

Inputs stream in chunks of `chunk_size` texts; inside a chunk, batches run sorted by length and the order is
restored; each chunk is written out before the next is read (`.npy`: appended to an array whose shape a first,
counting pass fixed; `.parquet`: one row group per chunk). Outputs are written beside the target, fsynced once and
renamed into place only when complete, so an existing file is never half-overwritten; a full disk is one line, with
the temporaries removed and the previous output intact.

The writers are `bertkit.arrays` (ordinary writes, not a memory map: a full disk is ENOSPC, not SIGBUS).

Row i of the output is the i-th non-empty input text. Empty texts are skipped and counted (for .npy output,
OUT.rows.npy maps every row to its input position; Parquet rows carry `file` and `line`), or embedded as "" with
`keep_empty`. Rows never shift silently.

Memory: the embeddings, texts and row map stream; only duplicate-id detection keeps 8 bytes per id (a hash).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from bertkit.arrays import EmbeddingWriter, NpyWriter
from bertkit.embedding import SentenceEncoder, parse_layers, truncation_warning
from bertkit.errors import BertkitError
from bertkit.paths import path_list
from bertkit.run.files import disk_errors, replace
from bertkit.run.outputs import EMBEDDINGS_NPY, EMBEDDINGS_PARQUET, ROWS_NPY, TOKENS_TSV, claim
from bertkit.text.corpus import find_files
from bertkit.text.records import InputScan, chunks, scan

FORMATS = (".npy", ".parquet")


def _staged(out: Path, sidecar: Path) -> tuple[Path, Path]:
    """Temporary paths beside the output and its sidecar: written there, renamed into place only when complete."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return (out.parent / f".{out.name}.tmp-{os.getpid()}", out.parent / f".{sidecar.name}.tmp-{os.getpid()}")


def _bar(label: str, console: Console, progress: bool) -> Progress:
    return Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                    console=console, disable=not progress)


@dataclass(frozen=True)
class EmbedJob:
    """What `bertkit embed` is asked: an encoder run, the input files or directories, the .npy / .parquet file to
    write, how to read, batch and chunk the inputs, and what to embed (one pooled vector per text, per layer with
    `layers`, every token's states with `tokens`)."""

    model: Path
    inputs: tuple[str, ...]
    out: Path
    text_field: str = "text"
    id_field: str | None = None
    batch_size: int = 64
    chunk_size: int = 8192
    keep_empty: bool = False
    overwrite: bool = False
    layers: str | None = None
    tokens: bool = False
    precision: str = "auto"
    compile: bool = False
    progress: bool = True
    compile_shapes: str = "auto"

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", path_list(self.inputs))  # one file given as a str is one file


@dataclass(frozen=True)
class EmbedResult:
    """The array written: `rows` of it (texts; tokens with `--tokens`) of `dim` values for each of `layers` (None:
    one pooled vector per text), how many texts were embedded, how many were empty (skipped; embedded as "" with
    `keep_empty`) and truncated, and the model's identity. `rows_file` is the row map (.npy output that skipped
    empty texts), `tokens_file` the token table (`--tokens`); None where the output has none."""

    out: Path
    rows: int
    dim: int
    texts: int
    empty: int
    truncated: int
    model: str
    layers: list[int] | None = None
    rows_file: Path | None = None
    tokens_file: Path | None = None


def run(job: EmbedJob, console: Console | None = None) -> EmbedResult:
    """Embed every text of `job.inputs` with the sentence encoder of run `job.model` into `job.out` (.npy or
    .parquet).

    With `layers` ('all' or '0,3,-1') every chosen layer's pooled vector: OUT.npy is (N, L', D). With `tokens`
    every token's states instead (the last layer unless `layers` says): OUT.npy is (N_tokens, L', D) and
    OUT.tokens.tsv says which text, position and token each row is.
    """
    console = console or Console(stderr=True)
    out = Path(job.out)
    rows_file, tokens_file = out.with_name(f"{out.stem}.rows.npy"), out.with_name(f"{out.stem}.tokens.tsv")
    _check_outputs(job, out, rows_file, tokens_file)
    files = find_files(job.inputs)
    encoder = SentenceEncoder(job.model, batch_size=job.batch_size, precision=job.precision, compile=job.compile,
                              compile_shapes=job.compile_shapes)
    chosen = parse_layers(job.layers or "-1", encoder.layer_count) if job.layers is not None or job.tokens else None
    found = scan(files, job.text_field, job.id_field, job.keep_empty)
    if found.rows == 0:
        raise BertkitError(f"{', '.join(map(str, job.inputs))}: no texts to embed"
                           + (f" ({found.empty:,} empty)" if found.empty else ""))
    if job.tokens:
        return _token_states(encoder, files, found, chosen, out, tokens_file, job.text_field, job.keep_empty,
                             job.chunk_size, job.progress, console)
    mapped = out.suffix.lower() == ".npy" and found.empty > 0 and not job.keep_empty
    _write_pooled(job, encoder, files, found, chosen, out, rows_file if mapped else None, tokens_file, console)
    truncation_warning(console, encoder)
    if found.empty and not job.keep_empty:
        where = f"{rows_file} maps each row to its input position" if mapped else "each row carries its file and line"
        console.print(f"[yellow]skipped {found.empty:,} empty texts (input positions "
                      f"{', '.join(map(str, found.empty_rows[:5]))}{' …' if found.empty > 5 else ''}); {where}; "
                      "--keep-empty embeds them as empty strings instead")
    elif found.empty:
        one = found.empty == 1
        console.print(f"{found.empty:,} empty text{'' if one else 's'} {'was' if one else 'were'} embedded as "
                      f"empty string{'' if one else 's'} (--keep-empty)")
    shape = f"{found.rows:,} × {encoder.dim}" if chosen is None else \
        f"{found.rows:,} × {len(chosen)} layers ({', '.join(map(str, chosen))}) × {encoder.dim}"
    console.print(f"wrote {shape} embeddings to {out}")
    return EmbedResult(out=out, rows=found.rows, dim=encoder.dim, texts=found.rows, empty=found.empty,
                       truncated=encoder.truncated, model=encoder.identity, layers=chosen,
                       rows_file=rows_file if mapped else None)


def _check_outputs(job: EmbedJob, out: Path, rows_file: Path, tokens_file: Path) -> None:
    """The options that cannot go together, and the output files this run may write or remove: OUT and, beside a
    .npy, its row map and token table (one of the two is written, the other removed as stale) — each only over one
    bertkit wrote, and a sidecar only as part of the output it belongs to: beside no OUT, it is somebody else's."""
    suffix, per_layer = out.suffix.lower(), job.layers is not None or job.tokens
    if suffix not in FORMATS:
        raise BertkitError(f"{out}: unknown output format (allowed: {', '.join(FORMATS)})")
    if per_layer and suffix != ".npy":
        raise BertkitError(f"{out}: --layers and --tokens write a .npy array (with a layer axis); Parquet holds one "
                           "vector per text")
    if per_layer and job.id_field is not None:
        raise BertkitError("--id-field needs a .parquet output, --layers / --tokens a .npy one")
    claim(out, EMBEDDINGS_NPY if suffix == ".npy" else EMBEDDINGS_PARQUET, job.overwrite,
          inputs=(*job.inputs, job.model))
    for side, kind in ((rows_file, ROWS_NPY), (tokens_file, TOKENS_TSV)) if suffix == ".npy" else ():
        if side.exists() and not out.exists():
            raise BertkitError(f"{side}: already exists beside {out}, which is not there: it is not this output's; "
                               "move it or choose another --out")
        claim(side, kind, job.overwrite, inputs=(*job.inputs, job.model))
    if job.id_field is not None and suffix == ".npy":
        raise BertkitError(f"{out}: ids need a .parquet output (an .npy file holds only the matrix)")
    if job.chunk_size < job.batch_size:
        raise BertkitError(f"--chunk-size {job.chunk_size} is smaller than --batch-size {job.batch_size}")
    if job.compile and per_layer:
        raise BertkitError("--compile applies to pooled embeddings; drop it with --layers / --tokens")


def _write_pooled(job: EmbedJob, encoder: SentenceEncoder, files: list[Path], found: InputScan,
                  chosen: list[int] | None, out: Path, rows_file: Path | None, tokens_file: Path,
                  console: Console) -> None:
    """Embed every text chunk by chunk into OUT (and, where empty texts were skipped, the row map `rows_file`),
    staged beside them and renamed into place only when every row is written."""
    suffix = out.suffix.lower()
    stale_rows = out.with_name(f"{out.stem}.rows.npy")
    tmp, tmp_rows = _staged(out, stale_rows)
    bar = _bar("embed", console, job.progress)
    writer = row_map = None
    try:
        with disk_errors(out), bar:
            task = bar.add_task("embed", total=found.rows)
            dims = (encoder.dim,) if chosen is None else (len(chosen), encoder.dim)
            writer = EmbeddingWriter(tmp, suffix, found.rows, dims, job.id_field is not None)
            row_map = NpyWriter(tmp_rows, np.int64, (found.rows,)) if rows_file is not None else None
            for chunk in chunks(files, job.text_field, job.id_field, job.keep_empty, job.chunk_size):
                texts = [r.text for _, _, r in chunk]
                advance = lambda n: bar.advance(task, n)  # noqa: E731
                vectors = encoder.encode(texts, on_batch=advance) if chosen is None else \
                    encoder.encode_layers(texts, chosen, on_batch=advance)  # (n, D) | (n, L', D)
                if row_map is not None and writer.position + len(chunk) <= found.rows:
                    row_map.write(np.array([p for p, _, _ in chunk], dtype=np.int64))
                writer.write(vectors, chunk)
            if writer.position != found.rows:
                raise BertkitError(f"the inputs changed while being embedded ({found.rows:,} texts counted, "
                                   f"{writer.position:,} read); nothing was written")
            writer.close()  # fsynced: only the renames are left
            if row_map is not None:
                row_map.close()
            # commit: the row map first, then the embeddings (a stale map of an earlier run never survives)
            if rows_file is not None:
                replace(tmp_rows, rows_file)
            elif suffix == ".npy":
                stale_rows.unlink(missing_ok=True)
            if suffix == ".npy":  # (reached only with --overwrite if there was one) a token run's sidecar is stale
                tokens_file.unlink(missing_ok=True)
            replace(tmp, out)
    finally:
        for open_writer in (writer, row_map):
            if open_writer is not None:
                open_writer.abandon()
        tmp.unlink(missing_ok=True)
        tmp_rows.unlink(missing_ok=True)


def _token_states(encoder: SentenceEncoder, files: list[Path], found: InputScan, layers: list[int], out: Path,
                  tokens_file: Path, text_field: str, keep_empty: bool, chunk_size: int, progress: bool,
                  console: Console) -> EmbedResult:
    """Every token's states of the chosen layers: OUT.npy (N_tokens, L', D) and OUT.tokens.tsv (row, text,
    position, token_id, token), where `text` is the input position (empty texts counted, as in OUT.rows.npy)."""
    tokenizer = encoder.encoder
    total = sum(len(e.input_ids) for chunk in chunks(files, text_field, None, keep_empty, chunk_size)
                for e in tokenizer.texts([r.text for _, _, r in chunk]))  # a counting pass sizes the array
    tmp, tmp_tokens = _staged(out, tokens_file)
    bar = _bar("embed tokens", console, progress)
    array = None
    try:
        with disk_errors(out), bar, tmp_tokens.open("w", encoding="utf-8") as sidecar:
            task = bar.add_task("embed", total=found.rows)
            array = NpyWriter(tmp, np.float32, (total, len(layers), encoder.dim))
            sidecar.write("row\ttext\tposition\ttoken_id\ttoken\n")
            row = 0
            for chunk in chunks(files, text_field, None, keep_empty, chunk_size):
                encoded_chunk = tokenizer.texts([r.text for _, _, r in chunk])
                states = encoder.encode_layers_encoded(encoded_chunk, layers, tokens=True,
                                                       on_batch=lambda n: bar.advance(task, n))
                for (position, _, _), encoded, text_states in zip(chunk, encoded_chunk, states):
                    if row + len(text_states) > total:
                        raise BertkitError("the inputs changed while being embedded; nothing was written")
                    array.write(text_states)  # (T, L', D)
                    for index, token_id in enumerate(encoded.input_ids):
                        token = tokenizer.tokenizer.id_to_token(token_id) or ""
                        sidecar.write(f"{row + index}\t{position}\t{index}\t{token_id}\t"
                                      f"{token.replace(chr(9), ' ').replace(chr(10), ' ')}\n")
                    row += len(text_states)
            if row != total:
                raise BertkitError("the inputs changed while being embedded; nothing was written")
            array.close()
            sidecar.flush()
            os.fsync(sidecar.fileno())
            replace(tmp_tokens, tokens_file)
            out.with_name(f"{out.stem}.rows.npy").unlink(missing_ok=True)  # a pooled run's row map is stale now
            replace(tmp, out)
    finally:
        if array is not None:
            array.abandon()
        tmp.unlink(missing_ok=True)
        tmp_tokens.unlink(missing_ok=True)
    truncation_warning(console, encoder)
    console.print(f"wrote {total:,} tokens × {len(layers)} layers ({', '.join(map(str, layers))}) × {encoder.dim} "
                  f"to {out} (which text, position and token each row is: {tokens_file})")
    return EmbedResult(out=out, rows=total, dim=encoder.dim, texts=found.rows, empty=found.empty,
                       truncated=encoder.truncated, model=encoder.identity, layers=layers, tokens_file=tokens_file)
