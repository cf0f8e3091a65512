"""The ablation's outputs: ablation.csv (every variant × seed), ablation.md (the table) and ablation.png."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from bertkit.ablation import COLUMNS, eval_curve, row_variant, summarise, variant_folder
from bertkit.run.files import atomic_file


def write_report(out: Path, rows: list[dict], task: str) -> list[Path]:
    """Write the three files (each atomically: a reader never sees half a table); returns their paths."""
    summary = summarise(rows)
    baseline = unigram_baseline(out, rows)
    loss = loss_name(out)
    paths = [out / "ablation.csv", out / "ablation.md", out / "ablation.png"]
    with atomic_file(paths[0], overwrite=True) as tmp:
        _write_csv(tmp, rows)
    with atomic_file(paths[1], overwrite=True) as tmp:
        tmp.write_text(markdown_table(summary, task, baseline, rows, loss), encoding="utf-8")
    with atomic_file(paths[2], overwrite=True) as tmp:
        _plot(tmp, out, summary, rows, task, baseline, loss)
    return paths


def loss_name(out: Path) -> str:
    """What the validation loss is, by the base recipe's objective (plan.json): a decoder's LM loss, else MLM."""
    import json

    try:
        base = json.loads((out / "plan.json").read_text(encoding="utf-8")).get("base") or {}
    except (OSError, ValueError):
        base = {}
    return "LM" if (base.get("train") or {}).get("objective") == "clm" else "MLM"


def unigram_baseline(out: Path, rows: list[dict]) -> dict:
    """The base run's unigram baseline (validation loss and accuracy of predicting by corpus frequency): the
    number a model must beat before it uses any context."""
    import json

    for row in rows:
        path = variant_folder(out, row_variant(row), row["seed"]) / "pretrain" / "baseline.json"
        if row["variant"] == "base" and row["status"] == "ok" and path.is_file():
            return json.loads(path.read_text(encoding="utf-8")).get("unigram", {})
    return {}


def _write_csv(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k) for k in COLUMNS})


def _fmt(value, std=None, digits: int = 3, scale: float = 1.0) -> str:
    if value is None:
        return "–"
    text = f"{value * scale:,.{digits}f}"
    return text + (f" ± {std * scale:.{digits}f}" if std is not None else "")


def _changes(row: dict) -> list[str]:
    """A variant's `section.key=value` changes to the base (ablation.csv's "changes", space-separated)."""
    return str(row.get("changes") or "").split()


# changes after which a variant's validation loss is over other targets than the base's: other masks (rate, whole
# words), other tokens or blocks (tokenizer, block size, held-out share), or another model's loss (rtd: the
# generator's; clm: next tokens). Such a row is shown, not ranked: it was bolded and given a Δ beside the others
_OTHER_TARGETS = ("data.mlm_probability=", "data.whole_word_mask=", "data.validation_fraction=",
                  "data.max_validation_blocks=", "data.block_size=", "model.vocab_size=", "train.objective=",
                  "tokenizer.", "data.corpus=", "data.text_field=")  # (the last two: other documents held out)


def other_targets(row: dict) -> bool:
    """Whether a variant's validation loss is scored on other targets than the base's (`_OTHER_TARGETS`)."""
    return any(change.startswith(_OTHER_TARGETS) for change in _changes(row))


def _paired_delta(variant: dict, base: dict) -> str:
    """Δ validation loss against the base over the seeds both finished (a seed failed on one side would
    otherwise compare different seed sets: the base's hard seed against the variant's missing one). A variant
    with no seed in common with the base whose only change is its seed (`--vary seed=N`: the cheapest noise
    estimate) gets the difference of the means, marked unpaired; any other, "–"."""
    mine, theirs = variant["seed_losses"], base["seed_losses"]
    both = [seed for seed in mine if seed in theirs]
    if both:
        return f"{statistics.fmean(mine[s] - theirs[s] for s in both):+.3f}"
    changes = _changes(variant)
    if mine and theirs and changes and all(c.startswith("train.seed=") for c in changes):
        # only a seed variant: elsewhere (seeds failed on either side, a grid cell changing the seed and more) the
        # difference of means would mix the change with seed noise and be read as the noise itself
        return f"{statistics.fmean(mine.values()) - statistics.fmean(theirs.values()):+.3f} (unpaired)"
    return "–"


def _count(value: float) -> str:
    return f"{value / 1e6:.2f} M" if value >= 1e6 else f"{value / 1e3:.1f} k"


def markdown_table(summary: list[dict], task: str, baseline: dict | None = None, rows: list[dict] = (),
                   loss_kind: str = "MLM") -> str:
    """The table a paper takes: one line per variant, the base first, Δ loss against the base (`rows`: every
    variant × seed, for how many validation examples the downstream scores come from)."""
    base = next((s for s in summary if s["variant"] == "base" and s["val_loss"] is not None), None)
    metric = next((s["downstream_metric"] for s in summary if s.get("downstream_metric")), None)
    head = ["variant", "backbone params", "tokens/s", "tokens seen", f"val {loss_kind} loss", "Δ loss vs base",
            "val accuracy %"]
    if task == "classify":
        sizes = sorted({r["downstream_examples"] for r in rows if r.get("downstream_examples") is not None})
        n = "" if not sizes else f" (n={sizes[0]:,})" if len(sizes) == 1 else f" (n={sizes[0]:,}–{sizes[-1]:,})"
        head.append(f"downstream {metric or 'metric'} %{n}")  # n: the validation examples it is scored on
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ok = [s for s in summary if s["val_loss"] is not None]
    # Seeds planned per variant, from every row: a seed that failed for every variant finished nowhere, and counting
    # only finished seeds would drop it from the table without a word (ablation.csv keeps its errors).
    per_variant: dict[str, int] = {}
    for row in rows:
        per_variant[row["variant"]] = per_variant.get(row["variant"], 0) + 1
    seeds = max([s["seeds"] for s in summary] + list(per_variant.values()), default=0)
    # lost: a seed that every variant ran (two or more) and none finished; not a seed variant's own seed
    # (`--vary seed=2`), nor one whose other variants are still to run (the report is written after each)
    by_seed: dict = {}
    for row in rows:
        by_seed.setdefault(row["seed"], []).append(row)
    # variants that set the seed (`--vary seed=N`, a --grid cell with it) run their own, never the shared ones: not
    # counted as running them
    variants = {row["variant"] for row in rows if not any(c.startswith("train.seed=") for c in _changes(row))}
    lost = sorted((seed for seed, runs in by_seed.items() if len(variants) > 1
                   and {r["variant"] for r in runs} >= variants and all(r["status"] != "ok" for r in runs)), key=str)
    ranked = [s for s in ok if not other_targets(s)]
    best_loss = min((s["val_loss"] for s in ranked), default=None)
    for s in summary:
        if s["status"] != "ok":
            message = " ".join(str(s["message"]).split()).replace("|", "/")  # one table row: no newlines
            cells = [s["variant"], f"{s['status']}: {message}"] + [""] * (len(head) - 2)
            lines.append("| " + " | ".join(cells) + " |")
            continue
        loss = _fmt(s["val_loss"], s["val_loss_std"])
        if other_targets(s):
            loss, delta = f"{loss} †", "– †"
        else:
            loss = f"**{loss}**" if s["val_loss"] == best_loss and len(ranked) > 1 else loss
            delta = "–" if base is None or s is base or s["val_loss"] is None else _paired_delta(s, base)
        name = s["variant"] if s["seeds"] >= seeds else f"{s['variant']} ({s['seeds']}/{seeds} seeds)"
        cells = [name, _count(s["params"]), _fmt(s["tokens_per_s"], None, 0),
                 _count(s["tokens"]), loss, delta,
                 _fmt(s["val_accuracy"], s["val_accuracy_std"], 1, 100)]
        if task == "classify":
            cells.append(_fmt(s["downstream"], s["downstream_std"], 1, 100))
        lines.append("| " + " | ".join(cells) + " |")
    note = f"\nMean ± standard deviation over {seeds} seeds" if seeds > 1 else ""
    if note:
        note += ("; Δ loss is the mean of the per-seed differences over the seeds both runs finished." if
                 any(s["seeds"] < seeds for s in summary if s["status"] == "ok") else ".")
    if lost and ok:
        note += (f"\nSeed{'s' if len(lost) > 1 else ''} {', '.join(map(str, lost))} failed for every variant: the "
                 "figures are over the other seeds (ablation.csv has each error).")
    if any("(unpaired)" in line for line in lines):
        note += ("\nΔ loss marked unpaired: the variant ran on none of the base's seeds (`--vary seed=N`), so it is "
                 "the difference of their means: the seed-to-seed noise itself.")
    if any(other_targets(s) for s in ok):
        note += ("\n† Scored on other validation targets than the base (other masks, tokens or blocks, or another "
                 "model's loss: rtd's is its generator's): shown, not ranked against the others, no Δ; compare such "
                 "variants downstream (`--task classify`).")
    if baseline and "val_loss" in baseline:
        token = "masked token" if loss_kind == "MLM" else "next token"
        note += (f"\nUnigram baseline (predicting every {token} by its corpus frequency): loss "
                 f"{baseline['val_loss']:.3f}, accuracy {100 * baseline['val_accuracy']:.1f}%.")
    return "\n".join(lines) + "\n" + note + "\n"


def _plot(path: Path, out: Path, summary: list[dict], rows: list[dict], task: str, baseline: dict,
          loss_kind: str = "MLM") -> None:
    # a Figure of its own, not pyplot's: files only, never a window, and the caller's backend (a notebook's inline
    # one) left as it was (matplotlib.use("Agg") switched it for the whole process)
    from matplotlib.figure import Figure

    ok = [s for s in summary if s["val_loss"] is not None]
    panels = 3 if task == "classify" else 2
    fig = Figure(figsize=(6 * panels, max(3.5, 0.45 * len(ok) + 1.5)))
    axes = fig.subplots(1, panels)
    names = [s["variant"] for s in ok]
    colours = ["tab:gray" if n == "base" else "tab:blue" for n in names]
    bar_panels = [("val_loss", f"validation {loss_kind} loss (lower is better)", 1.0)]
    if task == "classify":
        bar_panels.append(("downstream", "downstream validation %", 100.0))
    for ax, (key, title, scale) in zip([axes[0], axes[2]] if task == "classify" else [axes[0]], bar_panels):
        values = [(s[key] or 0.0) * scale for s in ok]
        errors = [(s[f"{key}_std"] or 0.0) * scale for s in ok]
        bars = ax.barh(range(len(ok)), values, xerr=errors if any(errors) else None, color=colours)
        ax.bar_label(bars, fmt="%.3f" if scale == 1.0 else "%.1f", fontsize=7, padding=2)
        ax.set_yticks(range(len(ok)), names)
        ax.invert_yaxis()
        base = next((s for s in ok if s["variant"] == "base"), None)
        if base is not None and base[key] is not None:
            ax.axvline(base[key] * scale, color="black", linestyle="--", linewidth=0.8)
        if values:
            low, high = min(values), max(values)
            pad = max(0.05 * (high - low), 1e-3 * max(abs(high), 1.0))
            ax.set_xlim(low - 4 * pad - max(errors, default=0), high + 2 * pad + max(errors, default=0))
        ax.set_title(title)
        ax.grid(axis="x", alpha=0.3)
    curves = axes[1]
    first_seed = {}
    for row in rows:
        if row["status"] == "ok" and row["variant"] not in first_seed:
            first_seed[row["variant"]] = row
    for name, row in first_seed.items():
        folder = variant_folder(out, row_variant(row), row["seed"]) / "pretrain"
        points = eval_curve(folder, row["tokens"] // max(1, row["steps"]))
        if points:
            curves.plot([t / 1e6 for t, _ in points], [v for _, v in points], "o-" if len(points) < 12 else "-",
                        label=name, color="black" if name == "base" else None, markersize=3)
    if "val_loss" in baseline:
        curves.axhline(baseline["val_loss"], color="gray", linestyle=":", label="unigram baseline")
    curves.set_xlabel("tokens seen (millions)")
    curves.set_title(f"validation {loss_kind} loss during training")
    curves.grid(alpha=0.3)
    if first_seed:
        curves.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")

