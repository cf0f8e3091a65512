"""`bertkit plot`: loss and metric curves of a run (train and validation): a pretraining's masked-token accuracy
(a decoder's next-token accuracy) with the unigram baseline, a finetuning's validation metric (the one that picks
its best checkpoint)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.run.directory import BASELINE_FILE, RESULTS_FILE, read_json
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
    if out is not None and Path(out).suffix.lower() != ".png":
        raise BertkitError(f"{out}: plot writes a PNG; give --out a .png path")
    records = read_metrics(run_dir)
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval" and "val_loss" in r]
    if not train and not evals:
        raise BertkitError(f"{path}: no logged steps yet")
    baseline = {}
    if (Path(run_dir) / BASELINE_FILE).is_file():
        baseline = read_json(Path(run_dir) / BASELINE_FILE, "baseline").get("unigram") or {}

    # a Figure of its own, not pyplot's: files only, never a window, and the caller's backend (a notebook's inline
    # one) left as it was (matplotlib.use("Agg") switched it for the whole process)
    from matplotlib.figure import Figure

    metric = curve_metric(run_dir, evals)
    loss_title, metric_title = pretraining_titles(run_dir) if metric == "val_accuracy" else ("loss", metric)
    fig = Figure(figsize=(11, 4))
    ax_loss, ax_metric = fig.subplots(1, 2)
    # (panel, train key, validation key, title); a finetuning logs its training accuracy as `accuracy` too
    panels = ((ax_loss, "loss", "val_loss", loss_title),
              (ax_metric, "accuracy" if metric in ("val_accuracy", "accuracy") else None, metric, metric_title))
    train_losses, loss_label = _train_losses(run_dir, train) if metric == "val_accuracy" else (None, "train")
    for ax, train_key, val_key, title in panels:
        if train and train_key == "loss" and train_losses is not None:
            ax.plot([r["step"] for r in train], train_losses, label=loss_label, alpha=0.6)
        elif train and train_key in train[0]:
            ax.plot([r["step"] for r in train], [r[train_key] for r in train], label="train", alpha=0.6)
        points = [r for r in evals if val_key in r]
        if points:
            ax.plot([r["step"] for r in points], [r[val_key] for r in points], "o-", color="C1", label="validation")
        if val_key in baseline:
            ax.axhline(baseline[val_key], color="gray", linestyle="--", label="unigram baseline")
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend()
    fig.suptitle(Path(run_dir).resolve().name)
    fig.tight_layout()
    target = Path(out) if out else Path(run_dir) / "curves.png"
    # the run's own curves.png is the plot's by design; any other target only over a PNG (replaced: a plot is
    # cheap to redraw, and redrawing is what `plot` is for)
    claim(target, PLOT, overwrite=True, inputs=(run_dir,), allow_inside=run_dir, replacer="`plot`")
    with atomic_file(target, overwrite=True) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    return PlotResult(target)


def _train_losses(run_dir: Path, train: list[dict]) -> tuple[list[float] | None, str]:
    """The training curve the loss panel sets beside validation's MLM loss, and its legend: ELECTRA's generator loss
    (`gen_loss`), an MLM run's MLM part without its contrastive term (loss - weight x contrastive_loss). The whole
    objective was drawn as the "MLM loss": ~40 beside a validation 6.8 for rtd (50 x the discriminator's)."""
    if not train:
        return None, "train"
    if all("gen_loss" in r for r in train):
        return [r["gen_loss"] for r in train], "train (generator MLM)"
    if all("contrastive_loss" in r for r in train):
        config = Path(run_dir) / "config.json"
        weight = (read_json(config, "config").get("train") or {}).get("contrastive_weight") if config.is_file() \
            else None
        if isinstance(weight, (int, float)):
            return [r["loss"] - weight * r["contrastive_loss"] for r in train], "train (MLM part)"
    return None, "train"


def pretraining_titles(run_dir: Path) -> tuple[str, str]:
    """The two panels' titles for a pretraining run, by its objective (config.json's train.objective): a decoder's
    next-token loss and accuracy, else masked-token ones (ELECTRA's validation is its generator's MLM)."""
    config = Path(run_dir) / "config.json"
    objective = (read_json(config, "config").get("train") or {}).get("objective") if config.is_file() else None
    if objective == "clm":
        return "LM loss (nats / token)", "next-token accuracy"
    return "MLM loss (nats / masked token)", "masked-token accuracy"


def curve_metric(run_dir: Path, evals: list[dict]) -> str:
    """The validation key of the right panel: a pretraining's masked-token accuracy (`val_accuracy`), else the
    metric that picks a finetuning's best checkpoint (results.json's `metric`: accuracy, f1, spearman, ...), else
    (a run still training) the first metric its evaluations log."""
    if any("val_accuracy" in r for r in evals) or not evals:
        return "val_accuracy"
    results = Path(run_dir) / RESULTS_FILE
    chosen = read_json(results, "results").get("metric") if results.is_file() else None
    logged = [key for key in evals[-1] if key not in ("kind", "step", "val_loss")]
    if chosen in logged:
        return chosen
    return logged[0] if logged else "val_accuracy"
