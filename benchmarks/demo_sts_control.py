"""The control of the demo's STS-B figure: its SBERT minute (bertkit/jobs/demo.py, stage 7: finetune-stsb with the
encoder's max_len, a 1-minute budget, 12 epochs at most, the automatic learning rate) from the demo's pretrained
encoder and from random weights of the same shape and tokenizer (`task.init = random`), per seed; STS-B test Spearman
(x100) for each. Run it alone (the budget decides the steps).

  bertkit demo --out runs/demo && python benchmarks/demo_sts_control.py --pretrained runs/demo/pretrain --seeds 0,1
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from rich.console import Console

from bertkit.hardware import describe_device
from bertkit.jobs import finetune, sts
from bertkit.recipes import load_recipe, with_values
from bertkit.run.directory import load_config


def sbert_minute(pretrained: Path, out: Path, init: str, seed: int) -> tuple[int, float]:
    """The demo's stage 7 from `init` weights: (steps trained, STS-B test Spearman x100)."""
    values = {"sentence.max_seq_length": load_config(pretrained).model.max_len, "train.max_time": "1m",
              "train.eval_every": 100, "train.log_every": 25, "train.save_every": 1000, "train.epochs": 12.0,
              "task.init": init, "train.seed": seed}
    config = with_values(load_recipe("finetune-stsb"), values)
    config = dataclasses.replace(config, train=dataclasses.replace(config.train, learning_rate=None))  # as the demo
    tuned = finetune.run(finetune.FinetuneJob(config, pretrained, out, progress=False), console=Console(quiet=True))
    after = sts.run(sts.StsJob(out, Path("stsb/sts-test.csv")), console=Console(quiet=True))
    return tuned.steps, 100 * after.spearman


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", type=Path, default=Path("runs/demo/pretrain"))
    parser.add_argument("--out", type=Path, default=Path("runs/demo-sts-control"))
    parser.add_argument("--seeds", default="0,1", help="comma-separated train.seed values")
    args = parser.parse_args()
    import torch

    print(describe_device(torch.device("cpu")))
    for seed in (int(s) for s in args.seeds.split(",")):
        for init in ("pretrained", "random"):
            steps, spearman = sbert_minute(args.pretrained, args.out / f"{init}-{seed}", init, seed)
            print(f"seed {seed}, {init} encoder: {steps} steps, STS-B test Spearman {spearman:.1f}", flush=True)


if __name__ == "__main__":
    main()
