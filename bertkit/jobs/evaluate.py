"""`bertkit evaluate`: a finetuned model on a labelled file — metrics and confusion matrix (classification) or
entity-level precision / recall / F1 overall and per type (NER, seqeval strict).

Labels the model never saw are reported and counted as errors, never a crash.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bertkit.errors import BertkitError
from bertkit.inference import TaskModel
from bertkit.run.files import atomic_file
from bertkit.tasks.registry import finetune_task


def run(model: Path, data: Path, overrides: dict | None = None, out: Path | None = None,
        overwrite: bool = False, console: Console | None = None, precision: str = "auto") -> dict:
    """Evaluate the finetuned run `model` on `data` (columns as at finetuning unless overridden); print a report,
    write it as JSON to `out` when given."""
    console = console or Console()
    if out is not None and Path(out).exists() and not overwrite:
        raise BertkitError(f"{out}: already exists (choose another --out or pass --overwrite)")
    task_model = TaskModel(model, precision=precision)
    task = dataclasses.replace(task_model.config.task, **{k: v for k, v in (overrides or {}).items()
                                                          if v is not None})
    examples = finetune_task(task.kind).read(task, data)
    result = task_model.evaluate(examples)
    report(console, task_model.kind, result, data)
    if out is not None:
        with atomic_file(out, overwrite=overwrite) as tmp:
            tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def report(console: Console, kind: str, result: dict, data: Path) -> None:
    """Human-readable metrics (rich tables)."""
    if result["truncated"]:
        console.print(f"[yellow]warning: {result['truncated']:,} examples were longer than the model's max_length "
                      "and were truncated")
    if result["unseen_labels"]:
        count = result.get("unseen_examples", result.get("unseen_tags"))
        console.print(f"[yellow]warning: {count:,} {'examples' if kind == 'classify' else 'tags'} carry labels the "
                      f"model never saw ({', '.join(result['unseen_labels'])}): counted as errors")
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
                  f"recall {result['recall']:.4f}  F1 {result['f1']:.4f} (seqeval, strict IOB2)")
    table = Table(title="per entity type", show_edge=False)
    for column in ("type", "precision", "recall", "F1", "support"):
        table.add_column(column, justify="left" if column == "type" else "right")
    for kind_name, scores in result["per_type"].items():
        table.add_row(kind_name, f"{scores['precision']:.4f}", f"{scores['recall']:.4f}", f"{scores['f1']:.4f}",
                      f"{scores['support']:,}")
    console.print(table)
