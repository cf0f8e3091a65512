"""`bertkit predict`: a finetuned model over texts from a file or stdin, one JSON line out per input, in order.

classify: {"text", "label", "score", "scores"}; ner: {"text", "entities": [{"label", "start", "end", "text",
"score"}]} with character offsets into the record's "text" (the input stripped of surrounding spaces). Inputs run
in length-sorted batches; the output keeps the input order.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from bertkit.errors import BertkitError
from bertkit.inference import TaskModel, entities
from bertkit.paths import need_file, one_is_one, resolve_data_path
from bertkit.run.files import atomic_file
from bertkit.run.outputs import PREDICTIONS, claim
from bertkit.text.features import split_words
from bertkit.text.tasks import read_kept, read_texts, split_lines


FORMATS = ("auto", "text", "jsonl", "csv", "tsv")


def input_format(given: str, source: Path | None) -> str:
    """How the input is read: `given`, or (auto) by the file's suffix — .jsonl / .json, .csv, .tsv are rows with
    columns, anything else (and stdin) lines of text."""
    if given not in FORMATS:
        raise BertkitError(f"--input-format {given}: one of {', '.join(FORMATS)}")
    if given != "auto":
        return given
    suffix = "" if source is None else Path(source).suffix.lower()
    return {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv"}.get(suffix, "text")


def _reads_pairs(task_model: TaskModel, pairs: bool | None) -> bool:
    """Whether the inputs are pairs: as said (a --text-pair-column given), else as the run was finetuned."""
    return task_model.kind in ("classify", "regress") and (
        pairs if pairs is not None else task_model.config.task.text_pair_column is not None)


def missing(task_model: TaskModel, inputs: list[tuple[str, str | None]], pairs: bool | None = None) -> list[bool]:
    """Which inputs have no text (or, for a pair model, no pair): finetuning and `evaluate` refuse such rows, and a
    model's answer to an empty input is no prediction of anything. `pairs`: whether the inputs are pairs (None: as
    the run was finetuned)."""
    pairs = _reads_pairs(task_model, pairs)
    return [not text or (pairs and not pair) for text, pair in inputs]


def _fields(task_model: TaskModel, pairs: bool) -> list[str]:
    """The fields of `predict`'s records, in their order."""
    answers = {"ner": ["entities"], "regress": ["score"]}.get(task_model.kind, ["label", "score", "scores"])
    return ["text"] + (["pair"] if _reads_pairs(task_model, pairs) else []) + answers


def predict(task_model: TaskModel, inputs: list[tuple[str, str | None]],
            pairs: bool | None = None) -> tuple[list[dict], int]:
    """One record per input (text, pair) and how many inputs were truncated. An input without its text (or pair)
    keeps its place with no answer: label and score null (a tagger's: no entities). `pairs`: as for `missing`."""
    empty = missing(task_model, inputs, pairs)
    texts = [text for text, _ in inputs]
    if task_model.kind in ("classify", "regress"):
        pairs = [pair or "" for _, pair in inputs] if _reads_pairs(task_model, pairs) else None
        kept = [i for i, gone in enumerate(empty) if not gone]
        results, truncated = task_model.classify([texts[i] for i in kept],
                                                 None if pairs is None else [pairs[i] for i in kept])
        nothing = {"score": None} if task_model.kind == "regress" else {"label": None, "score": None, "scores": {}}
        answers = dict(zip(kept, results))
        records = []
        for i, (text, pair) in enumerate(inputs):
            records.append({"text": text, **({"pair": pair} if pairs is not None else {}), **answers.get(i, nothing)})
        return records, truncated
    spans = [split_words(text) for text in texts]
    tagged, truncated = task_model.tag(texts, spans)
    return [{"text": text, "entities": entities(tags, scores, word_spans, text)}
            for text, word_spans, (tags, scores) in zip(texts, spans, tagged)], truncated


_TAG = re.compile(r"O|[BIES]-\S+|-X-")


def _looks_like_conll(inputs: list[tuple[str, str | None]]) -> bool:
    """Whether most of the first 50 texts are CoNLL column lines: two to five columns, the last a span tag."""
    texts = [text for text, _ in inputs[:50] if text]
    tagged = sum(2 <= len(fields := text.split()) <= 5 and bool(_TAG.fullmatch(fields[-1])) for text in texts)
    return len(texts) >= 3 and tagged > 0.8 * len(texts)


def _read_inputs(path: Path | None, form: str, where: str, columns: tuple, keep: tuple[str, ...],
                 warn) -> tuple[list[tuple[str, str | None]], list[dict]]:
    """The (text, pair) inputs of `path` (None: stdin) read as `form`, and each row's `keep` columns ([] without
    them); what is said names the user's input (`where`), never the temporary copy stdin's rows are read from."""
    if path is None and form == "text":
        return split_lines(sys.stdin.read().split("\n"), columns[1] is not None, warn), []
    if path is not None and form == input_format("auto", path):
        return read_texts(path, *columns, warn), read_kept(path, keep, columns[0]) if keep else []
    # stdin's rows, or a file read otherwise than its suffix says: read as a file of that format
    if path is not None:
        need_file(path)
    data = sys.stdin.buffer.read() if path is None else path.read_bytes()
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / f"{path.stem if path is not None else 'stdin'}.{form.replace('text', 'txt')}"
        copy.write_bytes(data)

        def named(said: str) -> str:  # the user's input, not the copy, in what is said
            return said.replace(str(copy), where)

        try:
            return (read_texts(copy, *columns, lambda said: warn(named(said))),
                    read_kept(copy, keep, columns[0]) if keep else [])
        except BertkitError as exc:
            raise BertkitError(named(str(exc))) from None


@dataclass(frozen=True)
class PredictJob:
    """What `bertkit predict` is asked: a finetuned run, the input texts (a file; None or '-' reads stdin), the JSONL
    file to write (None: stdout), and how to read and batch the inputs."""

    model: Path
    source: Path | None = None
    out: Path | None = None
    text_column: str | None = None
    text_pair_column: str | None = None
    batch_size: int = 64
    overwrite: bool = False
    precision: str = "auto"
    input_format: str = "auto"  # auto: by the file's suffix (stdin: text) | text | jsonl | csv | tsv
    keep_columns: tuple[str, ...] = ()  # input columns copied into each record (rows only: an id, a gold label)

    def __post_init__(self) -> None:
        one_is_one(self, "keep_columns")  # one given as a str is one item


@dataclass(frozen=True)
class PredictResult:
    """One record per input, in input order (what the JSONL lines hold), and how many inputs were truncated."""

    records: list[dict]
    truncated: int


def run(job: PredictJob, console: Console | None = None) -> PredictResult:
    """Predict for every input of `job.source`; JSONL to `job.out` or stdout."""
    console = console or Console(stderr=True)
    model, source, out, overwrite = job.model, job.source, job.out, job.overwrite
    text_column, text_pair_column = job.text_column, job.text_pair_column
    if out is not None:
        claim(out, PREDICTIONS, overwrite, inputs=(source, model))
    task_model = TaskModel(model, batch_size=job.batch_size, precision=job.precision)
    task = task_model.config.task

    def warn(message: str) -> None:
        console.print(f"[yellow]warning: {message}")

    pair_column = task_model.pair_column(text_pair_column, warn)

    stdin = source is None or str(source) == "-"
    where = "stdin" if stdin else str(source)
    form = input_format(job.input_format, None if stdin else source)
    if form == "text" and (job.text_column is not None or job.text_pair_column is not None or job.keep_columns):
        # the column was ignored without a word: each JSON or CSV line was one text (a review, 2026-11-28)
        given = "--text-column" if job.text_column is not None else \
            "--text-pair-column" if job.text_pair_column is not None else "--keep-column"
        raise BertkitError(f"{given}: {where} is read as lines of text, one input per line (a pair model's: "
                           "text<TAB>pair); for rows with columns give --input-format jsonl, csv or tsv")
    columns = (text_column or task.text_column, pair_column)
    fields = _fields(task_model, pair_column is not None)
    if clash := sorted(set(job.keep_columns) & set(fields)):  # before any reading or predicting
        raise BertkitError(f"--keep-column {clash[0]}: the output's own field ({', '.join(fields)}); keep another "
                           "column")
    inputs, kept = _read_inputs(None if stdin else resolve_data_path(source), form, where, columns,
                                job.keep_columns, warn)
    if not inputs:
        raise BertkitError(f"{where}: no input texts")
    if gone := [i for i, empty in enumerate(missing(task_model, inputs, pair_column is not None), start=1) if empty]:
        ner = task_model.kind == "ner"
        what = "no text or no pair" if not ner and pair_column is not None else "no text"
        answer = "no entities" if ner else "their records keep their place with no answer (null)"
        warn(f"{len(gone):,} of {len(inputs):,} inputs have {what} (the first: input {gone[0]:,}): {answer}")
    if task_model.kind == "ner" and _looks_like_conll(inputs):  # each "word POS chunk tag" line was a sentence
        warn(f"{where} looks like a CoNLL file (a word and its tags per line): predict tags raw text, each line a "
             "sentence; score a CoNLL file with `bertkit evaluate`")
    records, truncated = predict(task_model, inputs, pair_column is not None)
    if kept:
        records = [{**columns_of, **record} for columns_of, record in zip(kept, records)]
    if truncated:
        console.print(f"[yellow]warning: {truncated:,} of {len(inputs):,} inputs are longer than "
                      f"{task_model.encoder.max_length} tokens and were truncated"
                      + (" (their cut-off words are tagged O)" if task_model.kind == "ner" else ""))
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    if out is None:
        sys.stdout.write(lines)
        sys.stdout.flush()
    else:
        with atomic_file(out, overwrite=overwrite) as tmp:
            tmp.write_text(lines, encoding="utf-8")
        console.print(f"wrote {len(records):,} predictions to {out}")
    return PredictResult(records, truncated)
