"""Where a training step's time goes: torch.profiler over MLM steps of bertkit, matrix products vs the rest.

Runs `--steps` full training steps (forward, backward, fused AdamW) of the pretraining model at `--shape` and
`--precision` (under autocast for bf16) on identical masked batches, and prints the operators with the most self
CPU time and the share spent in matrix products (mm / addmm / bmm / linear / attention kernels) — the part that
runs at the GEMM peak; everything else (elementwise, norms, casts, copies, the optimiser, the head's gather) is
what stands between a step and the peak. The first line names the machine.

    python benchmarks/profile_step.py [--shape 4x256] [--precision fp32|bf16] [--steps 5] [--batch-size 32]
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from bertkit.config import HeadsConfig, ModelConfig
from bertkit.hardware import autocast, describe_device
from bertkit.nn.model import Model
from pretrain_throughput import SEQ, VOCAB, masked_batches, mlm_step

# operators whose self time is matrix-product work (what a GEMM peak measures)
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product_flash_attention",
              "aten::_scaled_dot_product_flash_attention_for_cpu",
              "aten::_scaled_dot_product_flash_attention_for_cpu_backward", "aten::_flash_attention_backward",
              "aten::_scaled_dot_product_efficient_attention", "aten::_efficient_attention_backward", "aten::matmul")


def budget_model(layers: int, width: int) -> tuple[Model, torch.optim.Optimizer]:
    """A seeded MLM model of the budget recipe's kind (rotary, 64-wide heads, no dropout) and its fused AdamW."""
    torch.manual_seed(0)
    model = Model(ModelConfig(vocab_size=VOCAB, d_model=width, n_layers=layers, n_heads=max(1, width // 64),
                              d_ff=4 * width, max_len=SEQ, positions="rotary", dropout=0.0, attention_dropout=0.0,
                              ), HeadsConfig(names=("mlm",))).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="4x256")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    print(describe_device(torch.device("cpu")), flush=True)
    layers, width = (int(x) for x in args.shape.split("x"))
    model, opt = budget_model(layers, width)
    cast = autocast("cpu", args.precision)
    batches = masked_batches(args.steps + 1, args.batch_size)

    def step(inputs: torch.Tensor, labels: torch.Tensor) -> None:
        mlm_step(model, opt, inputs, labels, cast)

    step(*batches[0])  # warm-up: allocations, kernel choice, optimiser state
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for inputs, labels in batches[1:]:
            step(inputs, labels)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    matmul = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS)
    print(f"{args.shape} {args.precision} batch {args.batch_size}x{SEQ}, {args.steps} steps: "
          f"{total / 1e3 / args.steps:,.0f} ms self CPU per step, matrix products {matmul / total:.0%}, "
          f"the rest {1 - matmul / total:.0%}")
    print(events.table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
