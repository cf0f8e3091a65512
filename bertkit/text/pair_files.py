"""Which columns of a scored-pair file (STS-B and its kind) hold the two sentences and the score, when the user
names none: a header's `sentence1` / `sentence2` / `score` (or `label`, as Hugging Face's GLUE STS-B names it), the
keys of a JSONL file's first record, or the STS benchmark's own headerless layout."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.text.corpus import allow_long_fields, csv_dialect, csv_error

NAMED = ("sentence1", "sentence2", "score")
STS_BENCHMARK = ("5", "6", "4")  # stsbenchmark's sts-*.csv: genre, file, year, id, score, sentence1, sentence2


def _first_line(path: Path, blank_ok: bool) -> str:
    """The file's first line (its first non-blank one where `blank_ok`), without its line end."""
    try:
        with path.open(encoding="utf-8-sig") as fh:
            for line in fh:
                if line.strip() or not blank_ok:
                    return line.rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise BertkitError(f"{path}: unreadable ({exc})") from None
    return ""


def _score_name(names) -> str:
    """The score's column among a header's names: `score`, else `label` (Hugging Face's GLUE STS-B names it so);
    where neither is there, `score`, which the reader's "missing column" error names with --score-column."""
    return "label" if "label" in names and "score" not in names else "score"


def sts_columns(path: Path) -> tuple[str, str, str]:
    """The columns of a scored-pair file: named (sentence1, sentence2, score; or label for the score) when its
    header (a JSONL file: its first record) has them, else the STS benchmark's positions when it looks like one."""
    if path.suffix.lower() in (".jsonl", ".json"):
        try:
            record = json.loads(_first_line(path, blank_ok=True))
        except ValueError:  # the reader names the line and what is wrong with it
            return NAMED
        return (*NAMED[:2], _score_name(record)) if isinstance(record, dict) else NAMED
    first = _first_line(path, blank_ok=False)
    allow_long_fields()
    try:
        fields = next(csv.reader([first], **csv_dialect(first, path.suffix.lower())), [])
    except csv.Error as exc:
        raise csv_error(path, 1, exc, path.suffix.lower()) from None
    if {"sentence1", "sentence2"} <= set(fields):
        return (*NAMED[:2], _score_name(fields))
    try:
        if len(fields) >= 7 and 0.0 <= float(fields[4]) <= 5.0:
            return STS_BENCHMARK
    except ValueError:
        pass
    raise BertkitError(f"{path}: cannot tell its columns (no sentence1/sentence2 header, not the STS benchmark "
                       "layout); pass --sentence1-column, --sentence2-column and --score-column")
