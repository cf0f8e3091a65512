"""`bertkit evaluate-sts`: Spearman and Pearson correlation of a model's cosine similarities with gold scores.

Works on any encoder run (pretrained, imported, SBERT-trained): sentences are embedded with the run's `[sentence]`
settings, as `embed` and `search` do. Reads the STS benchmark's own files (tab-separated, no header, score in
column 4 and sentences in 5 and 6) or any CSV / TSV / JSONL with `sentence1`, `sentence2` and `score` columns;
other layouts name their columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from bertkit.embedding import SentenceEncoder, truncation_warning
from bertkit.errors import BertkitError
from bertkit.metrics import correlation_metrics
from bertkit.paths import need_file, resolve_data_path
from bertkit.run.files import atomic_file
from bertkit.run.outputs import STS_REPORT, claim
from bertkit.text.pair_files import sts_columns
from bertkit.text.tasks import read_pairs


@dataclass(frozen=True)
class StsJob:
    """What `bertkit evaluate-sts` is asked: an encoder run, a file of scored pairs, its columns (names or 0-based
    positions; None: detected by `sts_columns`), the top of its score scale, and a JSON file for the result."""

    model: Path
    data: Path
    sentence1_column: str | None = None
    sentence2_column: str | None = None
    score_column: str | None = None
    max_score: float = 5.0
    batch_size: int = 64
    out: Path | None = None
    overwrite: bool = False
    precision: str = "auto"


@dataclass(frozen=True)
class StsResult:
    """Spearman and Pearson correlation of the cosine similarities with the gold scores (NaN when either side is
    constant) over `pairs` pairs, the model and data file (resolved) scored, sentences truncated, and the run's
    pooling: the fields of the JSON report."""

    spearman: float
    pearson: float
    pairs: int
    model: Path
    data: Path
    truncated: int
    pooling: str


def run(job: StsJob, console: Console | None = None) -> StsResult:
    """Embed both sides of every pair, correlate cos(u, v) with the gold scores; print and optionally write JSON."""
    console = console or Console()
    model, max_score, out, overwrite = job.model, job.max_score, job.out, job.overwrite
    columns = (job.sentence1_column, job.sentence2_column, job.score_column)
    if not max_score > 0:
        raise BertkitError(f"--max-score: must be > 0, got {max_score}")
    data = resolve_data_path(job.data)
    if out is not None:
        claim(out, STS_REPORT, overwrite, inputs=(data, model))
    need_file(data)
    detected = sts_columns(data) if None in columns else columns
    first, second, score = (given or auto for given, auto in zip(columns, detected))
    pairs = read_pairs(data, first, second, "score", score, max_score=max_score)
    encoder = SentenceEncoder(model, batch_size=job.batch_size, precision=job.precision)
    cosine = encoder.similarity([p.text for p in pairs], [p.pair for p in pairs])
    # the JSON report keeps the keys, order and values it always had (json's NaN for a constant side included)
    report = correlation_metrics([p.score for p in pairs], cosine)
    report.update({"model": str(model), "data": str(data), "truncated": encoder.truncated,
                   "pooling": encoder.sentence.pooling})
    truncation_warning(console, encoder, "sentences")
    console.print(f"{data}: {report['pairs']:,} pairs  Spearman {100 * report['spearman']:.2f}  "
                  f"Pearson {100 * report['pearson']:.2f}  (cosine similarity, {encoder.sentence.pooling} pooling)")
    if out is not None:
        with atomic_file(out, overwrite=overwrite) as tmp:
            tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return StsResult(spearman=report["spearman"], pearson=report["pearson"], pairs=report["pairs"], model=Path(model),
                     data=data, truncated=encoder.truncated, pooling=encoder.sentence.pooling)
