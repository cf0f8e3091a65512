"""What does more pretraining budget buy? The README's tokens-seen vs SST-2 curve (issue 15).

Several pretraining runs of the same recipe (e.g. `pretrain-budget-imdb` for 30 minutes, 1 hour, 2 hours), each
finetuned on SST-2 exactly as in the budget table (`benchmarks/budget_table.py`: the automatic learning rate, half of
`finetune-sst2`'s epoch, no time cap) and probed with frozen mean-pooled features, per seed; the random-init row
comes from the budget table's own cells (the same architecture and tokenizer, so it is the same at every budget).
Cells the budget table already holds for one of these runs (`--table`) are reused, as are this script's own
finished cells (OUT/results.json): the curve can be filled over several sessions. Only the pretrained cells run, one
after the other on all threads.

Runs longer than one session: pretrain with a fixed step count (`--max-steps N --set train.max_time=none`: the same
model under any load) and split it with `--resume`.

  python benchmarks/budget_curve.py --pretrained runs/budget-imdb,runs/budget-imdb-1h [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from budget_table import PRECISION, finetune_cells, probe_cells, same_settings, task_epochs
from common import load_results, save_results

from bertkit.run.directory import load_config

NAMES = {"sst2": "SST-2 dev %", "conll": "CoNLL-2003 test F1", "stsb": "STS-B test Spearman",
         "probe": "frozen probe %"}


def find_cell(stores: list[dict], task: str, run: Path, seed: int, settings: dict) -> dict | None:
    """A finished pretrained cell of `run` measured with `settings`, from this script's or the budget table's
    results."""
    for store in stores:
        for cell in store.values():
            if (cell.get("task") == task and cell.get("model") == "pretrained" and cell.get("seed") == seed
                    and cell.get("pretrained") == str(run) and same_settings(cell, settings)):
                return cell
    return None


def pretraining(run: Path) -> dict:
    """Steps, tokens seen and validation MLM loss of a finished pretraining run."""
    results = json.loads((run / "results.json").read_text())
    config = load_config(run)
    row = config.data.block_size // (2 if config.train.halves else 1)  # tokens per training row
    tokens = results["step"] * config.train.batch_size * config.train.accumulation_steps * row
    return {"steps": results["step"], "tokens": tokens, "val_loss": results["evaluation"]["val_loss"],
            "unigram": results["baseline"]["val_loss"]}


def cell_text(cells: list[dict]) -> str:
    """Mean over the seeds (each seed's value in brackets), in percent."""
    if not cells:
        return "–"
    values = [100 * c["test"] for c in cells]
    return f"**{statistics.mean(values):.1f}** ({' / '.join(f'{v:.1f}' for v in values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", required=True, help="pretraining runs, comma-separated, shortest first")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--table", type=Path, default=Path("runs/budget-table"),
                        help="the budget table's folder: its random-init cells and any pretrained cells it has")
    parser.add_argument("--out", type=Path, default=Path("runs/budget-curve"))
    parser.add_argument("--tasks", default="sst2,probe", help="any of sst2, conll, stsb, probe")
    parser.add_argument("--epochs", default="sst2=0.5,conll=0.34,stsb=0.5",
                        help="the share of each recipe's epochs (as in the budget table)")
    parser.add_argument("--probe-examples", type=int, default=8000)
    parser.add_argument("--precision", default=PRECISION, choices=("fp32", "bf16"),  # not auto: a cell records what ran
                        help="what every cell finetunes, scores and probes in (default fp32: comparable across CPUs)")
    args = parser.parse_args()
    runs = [Path(r) for r in args.pretrained.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    for run in runs:
        if not (run / "results.json").is_file():
            raise SystemExit(f"error: {run}: not a finished pretraining run (no results.json)")
    tasks = args.tasks.split(",")
    unknown = [t for t in tasks if t not in NAMES]
    if unknown:
        raise SystemExit(f"error: --tasks: unknown {', '.join(unknown)} (choose from {', '.join(NAMES)})")
    fractions = {k: float(v) for k, v in (item.split("=") for item in args.epochs.split(","))}
    settings = {task: ({"train_examples": args.probe_examples} if task == "probe" else
                       {"epochs": task_epochs(task, fractions[task])}) | {"precision": args.precision}
                for task in tasks}
    table, results = load_results(args.table), load_results(args.out)
    for run in runs:
        for seed in seeds:
            for task in tasks:
                if find_cell([results, table], task, run, seed, settings[task]) is not None:
                    continue
                if task == "probe":
                    new = probe_cells(seed, run, args.probe_examples, models=("pretrained",),
                                      precision=args.precision)
                else:
                    new = finetune_cells(task, seed, settings[task]["epochs"], run, args.out / run.name,
                                         side_by_side=False, models=("pretrained",), precision=args.precision)
                results.update({f"{run.name}-{key}": cell for key, cell in new.items()})
                save_results(args.out, results)

    print("\n| pretraining | steps | tokens seen | val MLM loss (unigram) | "
          + " | ".join(NAMES[t] for t in tasks) + " |\n|---|---|---|---|" + "---|" * len(tasks))
    for run in runs:
        p = pretraining(run)
        cells = [[c for c in (find_cell([results, table], task, run, s, settings[task]) for s in seeds) if c]
                 for task in tasks]
        print(f"| {run} | {p['steps']:,} | {p['tokens'] / 1e6:.1f} M | {p['val_loss']:.3f} ({p['unigram']:.3f}) | "
              + " | ".join(cell_text(c) for c in cells) + " |")
    random = [sorted((c for c in table.values() if c.get("task") == task and c.get("model") == "random"
                      and c.get("seed") in seeds and same_settings(c, settings[task])),
                     key=lambda c: c["seed"]) for task in tasks]
    print(f"| random init ({args.table}) | 0 | 0 | – | " + " | ".join(cell_text(c) for c in random) + " |")


if __name__ == "__main__":
    main()
