"""`bertkit plot`: loss and accuracy curves of a run (train and validation), with the unigram baseline."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.run.directory import BASELINE_FILE, read_json
from bertkit.run.files import atomic_file
from bertkit.run.outputs import PLOT, claim
from bertkit.run.metrics import METRICS_FILE, read_metrics


@dataclass(frozen=True)
class PlotJob:
    """What `bertkit plot` is asked: a training run, and the PNG to write (default RUN/curves.png)."""

    run: Path
    out: Path | None = None


@dataclass(frozen=True)
class PlotResult:
    """The PNG written."""

    path: Path


def run(job: PlotJob) -> PlotResult:
    """Plot the run's train and validation curves (and its unigram baseline) to a PNG."""
    run_dir, out = job.run, job.out
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        raise BertkitError(f"{run_dir}: no {METRICS_FILE} (is it a training run?)")
    records = read_metrics(run_dir)
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval" and "val_loss" in r]
    if not train and not evals:
        raise BertkitError(f"{path}: no logged steps yet")
    baseline = {}
    if (Path(run_dir) / BASELINE_FILE).is_file():
        baseline = read_json(Path(run_dir) / BASELINE_FILE, "baseline").get("unigram") or {}

    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, title in ((ax_loss, "loss", "MLM loss (nats / masked token)"),
                           (ax_acc, "accuracy", "masked-token accuracy")):
        if train and key in train[0]:
            ax.plot([r["step"] for r in train], [r[key] for r in train], label="train", alpha=0.6)
        if evals:
            ax.plot([r["step"] for r in evals], [r[f"val_{key}"] for r in evals], "o-", label="validation")
        if f"val_{key}" in baseline:
            ax.axhline(baseline[f"val_{key}"], color="gray", linestyle="--", label="unigram baseline")
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(Path(run_dir).resolve().name)
    fig.tight_layout()
    target = Path(out) if out else Path(run_dir) / "curves.png"
    # the run's own curves.png is the plot's by design; any other target only over a PNG (replaced: a plot is
    # cheap to redraw, and redrawing is what `plot` is for)
    claim(target, PLOT, overwrite=True, inputs=(run_dir,), allow_inside=run_dir, replacer="`plot`")
    with atomic_file(target, overwrite=True) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return PlotResult(target)
