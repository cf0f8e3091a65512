"""The GLUE tasks available offline, read as GLUE ships them, and their dev metrics as GLUE defines them.

Each file has its own layout (data/glue/README.md): CoLA has no header row (source, label, original mark, sentence),
MRPC starts with a UTF-8 byte-order mark and names its columns `Quality #1 ID #2 ID #1 String #2 String`, RTE's
labels are the strings `entailment` / `not_entailment`, SST-2 has a `sentence label` header. Every reader returns
the same rows — (text, pair or None, label as a string), texts stripped as every other reader strips them (SST-2's
end in a space: scored unstripped, dev saw a token training never had) — which `bertkit glue` writes as JSONL for
ordinary `finetune classify` runs (STS-B's 0-5 similarity: `--regression`, the classifier with one output). MNLI,
QQP and QNLI cannot be had offline.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.metrics import correlation_metrics
from bertkit.text.labels import canonical_label

Row = tuple[str, str | None, str]  # (text, pair or None, label)


def _tsv(path: Path) -> list[list[str]]:
    """The rows of a GLUE TSV: tab-separated, no quoting (MRPC's texts hold bare `"`), a byte-order mark dropped."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        return [row for row in csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if row]


def _by_header(path: Path, text: str, pair: str | None, label: str) -> list[Row]:
    """Rows of a TSV with a header row, by column name."""
    rows = _tsv(path)
    if not rows:
        raise BertkitError(f"{path}: empty")
    header = rows[0]
    missing = [c for c in (text, pair, label) if c is not None and c not in header]
    if missing:
        raise BertkitError(f"{path}: no column {missing[0]!r} (columns: {', '.join(header)})")
    at = {name: header.index(name) for name in header}
    out = []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) < len(header):
            raise BertkitError(f"{path}:{number}: {len(row)} columns, the header has {len(header)}")
        out.append((row[at[text]].strip(), row[at[pair]].strip() if pair else None, row[at[label]].strip()))
    return out


def _cola(path: Path) -> list[Row]:
    """CoLA: no header; source, label, original mark, sentence."""
    out = []
    for number, row in enumerate(_tsv(path), start=1):
        if len(row) != 4:
            raise BertkitError(f"{path}:{number}: CoLA rows have 4 columns (source, label, mark, sentence), this has "
                               f"{len(row)}")
        out.append((row[3].strip(), None, row[1].strip()))
    return out


def _sts(path: Path) -> list[Row]:
    """The STS benchmark's own layout: no header; genre, file, year, id, score, sentence 1, sentence 2 (some rows
    carry more columns after them)."""
    out = []
    for number, row in enumerate(_tsv(path), start=1):
        if len(row) < 7:
            raise BertkitError(f"{path}:{number}: STS-B rows have 7 columns (genre, file, year, id, score, sentence "
                               f"1, sentence 2), this has {len(row)}")
        out.append((row[5].strip(), row[6].strip(), row[4].strip()))
    return out


@dataclass(frozen=True)
class GlueTask:
    """One task: where its files are (data-root relative), how to read them, its metrics on dev (the first is the
    one the GLUE average takes), its positive label (for F1), and the validation metric its cells keep their best
    checkpoint by (`selection`: the task's own metric where the finetuning kind computes it, the nearest otherwise)."""

    name: str
    title: str
    train: str
    dev: str
    read: Callable[[Path], list[Row]]
    metrics: tuple[str, ...]
    pair: bool = False
    positive: str = "1"
    kind: str = "classify"  # the finetuning kind: classify, or regress (a score)
    selection: str = "accuracy"  # a validation metric of `kind` (tasks/classify.py, tasks/regress.py)

    @property
    def metric(self) -> str:
        """The task's main metric (the GLUE average takes it)."""
        return self.metrics[0]


TASKS: dict[str, GlueTask] = {task.name: task for task in (
    GlueTask("cola", "CoLA", "glue/CoLA/train.tsv", "glue/CoLA/dev.tsv", _cola, ("mcc", "accuracy"),
             selection="mcc"),  # by accuracy, a cell kept the majority-class checkpoint (70% acceptable): MCC 0
    GlueTask("sst2", "SST-2", "sst2/train.tsv", "sst2/dev.tsv",
             lambda p: _by_header(p, "sentence", None, "label"), ("accuracy",)),
    GlueTask("stsb", "STS-B", "stsb/sts-train.csv", "stsb/sts-dev.csv", _sts, ("spearman", "pearson"), pair=True,
             kind="regress", selection="spearman"),
    GlueTask("mrpc", "MRPC", "glue/MRPC/train.tsv", "glue/MRPC/dev.tsv",
             lambda p: _by_header(p, "#1 String", "#2 String", "Quality"), ("f1", "accuracy"), pair=True,
             selection="macro_f1"),  # the classifier's validation has macro F1, the nearest to the positive class's
    GlueTask("rte", "RTE", "glue/RTE/train.tsv", "glue/RTE/dev.tsv",
             lambda p: _by_header(p, "sentence1", "sentence2", "label"), ("accuracy",), pair=True,
             positive="entailment"),
    GlueTask("wnli", "WNLI", "glue/WNLI/train.tsv", "glue/WNLI/dev.tsv",
             lambda p: _by_header(p, "sentence1", "sentence2", "label"), ("accuracy",), pair=True),
)}
UNAVAILABLE = {"mnli": "not available offline", "qqp": "not available offline", "qnli": "not available offline"}
GLUE_LEFT_OUT = "no MNLI/QQP/QNLI: not available offline"


def glue_task(name: str) -> GlueTask:
    """The task called `name` (case-insensitive), or one clear error listing the valid names."""
    key = name.strip().lower().replace("-", "")
    if key in TASKS:
        return TASKS[key]
    why = f" ({UNAVAILABLE[key]})" if key in UNAVAILABLE else ""
    raise BertkitError(f"--tasks: no GLUE task {name!r} here{why}; valid: {','.join(TASKS)}")


def task_metrics(task: GlueTask, gold: list[str], predicted: list[str]) -> dict[str, float]:
    """The task's dev metrics as GLUE defines them (scikit-learn, scipy): accuracy, Matthews correlation, F1 of the
    positive class; for STS-B Spearman and Pearson correlation (0 where a constant prediction leaves them
    undefined, as for MCC)."""
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    gold = [canonical_label(g)[0] or g for g in gold]  # as a run's labels.json names them ("1.0" is "1")
    if task.kind == "regress":
        scores = correlation_metrics([float(g) for g in gold], [float(p) for p in predicted])
        return {name: 0.0 if math.isnan(scores[name]) else scores[name] for name in task.metrics}
    scores = {"accuracy": float(accuracy_score(gold, predicted))}
    if "mcc" in task.metrics:
        scores["mcc"] = float(matthews_corrcoef(gold, predicted)) if len(set(gold) | set(predicted)) > 1 else 0.0
    if "f1" in task.metrics:
        scores["f1"] = float(f1_score(gold, predicted, pos_label=task.positive, average="binary", zero_division=0))
    return {name: scores[name] for name in task.metrics}


def majority_baseline(task: GlueTask, train: list[Row], dev: list[Row]) -> dict[str, float]:
    """What always answering the training set's most frequent label scores on dev (STS-B: its mean score, a
    constant, so 0 correlation)."""
    labels = [row[2] for row in train]
    if task.kind == "regress":
        mean = str(sum(float(y) for y in labels) / len(labels))
        return task_metrics(task, [row[2] for row in dev], [mean] * len(dev))
    majority = max(sorted(set(labels)), key=labels.count)
    gold = [row[2] for row in dev]
    return task_metrics(task, gold, [majority] * len(gold))
