"""What a run trained for a validation metric (finetune, SBERT, seq2seq) reports: its results.json, typed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class FinetuneResult:
    """A finished finetuning run: where it is, the checkpoint kept (the best by `metric`) and the run's length, and
    the kept weights' validation scores (floats, plus details such as a confusion matrix or a per-label table).
    `already_done` is true when `--resume` found the run complete and changed nothing."""

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
        return cls(out=Path(out), metric=results["metric"], best_step=int(results["best_step"]),
                   steps=int(results["steps"]), validation=dict(results.get("validation", {})),
                   stopped_early=bool(results.get("stopped_early", False)),
                   precision=results.get("precision", "fp32"), already_done=already_done)

    @property
    def score(self) -> float:
        """The kept checkpoint's validation `metric`."""
        return float(self.validation[self.metric])
