"""Did pretraining put task-relevant information into the encoder? A linear probe on FROZEN features.

The finetuning table asks whether (a) the pretrained BERT-mini beats (b) the same architecture from random weights.
Finetuning on all of SST-2 lets a random encoder learn the lexicon from 67k labelled phrases, which can hide what
pretraining contributed. This isolates it: both encoders stay frozen, their sentence vectors (mean or [CLS]
pooling) are fitted by a logistic regression on N SST-2 training sentences and scored on SST-2 dev. It also prints
the nearest neighbours of a few words in each model's token-embedding table (cosine), which shows what kind of
similarity the pretraining learned. Vectors are encoded in fp32 on every CPU (bf16 on a native-bf16 CPU would make
figures from different machines disagree).

  python benchmarks/frozen_probe.py --pretrained runs/mini-imdb [--train-examples 8000]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

from common import ensure_minilm  # noqa: E402

from bertkit.embedding import SentenceEncoder  # noqa: E402
from bertkit.nn.model import Model  # noqa: E402
from bertkit.paths import resolve_data_path  # noqa: E402
from bertkit.text.tasks import read_labelled  # noqa: E402
from bertkit.text.tokenizer import load_tokenizer  # noqa: E402
from bertkit.run.directory import load_run  # noqa: E402

WORDS = (" great", " terrible", " boring", " actor")


def probe_accuracy(run: Path, config, model: Model, pooling: str, train, dev, precision: str = "fp32") -> float:
    """Dev accuracy of a logistic regression on the frozen, standardised sentence vectors (encoded at `precision`)."""
    config = dataclasses.replace(config, sentence=dataclasses.replace(config.sentence, pooling=pooling,
                                                                      normalize=False))
    encoder = SentenceEncoder(run, model=(config, model.eval()), batch_size=64, precision=precision)
    x_train, x_dev = encoder.encode([e.text for e in train]), encoder.encode([e.text for e in dev])
    mean, std = x_train.mean(0), x_train.std(0) + 1e-6
    classifier = LogisticRegression(max_iter=2000).fit((x_train - mean) / std, [e.label for e in train])
    return float(classifier.score((x_dev - mean) / std, [e.label for e in dev]))


def probe_data(seed: int, examples: int) -> tuple[list, list]:
    """The probe's SST-2 data: a seeded sample of `examples` training sentences, and all of dev."""
    train = read_labelled(resolve_data_path("sst2/train.tsv"), "sentence", "label")
    dev = read_labelled(resolve_data_path("sst2/dev.tsv"), "sentence", "label")
    return [train[i] for i in np.random.default_rng(seed).permutation(len(train))[:examples]], dev


def neighbours(run: Path, model: Model, count: int = 5) -> str:
    """Each word's nearest tokens by cosine in the token-embedding table."""
    tokenizer = load_tokenizer(run)
    table = model.backbone.embeddings.token.weight.detach()
    table = table / table.norm(dim=1, keepdim=True)  # (V, D), unit rows
    out = []
    for word in WORDS:
        ids = tokenizer.encode(word, add_special_tokens=False).ids
        if len(ids) == 1:  # only words that are one token of this vocabulary
            top = (table @ table[ids[0]]).topk(count + 1).indices.tolist()[1:]
            out.append(f"{word.strip()} → " + ", ".join(tokenizer.id_to_token(i).replace("Ġ", "") for i in top))
    return "; ".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", type=Path, default=Path("runs/mini-imdb"))
    parser.add_argument("--minilm", type=Path, default=Path("runs/minilm"),
                        help="all-MiniLM-L6-v2 imported (a reference row; imported if missing)")
    parser.add_argument("--train-examples", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    train, dev = probe_data(args.seed, args.train_examples)
    config, pretrained = load_run(args.pretrained)
    ensure_minilm(args.minilm)
    models = {"pretrained": (args.pretrained, config, pretrained),
              "random": (args.pretrained, config, Model(config.model)),  # same architecture, fresh initialisation
              "all-MiniLM-L6-v2": (args.minilm, *load_run(args.minilm))}
    print("| encoder (frozen) | mean pooling | [CLS] | token-embedding neighbours |\n|---|---|---|---|")
    for name, (run, run_config, model) in models.items():
        scores = [probe_accuracy(run, run_config, model, pooling, train, dev) for pooling in ("mean", "cls")]
        print(f"| {name} | {100 * scores[0]:.1f} | {100 * scores[1]:.1f} | {neighbours(run, model)} |", flush=True)
    print(f"\nSST-2 dev accuracy of a logistic regression on {len(train):,} training sentences' frozen vectors "
          f"(majority class: {100 * max(np.mean([e.label == l for e in dev]) for l in {e.label for e in dev}):.1f})")


if __name__ == "__main__":
    main()
