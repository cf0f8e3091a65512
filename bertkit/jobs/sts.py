"""`bertkit evaluate-sts`: Spearman and Pearson correlation of a model's cosine similarities with gold scores.

Works on any encoder run (pretrained, imported, SBERT-trained): sentences are embedded with the run's `[sentence]`
settings, as `embed` and `search` do. Reads the STS benchmark's own files (tab-separated, no header, score in
column 4 and sentences in 5 and 6) or any CSV / TSV / JSONL with `sentence1`, `sentence2` and `score` columns;
other layouts name their columns.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rich.console import Console

from bertkit.embedding import SentenceEncoder, truncation_warning
from bertkit.errors import BertkitError
from bertkit.metrics import correlation_metrics
from bertkit.paths import resolve_data_path
from bertkit.run.files import atomic_file
from bertkit.text.corpus import allow_long_fields, csv_dialect, csv_error
from bertkit.text.tasks import read_pairs

NAMED = ("sentence1", "sentence2", "score")
STS_BENCHMARK = ("5", "6", "4")  # stsbenchmark's sts-*.csv: genre, file, year, id, score, sentence1, sentence2


def sts_columns(path: Path) -> tuple[str, str, str]:
    """The columns of a scored-pair file: named (sentence1, sentence2, score; or label for the score) when its
    header has them, else the STS benchmark's positions when it looks like one."""
    if path.suffix.lower() in (".jsonl", ".json"):
        return NAMED
    try:
        with path.open(encoding="utf-8-sig") as fh:
            first = fh.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise BertkitError(f"{path}: unreadable ({exc})") from None
    allow_long_fields()
    try:
        fields = next(csv.reader([first], **csv_dialect(first, path.suffix.lower())), [])
    except csv.Error as exc:
        raise csv_error(path, 1, exc, path.suffix.lower()) from None
    if {"sentence1", "sentence2"} <= set(fields):
        return ("sentence1", "sentence2", "score" if "score" in fields else "label")
    try:
        if len(fields) >= 7 and 0.0 <= float(fields[4]) <= 5.0:
            return STS_BENCHMARK
    except ValueError:
        pass
    raise BertkitError(f"{path}: cannot tell its columns (no sentence1/sentence2 header, not the STS benchmark "
                       "layout); pass --sentence1-column, --sentence2-column and --score-column")


def evaluate_sts(model: Path, data: Path, columns: tuple[str | None, str | None, str | None] = (None, None, None),
                 max_score: float = 5.0, batch_size: int = 64, out: Path | None = None, overwrite: bool = False,
                 console: Console | None = None, precision: str = "auto") -> dict:
    """Embed both sides of every pair, correlate cos(u, v) with the gold scores; print and optionally write JSON."""
    console = console or Console()
    if not max_score > 0:
        raise BertkitError(f"--max-score: must be > 0, got {max_score}")
    if out is not None and Path(out).exists() and not overwrite:
        raise BertkitError(f"{out}: already exists (choose another --out or pass --overwrite)")
    data = resolve_data_path(data)
    if not data.is_file():
        raise BertkitError(f"{data}: no such file")
    detected = sts_columns(data) if None in columns else columns
    first, second, score = (given or auto for given, auto in zip(columns, detected))
    pairs = read_pairs(data, first, second, "score", score, max_score=max_score)
    encoder = SentenceEncoder(model, batch_size=batch_size, precision=precision)
    cosine = encoder.similarity([p.text for p in pairs], [p.pair for p in pairs])
    result = correlation_metrics([p.score for p in pairs], cosine)
    result.update({"model": str(model), "data": str(data), "truncated": encoder.truncated,
                   "pooling": encoder.sentence.pooling})
    truncation_warning(console, encoder, "sentences")
    console.print(f"{data}: {result['pairs']:,} pairs  Spearman {100 * result['spearman']:.2f}  "
                  f"Pearson {100 * result['pearson']:.2f}  (cosine similarity, {encoder.sentence.pooling} pooling)")
    if out is not None:
        with atomic_file(out, overwrite=overwrite) as tmp:
            tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result
