"""Does the budget pretraining pay? The README's budget table (issue 15's goals).

The model pretrained by `bertkit pretrain --recipe pretrain-budget-imdb` against the same architecture and tokenizer
from random weights (`--init random`), each finetuned the same way, for every seed:

  sst2   `bertkit finetune classify --recipe finetune-sst2`, scored on SST-2 dev (accuracy)
  conll  `bertkit finetune ner --recipe finetune-conll`, scored on CoNLL-2003 test (entity F1)
  stsb   `bertkit finetune sentence --recipe finetune-stsb` (SBERT), scored on STS-B test (Spearman)
  probe  a logistic regression on the FROZEN mean-pooled vectors of 8,000 SST-2 training sentences, scored on dev

Finetunes use the automatic learning rate (`train.learning_rate = none`) and a fixed share of the recipe's epochs
(`--epochs`) with no time cap (`max_time = none`), so a cell is the same number of steps on any machine and
under any load. Cells finetune, score and probe in fp32 (`--precision`): `auto` would mean bf16 on a CPU with
native bf16 and fp32 elsewhere, and the cells must compare across the machines they were filled on.
The two cells of a (task, seed) — pretrained and random — run side by side, one thread each (the
default; `--one-at-a-time` runs them one after the other on all threads): on 2 cores
that takes about half the wall time of running them one after the other, and both see the same conditions.
Finished cells are reused on a re-run (remove a cell's entry from OUT/results.json to redo it), so the table
can be filled over several sessions; the summary prints the mean over the seeds each cell has.

  python benchmarks/budget_table.py --pretrained runs/budget-imdb [--seeds 0,1,2] [--tasks sst2,conll,stsb,probe]
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import bertkit_env, load_results, save_results, sh, table_parser

from bertkit.recipes import load_recipe

# task: (finetune kind, recipe, scored file, scoring command, metric, goal in points: pretrained minus random)
TASKS = {
    "sst2": ("classify", "finetune-sst2", "sst2/dev.tsv", "evaluate", "accuracy", 2.0),
    "conll": ("ner", "finetune-conll", "conll2003/test.txt", "evaluate", "f1", 5.0),
    "stsb": ("sentence", "finetune-stsb", "stsb/sts-test.csv", "evaluate-sts", "spearman", 3.0),
}
PROBE_GOAL = 8.0
MODELS = ("pretrained", "random")
PRECISION = "fp32"  # the cells' default precision
LEGACY_PRECISION = "fp32"  # what the cells stored before the precision was recorded ran in (AVX2 CPUs: auto = fp32)


def same_settings(cell: dict, settings: dict) -> bool:
    """Whether a stored cell was measured with `settings` (a cell without a precision ran in fp32)."""
    return all(cell.get(key, LEGACY_PRECISION if key == "precision" else None) == value
               for key, value in settings.items())


def run_side_by_side(commands: list[list[str]]) -> list[float]:
    """Run bertkit commands at once, one thread each (printed); fail loudly; returns each one's wall time."""
    env = bertkit_env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    start, running = time.perf_counter(), []
    for args in commands:
        print("$ OMP_NUM_THREADS=1 bertkit " + " ".join(args) + " &", flush=True)
        running.append(subprocess.Popen([sys.executable, "-m", "bertkit", *args], env=env))
    seconds = []
    for process in running:
        if process.wait() != 0:
            sys.exit(f"error: a command above failed (exit {process.returncode})")
        seconds.append(time.perf_counter() - start)
    return seconds


def task_epochs(task: str, fraction: float) -> float:
    """The recipe's own epochs, scaled by `fraction`."""
    return load_recipe(TASKS[task][1]).train.epochs * fraction


def finetune_cells(task: str, seed: int, epochs: float, pretrained: Path, out: Path, side_by_side: bool,
                   models: tuple[str, ...] = MODELS, precision: str = PRECISION) -> dict:
    """Finetune and score, at `precision`, the pretrained and the random-init cell (or only `models`) of one
    (task, seed)."""
    kind, recipe, scored, command, metric, _ = TASKS[task]
    commands, runs = [], []
    for model in models:
        run = out / f"{task}-{model}-seed{seed}"
        shutil.rmtree(run, ignore_errors=True)  # an interrupted cell starts again
        runs.append(run)
        commands.append(["finetune", kind, "--recipe", recipe, "--model", str(pretrained),
                         *(["--init", "random"] if model == "random" else []),
                         "--set", "learning_rate=none", "--set", f"epochs={epochs:g}", "--set", f"seed={seed}",
                         "--set", "max_time=none",  # the recipe's 25-minute cap would make steps depend on load
                         "--set", f"precision={precision}",
                         "--out", str(run), "--no-progress"])
    seconds = run_side_by_side(commands) if side_by_side and len(commands) > 1 else [sh(*c) for c in commands]
    cells = {}
    for model, run, wall in zip(models, runs, seconds):
        report = run / "test-metrics.json"
        sh(command, "--model", str(run), "--data", scored, "--out", str(report), "--precision", precision)
        finetune = json.loads((run / "results.json").read_text())
        cells[f"{task}-{model}-seed{seed}"] = {
            "task": task, "model": model, "seed": seed, "epochs": epochs, "pretrained": str(pretrained),
            "metric": metric, "precision": precision,
            "test": json.loads(report.read_text())[metric], "steps": finetune["steps"],
            "best_step": finetune["best_step"], "seconds": round(wall), "side_by_side": side_by_side}
    return cells


def probe_cells(seed: int, pretrained: Path, examples: int, models: tuple[str, ...] = MODELS,
                precision: str = PRECISION) -> dict:
    """Frozen-feature probe (mean pooling, encoded at `precision`) of the pretrained encoder and a seeded random
    init of it (or only `models`)."""
    import torch
    from frozen_probe import probe_accuracy, probe_data

    from bertkit.nn.model import Model
    from bertkit.run.directory import load_run

    train, dev = probe_data(seed, examples)
    config, model = load_run(pretrained)
    torch.manual_seed(seed)
    encoders = {"pretrained": model, "random": Model(config.model)}  # same architecture, fresh initialisation
    cells = {}
    for name in models:
        encoder, start = encoders[name], time.perf_counter()
        accuracy = probe_accuracy(pretrained, config, encoder, "mean", train, dev, precision=precision)
        cells[f"probe-{name}-seed{seed}"] = {"task": "probe", "model": name, "seed": seed, "metric": "accuracy",
                                            "pretrained": str(pretrained), "precision": precision,
                                            "test": accuracy, "train_examples": len(train),
                                            "seconds": round(time.perf_counter() - start)}
        print(f"probe seed {seed}: {name} {100 * accuracy:.1f}", flush=True)
    return cells


def pretraining_line(pretrained: Path) -> str:
    """The pretraining run's validation MLM loss against its unigram baseline."""
    results = json.loads((pretrained / "results.json").read_text())
    loss, base = results["evaluation"]["val_loss"], results["baseline"]["val_loss"]
    accuracy = results["evaluation"].get("val_accuracy", float("nan"))
    return (f"pretraining {pretrained}: step {results['step']:,}, validation MLM loss {loss:.3f} vs unigram "
            f"{base:.3f} ({base - loss:.2f} nats below; goal 1.5), masked-token accuracy {100 * accuracy:.1f}%")


def summary(results: dict, tasks: list[str]) -> None:
    """Mean (and per-seed values) of each task's pretrained and random cells, the difference and its goal."""
    print("\n| task | pretrained (per seed) | random init (per seed) | mean Δ | goal |\n|---|---|---|---|---|")
    for task in tasks:
        values = {m: {c["seed"]: 100 * c["test"] for c in results.values() if c["task"] == task and c["model"] == m}
                  for m in MODELS}
        seeds = sorted(set(values["pretrained"]) & set(values["random"]))
        if not seeds:
            continue
        goal = PROBE_GOAL if task == "probe" else TASKS[task][5]
        means = {m: statistics.mean(values[m][s] for s in seeds) for m in MODELS}
        cells = [f"**{means[m]:.1f}** ({' / '.join(f'{values[m][s]:.1f}' for s in seeds)})" for m in MODELS]
        delta = means["pretrained"] - means["random"]
        print(f"| {task} | {cells[0]} | {cells[1]} | {delta:+.1f} | ≥ +{goal:g} {'met' if delta >= goal else 'missed'}"
              f" ({len(seeds)} seed{'s' if len(seeds) > 1 else ''}) |")


def cached(cell: dict | None, pretrained: Path, settings: dict) -> bool:
    """Whether a stored cell was measured as asked now (the same pretrained run, epochs or probe size): a re-run with
    other settings redoes it instead of mixing it into the means. Cells stored before the run was recorded pass."""
    return (cell is not None and cell.get("pretrained", str(pretrained)) == str(pretrained)
            and same_settings(cell, settings))


def main() -> None:
    parser = table_parser(__doc__, "runs/budget-table")
    parser.set_defaults(pretrained=Path("runs/budget-imdb"))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--tasks", default="sst2,conll,stsb,probe")
    parser.add_argument("--epochs", default="sst2=0.5,conll=0.34,stsb=0.5",
                        help="the share of each recipe's epochs to finetune for (finetune-sst2: 1 epoch, "
                             "finetune-conll: 3, finetune-stsb: 4)")
    parser.add_argument("--probe-examples", type=int, default=8000)
    parser.add_argument("--precision", default=PRECISION, choices=("fp32", "bf16"),  # not auto: a cell records what ran
                        help="what every cell finetunes, scores and probes in (default fp32: comparable across CPUs)")
    parser.add_argument("--one-at-a-time", dest="side_by_side", action="store_false",
                        help="run the pretrained and random finetunes one after the other on all threads")
    args = parser.parse_args()
    fractions = {k: float(v) for k, v in (item.split("=") for item in args.epochs.split(","))}
    tasks = args.tasks.split(",")
    results = load_results(args.out)
    for seed in (int(s) for s in args.seeds.split(",")):  # seed by seed: a partial table still compares
        for task in tasks:
            settings = ({"train_examples": args.probe_examples} if task == "probe" else
                        {"epochs": task_epochs(task, fractions[task])}) | {"precision": args.precision}
            if all(cached(results.get(f"{task}-{m}-seed{seed}"), args.pretrained, settings) for m in MODELS):
                continue
            if task == "probe":
                results.update(probe_cells(seed, args.pretrained, args.probe_examples, precision=args.precision))
            else:
                args.out.mkdir(parents=True, exist_ok=True)
                results.update(finetune_cells(task, seed, settings["epochs"], args.pretrained, args.out,
                                              args.side_by_side, precision=args.precision))
            save_results(args.out, results)
            summary(results, tasks)
    print("\n" + pretraining_line(args.pretrained))
    summary(results, tasks)


if __name__ == "__main__":
    main()
