"""Which precision should a bf16 CPU training step compute attention in? (bertkit.nn.attention.sdpa)

PyTorch's CPU flash-attention kernel runs bf16 forward faster than fp32 but differentiates bf16 far slower. This
script times, on the machine it runs on (named on the first line):

1. one attention call, forward + backward, at the shape of each recipe's training batch (`--shapes`, batch x heads x
   length x head size): SDPA's flash kernel in bf16, its math path in bf16, and the flash kernel in fp32 with the
   casts bertkit's training path adds (inputs up, output down);
2. a whole bf16 MLM training step (forward, backward, fused AdamW) of a BERT model (`--model`, layers x width,
   rotary, batch `--batch-size` x 128) with bertkit's fp32 attention switched off and on, steps alternated so that
   both see the same machine, and the ratio.

    python benchmarks/attention_precision.py [--shapes 64x4x128x64,32x2x64x64] [--model 4x256] [--steps 6]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import bertkit.nn.attention as attention
from bertkit.hardware import autocast, describe_device
from pretrain_throughput import SEQ, masked_batches, mlm_step
from profile_step import budget_model


def time_attention(shape: tuple[int, ...], variant: str, repeats: int) -> float:
    """Median milliseconds of one forward + backward of attention over random (B, H, T, dh) bf16 inputs."""
    b, h, t, d = shape
    q, k, v = (torch.randn(b, h, t, d, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = torch.ones(b, 1, 1, t, dtype=torch.bool)  # a padding mask, as training batches carry
    times = []
    for _ in range(repeats + 2):
        start = time.perf_counter()
        if variant == "fp32 flash (bertkit)":
            out = attention.sdpa(q, k, v, mask, 0.0, False, gqa=False)
        else:
            backend = SDPBackend.FLASH_ATTENTION if variant == "bf16 flash" else SDPBackend.MATH
            with sdpa_kernel([backend]):
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out.float().sum().backward()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times[2:])  # the first two: allocations and kernel choice


def time_steps(layers: int, width: int, batch_size: int, steps: int) -> dict[bool, float]:
    """Median seconds of a bf16 MLM training step with fp32 attention off and on, alternated step by step."""
    model, opt = budget_model(layers, width)
    cast = autocast("cpu", "bf16")
    batches = masked_batches(2 * steps + 2, batch_size)
    times: dict[bool, list[float]] = {False: [], True: []}
    for i, (inputs, labels) in enumerate(batches):
        fp32 = i % 2 == 1
        attention.CPU_BF16_TRAINING_ATTENTION_IN_FP32 = fp32
        start = time.perf_counter()
        mlm_step(model, opt, inputs, labels, cast)
        if i >= 2:  # the first of each: warm-up
            times[fp32].append(time.perf_counter() - start)
    attention.CPU_BF16_TRAINING_ATTENTION_IN_FP32 = True
    return {fp32: statistics.median(ts) for fp32, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="64x4x128x64,32x2x64x64",
                        help="attention shapes B x H x T x dh (default: the budget recipe's and the demo's batches)")
    parser.add_argument("--model", default="4x256", help="layers x width of the whole-step comparison")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per setting")
    parser.add_argument("--repeats", type=int, default=8)
    args = parser.parse_args()
    print(describe_device(torch.device("cpu")), flush=True)
    print("| attention B x H x T x dh | bf16 flash fwd+bwd ms | bf16 math | fp32 flash (bertkit) "
          "| bf16 flash / bertkit |")
    print("|---|---|---|---|---|")
    for text in args.shapes.split(","):
        shape = tuple(int(x) for x in text.split("x"))
        ms = {v: time_attention(shape, v, args.repeats) for v in ("bf16 flash", "bf16 math", "fp32 flash (bertkit)")}
        print(f"| {text} | {ms['bf16 flash']:.1f} | {ms['bf16 math']:.1f} | {ms['fp32 flash (bertkit)']:.1f} | "
              f"{ms['bf16 flash'] / ms['fp32 flash (bertkit)']:.2f}x |", flush=True)
    layers, width = (int(x) for x in args.model.split("x"))
    step = time_steps(layers, width, args.batch_size, args.steps)
    tokens = args.batch_size * SEQ
    print(f"bf16 MLM step {args.model}, batch {args.batch_size}x{SEQ}: attention in bf16 {step[False]:.3f} s "
          f"({tokens / step[False]:,.0f} tokens/s), in fp32 {step[True]:.3f} s ({tokens / step[True]:,.0f} tokens/s): "
          f"**{step[False] / step[True]:.2f}x**")


if __name__ == "__main__":
    main()
