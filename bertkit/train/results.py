"""What a run trained for a validation metric (finetune, SBERT, seq2seq) reports: its results.json, typed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.config import Config
from bertkit.errors import need_config
from bertkit.run.files import to_json


def as_stored(results: dict) -> dict:
    """`results` as results.json holds them (NaN and inf become null): a result built from what a run just computed
    then equals the one `--resume` reads back from the file."""
    return json.loads(to_json(results))


@dataclass(frozen=True)
class FinetuneJob:
    """What a finetuning command (`bertkit finetune classify|ner|sentence|seq2seq`) is asked: the recipe (after
    `--set` and the command's options), the run to start from (pretrained or imported; seq2seq: an encoder-decoder
    run, None: from scratch; None on resume), the run directory to write, and whether to continue the run in `out`.
    One class for the finetune and seq2seq jobs, which may not import each other."""

    config: Config
    model: Path | None
    out: Path
    resume: bool = False
    progress: bool = True
    accept_changed_data: bool = False  # resume although a task file or the base model changed (recorded)
    skip_bad_lines: bool = False  # skip task-file rows with no label or an empty text (counted) instead of stopping
    step_cap: int | None = None  # a cap on the steps train.epochs gives (`bertkit glue --steps`): whichever is fewer

    def __post_init__(self) -> None:
        need_config(self.config, "FinetuneJob")


@dataclass(frozen=True)
class FinetuneResult:
    """A finished finetuning run: where it is, the checkpoint kept (the best by `metric`) and the run's length, and
    the kept weights' validation scores (floats, plus details such as a confusion matrix or a per-label table;
    empty on the other processes of a distributed run: the main one evaluates). `already_done` is true when
    `--resume` found the run complete and changed nothing."""

    out: Path
    metric: str
    best_step: int
    steps: int
    validation: dict[str, Any] = field(default_factory=dict)
    stopped_early: bool = False
    precision: str = "fp32"
    already_done: bool = False

    @classmethod
    def from_results(cls, out: Path, results: dict, already_done: bool = False) -> FinetuneResult:
        """From a run's results.json (or the summary it is written from)."""
        results = as_stored(results)
        return cls(out=Path(out), metric=results["metric"], best_step=int(results["best_step"]),
                   steps=int(results["steps"]), validation=dict(results.get("validation", {})),
                   stopped_early=bool(results.get("stopped_early", False)),
                   precision=results.get("precision", "fp32"), already_done=already_done)

    @property
    def score(self) -> float:
        """The kept checkpoint's validation `metric` (NaN where it is undefined, e.g. a constant prediction's
        correlation: stored as null)."""
        value = self.validation[self.metric]
        return float("nan") if value is None else float(value)
