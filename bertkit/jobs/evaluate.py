"""`bertkit evaluate`: a finetuned model on a labelled file — metrics and confusion matrix (classification) or
entity-level precision / recall / F1 overall and per type (NER, seqeval strict).

Labels the model never saw are reported and counted as errors, never a crash.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bertkit.errors import BertkitError
from bertkit.inference import TaskModel
from bertkit.paths import resolve_data_path
from bertkit.run.files import atomic_file, to_json
from bertkit.run.outputs import EVALUATION, PREDICTIONS, claim
from bertkit.text.labels import written_otherwise
from bertkit.tasks.registry import finetune_task


@dataclass(frozen=True)
class EvaluateJob:
    """What `bertkit evaluate` is asked: a finetuned run, a labelled file, the columns to read it with where they
    differ from the finetuning's (None: the run's), and a JSON file for the report."""

    model: Path
    data: str | Path  # data-root relative is fine
    text_column: str | None = None
    label_column: str | None = None
    tag_column: int | None = None
    out: Path | None = None
    overwrite: bool = False
    precision: str = "auto"
    skip_bad_lines: bool = False  # rows without a label or text skipped and counted (else: one error line)
    text_pair_column: str | None = None  # a pair's second text (an imported transformers pair model needs it)
    batch_size: int = 64  # examples per forward pass (batches sorted by length; the scores do not depend on it)
    predictions: Path | None = None  # JSONL: each example's gold and predicted answer, in file order


@dataclass(frozen=True)
class EvaluateResult:
    """The run's task kind and its scores on the file: classify — examples, accuracy, macro_f1, mcc, confusion;
    ner — sentences, precision, recall, f1, per_type; both — truncated, unseen_labels, model, data,
    inference_precision (what the figures were computed in); with --skip-bad-lines, skipped_rows (the JSON
    report)."""

    kind: str
    scores: dict[str, Any]


def run(job: EvaluateJob, console: Console | None = None) -> EvaluateResult:
    """Evaluate the finetuned run on the labelled file (columns as at finetuning unless overridden); print a report,
    write it as JSON to `job.out` when given."""
    console = console or Console()
    out, data = job.out, resolve_data_path(job.data)  # the report names the file read, as the CLI's always did
    if out is not None:
        claim(out, EVALUATION, job.overwrite, inputs=(data, job.model))
    if job.predictions is not None:
        if out is not None and Path(job.predictions).resolve() == Path(out).resolve():
            raise BertkitError(f"--predictions {job.predictions}: the same file as --out")
        claim(job.predictions, PREDICTIONS, job.overwrite, inputs=(data, job.model),
              hint="choose another --predictions or pass --overwrite")
    task_model = TaskModel(job.model, batch_size=job.batch_size, precision=job.precision)
    columns = {"text_column": job.text_column, "label_column": job.label_column, "tag_column": job.tag_column,
               "text_pair_column": task_model.pair_column(job.text_pair_column,
                                                          lambda said: console.print(f"[yellow]warning: {said}"))}
    # a column the run's task does not read was ignored without a word (`--tag-column 2` on a classifier)
    unread = ("text_column", "label_column") if task_model.kind == "ner" else ("tag_column",)
    for name in (n for n in unread if columns[n] is not None):
        raise BertkitError(f"--{name.replace('_', '-')}: {job.model} is "
                           f"{'a tagger (CoNLL files: --tag-column)' if task_model.kind == 'ner' else 'not a tagger'}"
                           "; it reads no such column")
    task = dataclasses.replace(task_model.config.task, **{k: v for k, v in columns.items() if v is not None})
    if job.skip_bad_lines and task.kind == "ner":
        console.print("[yellow]warning: --skip-bad-lines does nothing for a CoNLL file (a sentence has no label "
                      "column to lack)")
    skipped = []

    def warn(said: str) -> None:
        console.print(f"[yellow]warning: {said}")
        skipped.append(getattr(said, "rows", 0))  # text.tasks.Skipped: the rows --skip-bad-lines left out

    examples = finetune_task(task.kind).read(dataclasses.replace(task_model.config, task=task), data,
                                             job.skip_bad_lines, warn)
    records = [] if job.predictions is not None else None
    scores = task_model.evaluate(examples, records)
    if job.skip_bad_lines and task.kind != "ner":
        scores["skipped_rows"] = sum(skipped)  # in the JSON report: what the scores leave out
    report(console, task_model.kind, scores, data, task_model.labels)
    # what the figures were computed in, and on: bf16 (auto on a CPU with native bf16) can flip a near-tie, so one
    # run's scores differed between machines, and between the run and its fp32 export (a review, 2026-11-28)
    scores.update(model=str(job.model), data=str(data), inference_precision=task_model.precision)
    if task_model.precision == "bf16":
        console.print("computed in bf16 (--precision auto picks it on this machine); --precision fp32 gives the "
                      "figures fp32 gives anywhere")
    if out is not None:
        with atomic_file(out, overwrite=job.overwrite) as tmp:
            tmp.write_text(to_json(scores) + "\n", encoding="utf-8")  # strict: a NaN correlation is null
    if records is not None:
        with atomic_file(job.predictions, overwrite=job.overwrite) as tmp:
            tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        console.print(f"wrote {len(records):,} examples' gold and predicted answers to {job.predictions}")
    return EvaluateResult(task_model.kind, scores)


def report(console: Console, kind: str, result: dict, data: Path, labels: list[str] = ()) -> None:
    """Human-readable metrics (rich tables); `labels`: the run's, for a hint on a label it has written otherwise."""
    if result["truncated"]:
        many = result["truncated"] != 1
        console.print(f"[yellow]warning: {result['truncated']:,} example{'s' if many else ''} "
                      f"{'were' if many else 'was'} longer than the model's max_length and "
                      f"{'were' if many else 'was'} truncated")
    if result["unseen_labels"]:
        count = result.get("unseen_examples", result.get("unseen_tags"))
        what = ("example" if kind == "classify" else "tag") + ("s" if count != 1 else "")
        console.print(f"[yellow]warning: {count:,} {what} {'carry' if count != 1 else 'carries'} labels the "
                      f"model never saw ({', '.join(result['unseen_labels'])}): counted as errors")
        if kind == "classify" and (otherwise := [(label, stored) for label in result["unseen_labels"]
                                                 if (stored := written_otherwise(label, labels)) is not None]):
            label, stored = otherwise[0]
            console.print(f"[yellow]  {label} may be the run's {stored} written otherwise: runs before 2026-11-28 "
                          "stored fractions as Python prints them; if this one did, write the labels as its "
                          "labels.json has them to score them as that class")
    if kind == "regress":
        console.print(f"{data}: {result['examples']:,} examples  Spearman {result['spearman']:.4f}  "
                      f"Pearson {result['pearson']:.4f}  MSE {result['mse']:.4f}")
        return
    if kind == "classify":
        console.print(f"{data}: {result['examples']:,} examples  accuracy {result['accuracy']:.4f}  "
                      f"macro-F1 {result['macro_f1']:.4f}  MCC {result['mcc']:.4f}")
        labels, matrix = result["confusion"]["labels"], result["confusion"]["matrix"]
        table = Table(title="confusion matrix (rows: gold, columns: predicted)", show_edge=False)
        table.add_column("gold \\ predicted")
        for label in labels:
            table.add_column(label, justify="right")
        for label, row in zip(labels, matrix):
            table.add_row(label, *(f"{v:,}" for v in row))
        console.print(table)
        return
    console.print(f"{data}: {result['sentences']:,} sentences  entity precision {result['precision']:.4f}  "
                  f"recall {result['recall']:.4f}  F1 {result['f1']:.4f}  macro-F1 {result['macro_f1']:.4f} "
                  "(seqeval, strict IOB2)")
    table = Table(title="per entity type", show_edge=False)
    for column in ("type", "precision", "recall", "F1", "support"):
        table.add_column(column, justify="left" if column == "type" else "right")
    for kind_name, scores in result["per_type"].items():
        table.add_row(kind_name, f"{scores['precision']:.4f}", f"{scores['recall']:.4f}", f"{scores['f1']:.4f}",
                      f"{scores['support']:,}")
    console.print(table)
