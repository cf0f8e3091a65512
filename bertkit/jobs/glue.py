"""`bertkit glue`: score encoders on the GLUE tasks available offline, the way budget-BERT papers report it.

Every (model, task, seed) cell is an ordinary `finetune classify` run in DIR/cells/MODEL/TASK/seed-N, so a killed
or extended `glue` goes on cell by cell: a finished cell is read back, a started one resumed, and `--seeds 5` after
`--seeds 3` trains only the new seeds. The protocol is Cramming's "GLUE-sane" one setting for every task (recipe
`glue`: batch 16, max length 128, 5 epochs or the per-cell budget, 10% warmup, cosine decay, learning rate 4e-5 at
BERT-base width scaled with the width as bertkit's automatic rate is), recorded in DIR/glue.json; `--set` overrides
it, and a DIR trained under another protocol is refused. The best checkpoint is picked on 5% of the training set
held out, by the task's own metric where the classifier computes it (CoLA MCC, MRPC macro F1, STS-B Spearman,
accuracy for the others; `GlueTask.selection`); the reported scores are the GLUE dev set's, with each task's GLUE
metric. The report (glue.md, glue.json, a table in the terminal) gives per task the median and spread over seeds,
the majority-class baseline, and the average of the main metrics over the tasks run, named so that nobody mistakes
it for full GLUE.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import shutil
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bertkit.config import means_none, parse_duration
from bertkit.errors import BertkitError, a_or_an
from bertkit.inference import TaskModel
from bertkit.jobs import finetune
from bertkit.paths import data_roots, missing_root, one_is_one, resolve_data_path
from bertkit.recipes import FINETUNE_READS, load_recipe, set_keys, with_values
from bertkit.run.directory import CONFIG_FILE, RESULTS_FILE, WEIGHTS_FILE, load_config
from bertkit.run.files import content_digest, write_atomic
from bertkit.run.lock import locked
from bertkit.run.outputs import refuse_nested
from bertkit.text.glue import GLUE_LEFT_OUT, TASKS, GlueTask, Row, glue_task, majority_baseline, task_metrics
from bertkit.tasks.classify import ClassifyObjective
from bertkit.tasks.regress import RegressObjective
from bertkit.train.defaults import finetune_learning_rate
from bertkit.train.results import FinetuneJob

REPORT_JSON, REPORT_MD, DEV_SCORES = "glue.json", "glue.md", "glue-dev.json"
PROTOCOL_FILE, MODELS_FILE, SOURCE_FILE = "protocol.json", "models.json", "source.json"
# keys every cell sets itself: a --set of them was recorded in the protocol as applied, and overridden (or, for
# max_time under --budget none, applied while the protocol said no budget); the option that says it instead
CELL_KEYS = {("task", "kind"): "the task's", ("task", "train_file"): "the task's", ("task", "init"): "--init",
             ("task", "text_pair_column"): "the task's", ("train", "seed"): "--seeds (cells are seeds 0, 1, …)",
             ("train", "max_time"): "--budget"}
GLUE_RATE_SHARE = 0.8  # Cramming's 4e-5 against the 5e-5 bertkit's automatic rate takes at BERT-base width


@dataclass(frozen=True)
class GlueJob:
    """What `bertkit glue` is asked: encoder runs to score, the output folder, the tasks, seeds per task, the
    budget per cell, the weights (the runs' own, or `random`: the same architecture from random weights, the control
    a pretraining claim needs), and `--set` overrides of the `glue` recipe."""

    models: tuple[Path, ...]
    out: Path
    tasks: tuple[str, ...] = tuple(TASKS)
    seeds: int = 3
    budget: str | None = "5m"
    init: str = "pretrained"
    overrides: tuple[str, ...] = ()
    progress: bool = True
    steps: int | None = None  # a cell ends at 5 epochs, these steps or its budget, whichever comes first

    def __post_init__(self) -> None:
        one_is_one(self, "models", "tasks", "overrides")  # one given as a str is one item
        if isinstance(self.budget, str) and means_none(self.budget):  # as --budget none: no clock
            object.__setattr__(self, "budget", None)


@dataclass(frozen=True)
class GlueResult:
    """The report: per model (its label in the table) and task, the dev scores of every finished seed, their
    median and spread, the majority-class baseline, and each model's average over its tasks' main metrics."""

    out: Path
    tasks: list[str]
    models: dict[str, dict[str, dict]] = field(default_factory=dict)  # label -> task -> summary
    baselines: dict[str, dict[str, float]] = field(default_factory=dict)  # task -> metric -> value
    averages: dict[str, float] = field(default_factory=dict)  # label -> average of main metrics (0-100)
    average_name: str = ""


def run(job: GlueJob, console: Console | None = None) -> GlueResult:
    """Train and score every missing cell, then write and print the report."""
    console = console or Console(stderr=True)
    tasks = list(dict.fromkeys(glue_task(name) for name in job.tasks))
    if not tasks:
        raise BertkitError(f"--tasks: name at least one GLUE task ({','.join(TASKS)})")
    if job.seeds < 1:
        raise BertkitError(f"--seeds: at least 1 (got {job.seeds})")
    if job.init not in ("pretrained", "random"):
        raise BertkitError(f"--init: pretrained or random (got {job.init!r})")
    if not job.models:
        raise BertkitError("--model: give at least one encoder run directory")
    if job.budget is not None:  # before anything is written (a bad budget failed only in the first cell)
        parse_duration(job.budget, "--budget")
    _check_sets(job.overrides, tasks)
    models = _labelled_models(job.models, job.init, console)
    files = {task.name: (_data_file(task.train), _data_file(task.dev)) for task in tasks}
    if missing_root():  # a typo in BERTKIT_DATA fell back to another copy without a word
        console.print(f"[yellow]warning: BERTKIT_DATA={os.environ['BERTKIT_DATA']} is not a folder: the tasks' "
                      f"files come from {files[tasks[0].name][1].parents[1]}")
    protocol = _protocol(job)
    out = Path(job.out)
    refuse_nested(out)
    with locked(out):
        changed = _check_protocol(out, protocol)
        _check_models(out, models)
        _check_sources(out, tasks, files)
        data = {task.name: _prepare(out, task, *files[task.name]) for task in tasks}
        if changed:  # only once every check has passed: a refused command leaves the folder as it was
            _replace_protocol(out, protocol, changed, console)
        _train_cells(out, models, tasks, data, job, console)
        result = _report(out, protocol)
        _write_report(out, result, protocol)
    _print(result, console)
    _note_earlier_cells(result, [task.name for task in tasks], models, job.seeds, console)
    return result


def _train_cells(out: Path, models: dict[str, Path], tasks: list[GlueTask], data: dict, job: GlueJob,
                 console: Console) -> None:
    """Train and score every cell without dev scores, each announced with its place among the cells to train."""
    cells = [(label, model, task, seed) for label, model in models.items() for task in tasks
             for seed in range(job.seeds)]
    todo = [c for c in cells if not (out / "cells" / c[0] / c[2].name / f"seed-{c[3]}" / DEV_SCORES).is_file()]
    if len(todo) < len(cells):
        console.print(f"glue: {len(cells) - len(todo):,} of {len(cells):,} cells already scored in {out}",
                      highlight=False)
    for number, (label, model, task, seed) in enumerate(todo, start=1):
        cell = out / "cells" / label / task.name / f"seed-{seed}"
        console.print(f"glue: cell {number} of {len(todo)}: {label} · {task.title} · seed {seed}", highlight=False)
        _train_cell(cell, model, task, seed, data[task.name], job, console)
        _score_cell(cell, task, data[task.name][1])


def _check_sets(overrides: tuple[str, ...], tasks: list[GlueTask]) -> None:
    """--set items glue would override, or that no task of the run can take, refused before any cell trains."""
    config = load_recipe("glue", list(overrides), FINETUNE_READS["classify"])  # checks the keys and values first
    for (section, name), (key, _) in set_keys(overrides).items():
        if (option := CELL_KEYS.get((section, name))) is not None:
            raise BertkitError(f"--set {key}: every cell sets {section}.{name} itself ({option}); "
                               + ("give it with that option" if option.startswith("--") else "it cannot be set"))
    metric = config.train.metric
    for task in tasks:  # the regressor's metrics are not the classifier's: it failed at the first STS-B cell
        allowed = (RegressObjective if task.kind == "regress" else ClassifyObjective).metric_names
        if metric is not None and metric not in allowed:
            raise BertkitError(f"--set train.metric={metric}: {task.title} cells cannot pick by it (a {task.kind} "
                               f"task: {'|'.join(allowed)}); val_loss is the one every task has, or leave it unset "
                               "for each task's own")


def _note_earlier_cells(result: GlueResult, tasks: list[str], models: dict[str, Path], seeds: int,
                        console: Console) -> None:
    """The report is the folder's, not this run's: say what else it holds (tasks, seeds, models of earlier runs)."""
    more = [name for name in result.tasks if name not in tasks]
    most = max((len(cell["seeds"]) for per_task in result.models.values() for name, cell in per_task.items()
                if name in tasks), default=0)  # seeds of the tasks this run asked for (the others are listed)
    others = [label for label in result.models if label not in models]
    held = [f"tasks {', '.join(more)}"] * bool(more) + [f"up to {most} seeds a cell"] * (most > seeds) + \
        [f"models {', '.join(others)}"] * bool(others)
    if held:
        console.print(f"note: the report covers every finished cell in {result.out}: also {'; '.join(held)}, from "
                      "earlier runs", highlight=False)


def _labelled_models(paths: tuple[Path, ...], init: str, console: Console) -> dict[str, Path]:
    """Each encoder run under its table label (its folder name; `@random` under --init random; numbered where two
    share a name). A run that is not an encoder is one clear error; a finetuned one is warned about."""
    labelled: dict[str, Path] = {}
    for path in paths:
        path = Path(path)
        try:
            config = load_config(path)  # its message names an ONNX export as one
        except BertkitError as exc:
            raise BertkitError(f"--model {exc}") from None
        architecture = config.model.architecture
        if architecture != "encoder":
            raise BertkitError(f"--model {path}: glue scores encoders; this is {a_or_an(architecture)} run")
        finetuned = [f"its {name.replace('_', ' ')} head is dropped" for name in config.heads.names
                     if name in ("classifier", "tagger", "pair_classifier")]
        if config.task.kind == "sentence":  # SBERT has no head: an STS-B-trained one scored on STS-B said nothing
            finetuned.append("an SBERT sentence-embedding model")
        if finetuned and init == "pretrained":  # intermediate-task transfer is legitimate, but not pretraining
            console.print(f"[yellow]warning: --model {path} is a finetuned run ({finetuned[0]}): each cell "
                          "finetunes its encoder again, so its scores measure its pretraining and that finetuning "
                          "together")
        if any(path.resolve() == Path(other).resolve() for other in labelled.values()):
            raise BertkitError(f"--model {path}: given twice (each run is one column)")
        label = path.resolve().name + ("@random" if init == "random" else "")
        base, n = label, 2
        while label in labelled:
            label, n = f"{base}-{n}", n + 1
        labelled[label] = path
    return labelled


def _data_file(name: str) -> Path:
    """A task file from the data root, or one line saying which file and where it was looked for."""
    path = resolve_data_path(name)
    if not path.is_file():
        raise BertkitError(f"glue: {name} not found (looked in: the working directory, "
                           f"{', '.join(str(r) for r in data_roots())}; set BERTKIT_DATA to the folder that has "
                           "glue/, sst2/ and stsb/)" + missing_root())
    return path.resolve()


def _protocol(job: GlueJob) -> dict:
    """What every cell of a DIR must share: the recipe after --set, and the per-cell budget."""
    config = load_recipe("glue", list(job.overrides), FINETUNE_READS["classify"])
    steps = {} if job.steps is None else {"steps": job.steps}  # absent: DIRs from before --steps stay comparable
    return {"recipe": "glue", "set": list(job.overrides), "budget": job.budget, **steps,
            "train": {k: v for k, v in asdict(config.train).items() if k != "seed"},
            "task": {k: asdict(config.task)[k] for k in ("max_length", "validation_split", "finetune_dropout")},
            "learning_rate": ("train.learning_rate" if config.train.learning_rate is not None else
                              f"{GLUE_RATE_SHARE} x the automatic rate: 4e-5 at d_model 768, x (768 / d_model)^1.5"),
            "selection": ("best checkpoint on validation_split of the training set by "
                          + (f"train.metric {config.train.metric}" if config.train.metric else
                             "each task's selection metric (" + ", ".join(f"{t.name} {t.selection}"
                                                                            for t in TASKS.values()) + ")")
                          + "; scores on GLUE dev")}


def _check_protocol(out: Path, protocol: dict) -> list[str]:
    """A DIR keeps one protocol once a cell has finished under it (its cells would not be comparable otherwise):
    recorded in DIR/protocol.json before the first cell, compared on every later run. Before any cell has finished
    (a first run stopped early, to retry with a smaller budget) another protocol may replace it: returns the keys
    that differ, for `_replace_protocol` (empty: the same protocol, or a new DIR, whose protocol is written here)."""
    stored_file = out / PROTOCOL_FILE
    if stored_file.is_file():
        stored = json.loads(stored_file.read_text(encoding="utf-8"))
        changed = sorted(k for k in protocol if not _same(k, stored.get(k), protocol[k]))
        if not changed and set(stored) <= set(protocol):
            return []
        if any((out / "cells").glob(f"*/*/seed-*/{DEV_SCORES}")):
            said = "; ".join(_differs(key, stored.get(key), protocol.get(key)) for key in changed)
            raise BertkitError(f"{out}: its cells were trained under another protocol ({said}); use another -o")
        return changed or ["protocol"]
    if out.exists() and not out.is_dir():
        raise BertkitError(f"-o {out}: a file, not a folder; give the folder the glue report and cells go in")
    if out.exists() and any(out.iterdir()):
        raise BertkitError(f"{out}: exists and is not a glue folder (no {PROTOCOL_FILE}); choose another -o")
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(stored_file, json.dumps(protocol, indent=1))
    return []


def _same(key: str, then, now) -> bool:
    """Whether a protocol key is unchanged: a budget by its length (5m is 300s), anything else as written."""
    if key == "budget" and isinstance(then, str) and isinstance(now, str):
        with contextlib.suppress(BertkitError):
            return parse_duration(then, "budget") == parse_duration(now, "budget")
    return then == now


def _differs(key: str, then, now) -> str:
    """One protocol key's change for a message: a table's (train, task) by the entries that differ."""
    if isinstance(then, dict) and isinstance(now, dict):
        return "; ".join(f"{key}.{name}: {_said(then.get(name))} then, {_said(now.get(name))} now"
                         for name in sorted(set(then) | set(now)) if then.get(name) != now.get(name))
    return f"{key}: {_said(then)} then, {_said(now)} now"


def _said(value) -> str:
    """A protocol value as a message shows it: a key absent as "none", long values cut."""
    text = "none" if value in (None, [], {}) else " ".join(value) if isinstance(value, list) else \
        json.dumps(value) if isinstance(value, dict) else str(value)
    return text if len(text) <= 80 else text[:77] + "…"


def _check_sources(out: Path, tasks: list[GlueTask], files: dict[str, tuple[Path, Path]]) -> None:
    """A task's cells are scored on the files its first cell was: DIR/data/TASK/source.json keeps their paths and
    digests, and a run that finds other content (another working directory or BERTKIT_DATA) is refused rather than
    mixing dev sets in one median and recomputing every cell's baseline from the new files."""
    for task in tasks:
        record = out / "data" / task.name / SOURCE_FILE
        if not record.is_file():
            continue
        stored = json.loads(record.read_text(encoding="utf-8"))
        for role, path in zip(("train", "dev"), files[task.name]):
            if stored.get(f"{role}_digest") not in (None, content_digest(path)):
                raise BertkitError(f"{out}: its {task.title} cells used {stored[role]}; this run finds {path}, "
                                   "whose content differs (another working directory or BERTKIT_DATA?): point it "
                                   "at the files the folder used, or use another -o")


def _replace_protocol(out: Path, protocol: dict, changed: list[str], console: Console) -> None:
    """Record a new protocol in a DIR none of whose cells finished; its unfinished cells (whose checkpoints were
    trained under the old one) are moved aside, not deleted: the user decides whether they are worth keeping."""
    aside = None
    if (out / "cells").is_dir():
        aside = next(out / f"cells-replaced-{n}" for n in itertools.count(1)
                     if not (out / f"cells-replaced-{n}").exists())
        (out / "cells").rename(aside)
    write_atomic(out / PROTOCOL_FILE, json.dumps(protocol, indent=1))
    moved = f"; its unfinished cells moved to {aside} (delete it if you do not need them)" if aside else ""
    console.print(f"[yellow]{out}: no cell finished under its earlier protocol ({', '.join(changed)} differ): this "
                  f"run's replaces it{moved}")


def _check_models(out: Path, models: dict[str, Path]) -> None:
    """A column label names one model for good: DIR/models.json keeps each label's weights digest, and another
    model under a label already there (a folder of the same name, or two --model given in another order) is
    refused rather than reported as the first."""
    record = out / MODELS_FILE
    known = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
    for label, path in models.items():
        digest = content_digest(path / WEIGHTS_FILE)
        if label in known and known[label]["weights"] != digest:
            where = str(Path(path).resolve())
            why = f"from another model ({known[label]['path']})" if known[label]["path"] != where else \
                "scored from this folder's earlier weights (they changed since)"
            raise BertkitError(f"--model {path}: {out} already holds column {label!r} {why}; give it another folder "
                               "name, or use another -o")
        known[label] = {"path": str(Path(path).resolve()), "weights": digest}
    write_atomic(record, json.dumps(known, indent=1))


def _prepare(out: Path, task: GlueTask, train: Path, dev: Path) -> tuple[Path, list[Row], dict[str, float]]:
    """The task's training file as JSONL for `finetune classify` (written once), its dev rows, and the
    majority-class baseline on dev."""
    train_rows, dev_rows = task.read(train), task.read(dev)
    folder = out / "data" / task.name
    target = folder / "train.jsonl"
    baseline = majority_baseline(task, train_rows, dev_rows)
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(target, "".join(json.dumps({"text": t, "pair": p, "label": y}) + "\n"
                                     for t, p, y in train_rows))
    if not (folder / SOURCE_FILE).is_file():  # the files this task's cells are scored on (a folder from before keeps
        # the files it finds now, as it always did)
        write_atomic(folder / SOURCE_FILE, json.dumps({"train": str(train), "dev": str(dev),
                                                       "train_digest": content_digest(train),
                                                       "dev_digest": content_digest(dev), "baseline": baseline},
                                                      indent=1))
    return target, dev_rows, baseline


def _train_cell(cell: Path, model: Path, task: GlueTask, seed: int, data: tuple, job: GlueJob,
                console: Console) -> None:
    """Finetune (or resume, or read back) one cell."""
    if (cell / RESULTS_FILE).is_file():
        return
    if cell.is_dir() and not (cell / CONFIG_FILE).is_file():  # killed before the run began: nothing to keep
        shutil.rmtree(cell)
    config = load_recipe("glue", list(job.overrides), FINETUNE_READS["classify"])
    values = {"task.kind": task.kind, "task.train_file": str(data[0]),
              "task.text_pair_column": "pair" if task.pair else None,
              "task.init": job.init, "train.seed": seed, "train.max_time": job.budget}
    if config.train.metric is None:  # the task's own (CoLA: MCC), unless --set train.metric says otherwise
        values["train.metric"] = task.selection
    base = load_config(model).model
    if config.train.learning_rate is None:
        rate = GLUE_RATE_SHARE * finetune_learning_rate("classify", base)
        values["train.learning_rate"] = float(f"{rate:.2g}")
    if config.task.max_length and config.task.max_length > base.max_len:  # a model with shorter positions
        values["task.max_length"] = base.max_len
    steps = config.train.max_steps  # the protocol's (the recipe after --set), which the budget must not lift:
    config = with_values(config, values)  # a cell ends at its epochs, --steps or its budget, as protocol.json says
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, max_steps=steps))
    resume = (cell / CONFIG_FILE).is_file()  # the base model is checked against the one the cell began from
    finetune.run(FinetuneJob(config, model, cell, resume=resume, progress=job.progress, step_cap=job.steps),
                 console=console)


def _score_cell(cell: Path, task: GlueTask, dev: list[Row]) -> None:
    """The cell's dev scores with the task's GLUE metrics, kept in the cell (glue-dev.json)."""
    model = TaskModel(cell)
    # unrounded: STS-B's correlations on four-decimal scores read 0.19184 where `evaluate` reads 0.19208
    predicted, _ = model.classify([t for t, _, _ in dev], [p for _, p, _ in dev] if task.pair else None, digits=None)
    answer = "score" if task.kind == "regress" else "label"
    scores = task_metrics(task, [y for _, _, y in dev], [str(row[answer]) for row in predicted])
    # what the scores were computed in (auto: bf16 where the device computes it natively, which can tip a near-tie)
    write_atomic(cell / DEV_SCORES, json.dumps({"task": task.name, "examples": len(dev), **scores,
                                                "inference_precision": model.precision}, indent=1))


def _report(out: Path, protocol: dict) -> GlueResult:
    """Every finished cell under DIR/cells, summarised: per model and task the seeds' scores (0-100), median and
    spread; per model the average of the main metrics over the tasks it has."""
    models: dict[str, dict[str, dict]] = {}
    seen: list[str] = []
    for scores_file in sorted((out / "cells").glob(f"*/*/seed-*/{DEV_SCORES}")):
        label, name = scores_file.parts[-4], scores_file.parts[-3]
        if name not in TASKS:
            continue
        scores = json.loads(scores_file.read_text(encoding="utf-8"))
        cell = models.setdefault(label, {}).setdefault(name, {"seeds": {}})
        cell["seeds"][scores_file.parts[-2]] = {m: 100 * scores[m] for m in TASKS[name].metrics}
        seen.append(name)
    tasks = [name for name in TASKS if name in seen]
    averages = {}
    for label, per_task in models.items():
        for name, cell in per_task.items():
            task = TASKS[name]
            for metric in task.metrics:
                values = [s[metric] for s in cell["seeds"].values()]
                cell[metric] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
        if set(per_task) == set(tasks):
            averages[label] = statistics.mean(per_task[n][TASKS[n].metric]["median"] for n in tasks)
    baselines = {}
    for name in tasks:  # on the files the task's cells were scored on (recorded), else those found now
        task, record = TASKS[name], out / "data" / name / SOURCE_FILE
        stored = json.loads(record.read_text(encoding="utf-8")).get("baseline") if record.is_file() else None
        baseline = stored or majority_baseline(task, task.read(_data_file(task.train)), task.read(_data_file(task.dev)))
        baselines[name] = {m: 100 * v for m, v in baseline.items()}
    name = f"GLUE-{len(tasks)} ({', '.join(TASKS[t].title for t in tasks)}; {GLUE_LEFT_OUT})"
    return GlueResult(out, tasks, models, baselines, averages, name)


def _cell_text(summary: dict | None, metric: str) -> str:
    if not summary:
        return "–"
    stats, n = summary[metric], len(summary["seeds"])
    return f"{stats['median']:.1f}" + (f" ({stats['min']:.1f}–{stats['max']:.1f}, {n} seeds)" if n > 1 else "")


def _rows(result: GlueResult) -> list[list[str]]:
    """The report's table: a row per task metric, then the average; a column per model, then the baseline."""
    rows = []
    for name in result.tasks:
        task = TASKS[name]
        for metric in task.metrics:
            rows.append([f"{task.title} {metric}" + (" (main)" if metric == task.metric and len(task.metrics) > 1
                                                      else ""),
                         *(_cell_text(per_task.get(name), metric) for per_task in result.models.values()),
                         f"{result.baselines[name][metric]:.1f}"])
    rows.append(["average", *(f"{result.averages[label]:.1f}" if label in result.averages else "–"
                              for label in result.models), "–"])
    return rows


def _write_report(out: Path, result: GlueResult, protocol: dict) -> None:
    header = ["task / metric", *result.models, "majority class"]
    ends = ["5 epochs"] + ([f"{protocol['steps']:,} steps"] if protocol.get("steps") else []) + \
        ([f"{protocol['budget']} of training"] if protocol.get("budget") else [])
    sets = f"; --set {' '.join(protocol['set'])}" if protocol.get("set") else ""
    lines = [f"# {result.average_name}", "", "Dev-set scores ×100: median over seeds (min–max). The average takes "
             "each task's main metric: MCC (CoLA), Spearman (STS-B), F1 (MRPC), accuracy (the others). Each cell: "
             f"recipe glue{sets}, ending at {', '.join(ends[:-1]) + ' or ' if len(ends) > 1 else ''}{ends[-1]}, "
             "whichever comes first.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in _rows(result)]
    write_atomic(out / REPORT_MD, "\n".join(lines) + "\n")
    data = {"protocol": protocol, "models_scored": json.loads((out / MODELS_FILE).read_text(encoding="utf-8")),
            "average_name": result.average_name, "tasks": result.tasks,
            "models": result.models, "baselines": result.baselines, "averages": result.averages}
    write_atomic(out / REPORT_JSON, json.dumps(data, indent=1))


def _print(result: GlueResult, console: Console) -> None:
    table = Table(title=result.average_name, title_justify="left")
    for column in ["task / metric", *result.models, "majority class"]:
        table.add_column(column)
    for row in _rows(result):
        table.add_row(*row)
    console.print(table)
    console.print(f"report: {result.out / REPORT_MD}, {result.out / REPORT_JSON}")
