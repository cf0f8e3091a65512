"""Does bertkit learn like transformers? Same batches, same optimiser and schedule, same shape: MLM loss curves.

Trains bertkit's encoder + MLM head and `transformers.BertForMaskedLM` (SDPA) side by side on identical masked IMDB
blocks (the pretraining recipe's packed corpus), with AdamW, warmup + linear decay, and prints the mean training loss
of every `--every` steps for both, then the ratio of the final windows. A bug in bertkit's model or loss would show
as a curve that falls slower than the peer's.

With `--bf16`, a third run trains bertkit from the same initial weights under bf16 autocast (what
`train.precision = "auto"` picks on bf16-native hardware) and prints its final-window ratio to bertkit's fp32: bf16
training must converge like fp32. On a CPU without native bf16 (AVX2) that run is emulated and slow: use a smaller
`--shape` there. `--bf16-norms` adds one more bf16 run whose LayerNorms run in bf16 as well (a bf16 residual stream:
`pretrain_throughput.py --norm autocast`, issue 33's lever for memory-bound GPU steps): it must learn like the bf16
run with fp32 norms before that lever could go into the model.

    python benchmarks/mlm_convergence.py --tokenizer runs/mini-imdb [--steps 300] [--batch-size 32] [--lr 7e-4]
                                         [--shape 4x256] [--bf16] [--bf16-norms]
"""

from __future__ import annotations

import argparse
import copy
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from transformers import BertConfig, BertForMaskedLM  # noqa: E402

from bertkit.hardware import autocast, describe_device  # noqa: E402
from bertkit.config import DataConfig, HeadsConfig, ModelConfig, TrainConfig  # noqa: E402
from bertkit.nn.model import Model  # noqa: E402
from bertkit.text.corpus import load_corpus  # noqa: E402
from bertkit.text.packing import pack_corpus  # noqa: E402
from bertkit.text.tokenizer import load_tokenizer, special_ids  # noqa: E402
from bertkit.train.loop import lr_factor, param_groups  # noqa: E402
from bertkit.tasks.mlm import MLMObjective  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=7e-4)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--shape", default="4x256", help="LAYERSxWIDTH (heads: width / 64; d_ff 4 x width)")
    parser.add_argument("--bf16", action="store_true", help="also train bertkit under bf16 autocast")
    parser.add_argument("--bf16-norms", action="store_true",
                        help="also train bertkit under bf16 autocast with its LayerNorms in bf16 (implies --bf16)")
    args = parser.parse_args()
    args.bf16 = args.bf16 or args.bf16_norms
    layers, width = (int(x) for x in args.shape.split("x"))
    print(f"machine: {describe_device(torch.device('cpu'))}")

    tokenizer = load_tokenizer(args.tokenizer)
    vocab = tokenizer.get_vocab_size()
    dataset, _, key = load_corpus(["imdb/unsup.txt.gz", "imdb/train.jsonl.gz"])
    packed = pack_corpus(dataset, key, tokenizer, 128, max_validation_blocks=64)
    train_cfg = TrainConfig(batch_size=args.batch_size)
    objective = MLMObjective(packed, special_ids(tokenizer), vocab, DataConfig(), train_cfg)

    torch.manual_seed(0)
    heads = max(1, width // 64)
    ours = Model(ModelConfig(vocab_size=vocab, d_model=width, n_layers=layers, n_heads=heads, d_ff=4 * width,
                             max_len=128, dropout=0.0, attention_dropout=0.0), HeadsConfig(names=("mlm",))).train()
    hf = BertForMaskedLM(BertConfig(vocab_size=vocab, hidden_size=width, num_hidden_layers=layers,
                                    num_attention_heads=heads, intermediate_size=4 * width,
                                    max_position_embeddings=128, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0, attn_implementation="sdpa")).train()
    models = [("bertkit", ours), ("transformers", hf)]
    if args.bf16:
        models.insert(1, ("bertkit bf16", copy.deepcopy(ours)))  # the same initial weights as the fp32 run
    if args.bf16_norms:
        from pretrain_throughput import autocast_norms  # the lever as the throughput benchmark measures it

        low = copy.deepcopy(ours)
        autocast_norms(low)
        models.insert(2, ("bertkit bf16 norms bf16", low))
    runs = {}
    for name, model in models:
        cast = autocast("cpu", "bf16" if "bf16" in name else "fp32")
        opt = torch.optim.AdamW(param_groups(model, 0.01), lr=args.lr, betas=(0.9, 0.98), eps=1e-6)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, args.steps, 0.06, "linear"))
        losses = []
        for step in range(args.steps):
            batch = objective.batch(step)
            with cast:
                if name.startswith("bertkit"):
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
    print(f"{args.shape}, {args.steps} steps, batch {args.batch_size}x128, lr {args.lr}, vocab {vocab}; "
          "mean loss per window:")
    width = max(13, *(len(name) for name in runs))
    print(f"{'steps':>12}" + "".join(f" {name:>{width}}" for name in runs))
    for start in range(0, args.steps, args.every):
        means = [sum(losses[start:start + args.every]) / len(losses[start:start + args.every])
                 for losses in runs.values()]
        print(f"{start + 1:>5}-{min(start + args.every, args.steps):<6}" + "".join(f" {m:>{width}.3f}" for m in means))
    last = slice(-args.every, None)
    ratio = (sum(runs["bertkit"][last]) / sum(runs["transformers"][last]))
    print(f"final-window loss ratio bertkit / transformers: {ratio:.3f}")
    if args.bf16:
        print(f"final-window loss ratio bertkit bf16 / bertkit fp32: "
              f"{sum(runs['bertkit bf16'][last]) / sum(runs['bertkit'][last]):.3f}")
    if args.bf16_norms:
        print(f"final-window loss ratio bertkit bf16 with bf16 norms / bertkit bf16: "
              f"{sum(runs['bertkit bf16 norms bf16'][last]) / sum(runs['bertkit bf16'][last]):.3f}")


if __name__ == "__main__":
    main()
