"""`bertkit probe`: layer-wise linear probes (POS, chunks, NER) on frozen models, as a CSV and a line plot.

Every model (any bertkit run, imported Hugging Face models included) reads the same sentences; its states are
extracted once and every task is probed on them. Outputs go to OUT/ (atomically): probe.csv (one row per model,
task and layer) and probe.png (a panel per task, a line per model; selectivity dashed with --control).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bertkit.errors import BertkitError
from bertkit.paths import one_is_one, resolve_data_path
from bertkit.probing import TASKS, LinearProbe, control_labels, kept_items, score, word_features
from bertkit.run.directory import load_run
from bertkit.run.files import atomic_dir
from bertkit.run.outputs import PROBE, claim
from bertkit.text.features import TaskEncoder
from bertkit.text.tasks import hold_out, read_conll
from bertkit.text.tokenizer import load_run_tokenizer, special_ids

COLUMNS = ("model", "task", "layer", "metric", "score", "accuracy", "control_accuracy", "selectivity",
           "train_words", "eval_words")


@dataclass(frozen=True)
class ProbeJob:
    """What `bertkit probe` is asked: the models, the tagging tasks, the CoNLL file(s) and the probes' settings."""

    models: tuple[Path, ...]
    tasks: tuple[str, ...]
    data: str
    out: Path
    eval_data: str | None = None  # None: hold out `eval_fraction` of data's sentences
    column: int | None = None  # the tag column (one task only); None: CoNLL-2003's for the task
    control: bool = False
    max_train_sentences: int = 4000
    max_eval_sentences: int = 1000
    eval_fraction: float = 0.2
    batch_size: int = 32
    max_iter: int = 300  # L-BFGS iterations of each probe
    seed: int = 0
    overwrite: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        one_is_one(self, "models", "tasks")  # one given as a str is one item


@dataclass(frozen=True)
class ProbeResult:
    """One row per model × task × layer (the columns of probe.csv: `COLUMNS`) and the files written."""

    rows: list[dict]
    csv: Path
    plot: Path


def _read(spec: ProbeJob) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]], dict, dict]:
    """Training and evaluation sentences (words) and each task's tags for them."""
    train_path = resolve_data_path(spec.data)
    eval_path = resolve_data_path(spec.eval_data) if spec.eval_data else None
    tags_train, tags_eval, words_train, words_eval = {}, {}, None, None
    for task in spec.tasks:
        column, _, scheme = TASKS[task]
        column = spec.column if spec.column is not None else column
        sentences = read_conll(train_path, column, iob=scheme == "iob")
        if eval_path is not None:
            train, held = sentences, read_conll(eval_path, column, iob=scheme == "iob")
        else:
            train, held = hold_out(sentences, spec.eval_fraction, spec.seed)
        train, held = train[:spec.max_train_sentences], held[:spec.max_eval_sentences]
        words_train, words_eval = [s.tokens for s in train], [s.tokens for s in held]
        tags_train[task], tags_eval[task] = [list(s.tags) for s in train], [list(s.tags) for s in held]
    return words_train, words_eval, tags_train, tags_eval


def run(spec: ProbeJob, console: Console | None = None) -> ProbeResult:
    """Probe every layer of every model for every task; write OUT/probe.csv and OUT/probe.png; return the rows."""
    console = console or Console(stderr=True)
    for task in spec.tasks:
        if task not in TASKS:
            raise BertkitError(f"--task {task!r}: not allowed (allowed: {'|'.join(TASKS)})")
    if len(set(spec.tasks)) != len(spec.tasks) or not spec.tasks:
        raise BertkitError("--task: give each task once (pos, chunk, ner)")
    if spec.column is not None and len(spec.tasks) > 1:
        raise BertkitError("--column: names the tag column of one task; give one --task with it")
    out = Path(spec.out)
    claim(out, PROBE, spec.overwrite, inputs=(*spec.models, spec.data, spec.eval_data))
    names = _model_names(spec.models)
    loaded = []
    for path in spec.models:  # every model is checked before any work
        config, model = load_run(path)
        loaded.append((path, config, model, load_run_tokenizer(path, config)))
    words_train, words_eval, tags_train, tags_eval = _read(spec)
    console.print(f"probing {len(spec.models)} model(s) on {', '.join(spec.tasks)}: {len(words_train):,} training / "
                  f"{len(words_eval):,} evaluation sentences from {spec.data}"
                  + (f" and {spec.eval_data}" if spec.eval_data else f" (a {spec.eval_fraction:.0%} hold-out)"))
    rows: list[dict] = []
    fits = sum(model.layer_count for _, _, model, _ in loaded) * len(spec.tasks) * (2 if spec.control else 1)
    bar = Progress(TextColumn("[bold]probe {task.fields[info]}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), console=console, disable=not spec.progress, transient=True)
    with bar:
        job = bar.add_task("probe", total=fits, info="")
        for name, (path, config, model, tokenizer) in zip(names, loaded):
            bar.update(job, info=f"{name}: extracting states")
            encoder = TaskEncoder(tokenizer, min(config.model.max_len, 512))
            pad = special_ids(tokenizer).pad
            train = word_features(model, encoder, words_train, pad, spec.batch_size)
            held = word_features(model, encoder, words_eval, pad, spec.batch_size)
            if train.truncated or held.truncated:
                console.print(f"[yellow]{name}: {train.truncated + held.truncated} sentences are longer than "
                              f"{encoder.max_length} tokens; their cut-off words are left out")
            train_words, eval_words = kept_items(words_train, train.kept), kept_items(words_eval, held.kept)
            for task in spec.tasks:
                y_train = kept_items(tags_train[task], train.kept)
                control = control_labels(train_words, y_train, spec.seed) if spec.control else None
                if control is not None:  # the control task's labels: the same for every layer
                    control_train = [control[w] for w in train_words]
                    # evaluation words of types unseen in training get a control label too
                    control_gold = _control_gold(eval_words, control, y_train, spec.seed)
                for layer in range(model.layer_count):
                    bar.update(job, info=f"{name}: {task} layer {layer}")
                    probe = LinearProbe(spec.max_iter, seed=spec.seed).fit(train.states[:, layer], y_train)
                    result = score(task, tags_eval[task], probe.predict(held.states[:, layer]), held.kept)
                    bar.advance(job)
                    metric = TASKS[task][1]
                    row = {"model": name, "task": task, "layer": layer, "metric": metric, "score": result[metric],
                           "accuracy": result["accuracy"], "control_accuracy": None, "selectivity": None,
                           "train_words": len(y_train), "eval_words": len(eval_words)}
                    if control is not None:
                        guess = LinearProbe(spec.max_iter, seed=spec.seed).fit(
                            train.states[:, layer], control_train).predict(held.states[:, layer])
                        row["control_accuracy"] = sum(g == p for g, p in zip(control_gold, guess)) / \
                            max(1, len(control_gold))
                        row["selectivity"] = row["accuracy"] - row["control_accuracy"]
                        bar.advance(job)
                    rows.append(row)
                    console.print(_line(row))
    with atomic_dir(out, overwrite=spec.overwrite) as tmp:
        with (tmp / "probe.csv").open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        plot(rows, tmp / "probe.png")
    console.print(f"wrote {out / 'probe.csv'} and {out / 'probe.png'}")
    return ProbeResult(rows, out / "probe.csv", out / "probe.png")


def _control_gold(words: list[str], control: dict[str, str], labels: list[str], seed: int) -> list[str]:
    """Control labels of evaluation words; a type never seen in training draws its own, deterministically."""
    unseen = sorted({w for w in words if w not in control})
    extra = control_labels(unseen, labels, seed + 1) if unseen else {}
    return [control.get(w, extra.get(w)) for w in words]


def _line(row: dict) -> str:
    text = f"{row['model']}  {row['task']:5s} layer {row['layer']:2d}: {row['metric']} {100 * row['score']:.1f}"
    if row["metric"] != "accuracy":
        text += f"  accuracy {100 * row['accuracy']:.1f}"
    if row["selectivity"] is not None:
        text += f"  control {100 * row['control_accuracy']:.1f}  selectivity {100 * row['selectivity']:.1f}"
    return text


def _model_names(models: tuple[Path, ...]) -> list[str]:
    """Short, distinct names for the CSV and the legend: the run directories' names."""
    names = []
    for path in models:
        name = Path(path).resolve().name
        names.append(name if name not in names else f"{name}-{len(names)}")
    return names


def plot(rows: list[dict], path: Path) -> None:
    """A panel per task: score against layer, a line per model; selectivity dashed where measured."""
    # a Figure of its own, not pyplot's: files only, never a window, and the caller's backend (a notebook's inline
    # one) left as it was (matplotlib.use("Agg") switched it for the whole process)
    from matplotlib.figure import Figure

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    fig = Figure(figsize=(5.2 * len(tasks), 4))
    axes = fig.subplots(1, len(tasks), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        metric = next(r["metric"] for r in rows if r["task"] == task)
        for name in dict.fromkeys(r["model"] for r in rows):
            mine = [r for r in rows if r["task"] == task and r["model"] == name]
            line, = ax.plot([r["layer"] for r in mine], [100 * r["score"] for r in mine], "o-", label=name)
            if mine[0]["selectivity"] is not None:  # in accuracy points: the share the control task cannot explain
                ax.plot([r["layer"] for r in mine], [100 * r["selectivity"] for r in mine], "--",
                        color=line.get_color(), alpha=0.7, label=f"{name}: selectivity (accuracy − control)")
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel(f"{'accuracy' if metric == 'accuracy' else 'span F1'} %")
        ax.set_title({"pos": "part of speech", "chunk": "chunks", "ner": "named entities"}[task])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
