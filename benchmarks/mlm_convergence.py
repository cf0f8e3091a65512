"""Does bertkit learn like transformers? Same batches, same optimiser and schedule, same shape: MLM loss curves.

Trains bertkit's encoder + MLM head and `transformers.BertForMaskedLM` (SDPA) side by side on identical masked IMDB
blocks (the pretraining recipe's packed corpus), with AdamW, warmup + linear decay, and prints the mean training loss
of every `--every` steps for both, then the ratio of the final windows. A bug in bertkit's model or loss would show
as a curve that falls slower than the peer's.

    python benchmarks/mlm_convergence.py --tokenizer runs/mini-imdb [--steps 300] [--batch-size 32] [--lr 7e-4]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from transformers import BertConfig, BertForMaskedLM  # noqa: E402

from bertkit.config import DataConfig, ModelConfig, TrainConfig  # noqa: E402
from bertkit.nn.model import Model  # noqa: E402
from bertkit.text.corpus import load_corpus  # noqa: E402
from bertkit.text.packing import pack_corpus  # noqa: E402
from bertkit.text.tokenizer import load_tokenizer, special_ids  # noqa: E402
from bertkit.train.loop import lr_factor, param_groups  # noqa: E402
from bertkit.train.objectives import MLMObjective  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=7e-4)
    parser.add_argument("--every", type=int, default=25)
    args = parser.parse_args()

    tokenizer = load_tokenizer(args.tokenizer)
    vocab = tokenizer.get_vocab_size()
    dataset, _, key = load_corpus(["imdb/unsup.txt.gz", "imdb/train.jsonl.gz"])
    packed = pack_corpus(dataset, key, tokenizer, 128, max_validation_blocks=64)
    train_cfg = TrainConfig(batch_size=args.batch_size)
    objective = MLMObjective(packed, special_ids(tokenizer), vocab, DataConfig(), train_cfg)

    torch.manual_seed(0)
    ours = Model(ModelConfig(vocab_size=vocab, d_model=256, n_layers=4, n_heads=4, d_ff=1024, max_len=128,
                             dropout=0.0, attention_dropout=0.0, heads=("mlm",))).train()
    hf = BertForMaskedLM(BertConfig(vocab_size=vocab, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                    intermediate_size=1024, max_position_embeddings=128, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0, attn_implementation="sdpa")).train()
    runs = {}
    for name, model in (("bertkit", ours), ("transformers", hf)):
        opt = torch.optim.AdamW(param_groups(model, 0.01), lr=args.lr, betas=(0.9, 0.98), eps=1e-6)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, args.steps, 0.06, "linear"))
        losses = []
        for step in range(args.steps):
            batch = objective.batch(step)
            if name == "bertkit":
                loss_sum, _ = objective.loss(model, batch)
                loss = loss_sum / objective.normalizer(batch)
            else:
                loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        runs[name] = losses
    print(f"{args.steps} steps, batch {args.batch_size}x128, lr {args.lr}, vocab {vocab}; mean loss per window:")
    print(f"{'steps':>12} {'bertkit':>10} {'transformers':>13}")
    for start in range(0, args.steps, args.every):
        a = sum(runs["bertkit"][start:start + args.every]) / len(runs["bertkit"][start:start + args.every])
        b = sum(runs["transformers"][start:start + args.every]) / len(runs["transformers"][start:start + args.every])
        print(f"{start + 1:>5}-{min(start + args.every, args.steps):<6} {a:>10.3f} {b:>13.3f}")
    last = slice(-args.every, None)
    ratio = (sum(runs["bertkit"][last]) / sum(runs["transformers"][last]))
    print(f"final-window loss ratio bertkit / transformers: {ratio:.3f}")


if __name__ == "__main__":
    main()
