"""The README's layer-wise probes: POS and NER on CoNLL-2003 for all-MiniLM-L6-v2, the IMDB-pretrained BERT-mini,
and the same BERT-mini architecture with random weights (what a probe reads from untrained features), with the
control task. One `bertkit probe` over the three models; prints the Markdown table and writes the plot.

  python benchmarks/probe_layers.py --pretrained runs/mini-imdb [--out runs/probe] [--plot docs/probe-layers.png]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from common import ensure_minilm  # noqa: E402

from bertkit.config import HeadsConfig  # noqa: E402
from bertkit.jobs import probe  # noqa: E402
from bertkit.nn.model import Model  # noqa: E402
from bertkit.run.directory import load_run, save_run  # noqa: E402


def random_copy(pretrained: Path, out: Path, seed: int) -> Path:
    """The pretrained run's architecture and tokenizer with freshly initialised weights."""
    if out.is_dir():
        return out
    config, _ = load_run(pretrained)
    torch.manual_seed(seed)
    config = dataclasses.replace(config, heads=HeadsConfig())
    return save_run(out, Model(config.model), config, pretrained / "tokenizer.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", type=Path, default=Path("runs/mini-imdb"))
    parser.add_argument("--minilm", type=Path, default=Path("runs/minilm"))
    parser.add_argument("--random", type=Path, default=Path("runs/mini-imdb-random"),
                        help="where the random-weights copy of --pretrained goes (made if missing)")
    parser.add_argument("--out", type=Path, default=Path("runs/probe"))
    parser.add_argument("--plot", type=Path, default=None, help="also copy probe.png here (e.g. docs/)")
    parser.add_argument("--train-sentences", type=int, default=4000)
    parser.add_argument("--eval-sentences", type=int, default=1000)
    parser.add_argument("--max-iter", type=int, default=300, help="L-BFGS iterations per probe")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ensure_minilm(args.minilm)
    random_copy(args.pretrained, args.random, args.seed)
    rows = probe.run(probe.ProbeJob(
        models=(args.minilm, args.pretrained, args.random), tasks=("pos", "ner"), data="conll2003/train.txt",
        eval_data="conll2003/dev.txt", out=args.out, control=True, max_train_sentences=args.train_sentences,
        max_eval_sentences=args.eval_sentences, max_iter=args.max_iter, seed=args.seed,
        overwrite=True, progress=False)).rows
    if args.plot:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(args.out / "probe.png", args.plot)
    models = list(dict.fromkeys(r["model"] for r in rows))
    layers = max(r["layer"] for r in rows) + 1
    print("\n| model | task | " + " | ".join(f"layer {i}" for i in range(layers)) + " | best |")
    print("|---|---|" + "---|" * (layers + 1))
    for name in models:
        for task in ("pos", "ner"):
            mine = [r for r in rows if r["model"] == name and r["task"] == task]
            cells = [f"{100 * r['score']:.1f} ({100 * r['selectivity']:.1f})" for r in mine]
            cells += [""] * (layers - len(mine))
            best = max(mine, key=lambda r: r["score"])
            print(f"| {name} | {task} {'accuracy' if task == 'pos' else 'F1'} | " + " | ".join(cells)
                  + f" | layer {best['layer']} |")
    print("\nCells: score (selectivity = accuracy − control-task accuracy, in points).")
    with (args.out / "probe.csv").open() as fh:
        print(f"{sum(1 for _ in csv.reader(fh)) - 1} rows in {args.out / 'probe.csv'}")


if __name__ == "__main__":
    main()
