"""Compressed index vectors (`index build --vectors int8|binary`) against exact float32 search: bytes per vector,
recall@10 and query latency, on real sentence embeddings at each size.

The vectors are search_latency.py's: --model's embeddings of IMDB review sentences (made once with `bertkit embed`
and cached; an ONNX export folder embeds them fastest), 200 held-out sentences as queries. For each size it scores
the queries exactly in float32 (the truth), then with the same code `bertkit search` runs: int8 (the float query,
turned by the index's DCT, against the dequantized codes in FAISS's scalar-quantizer flat index, calibrated on the
indexed vectors; and the same before the turn: per-dimension minimum / maximum, as indexes built earlier hold) and
binary (Hamming candidates from FAISS's binary flat index, `--rescore` × 10 of them, rescored by the float query),
at --rescore 1, 4 (the default) and 16; and the same with `index build --refine`: the candidates (int8: 4 × 10 of
them; binary: 4, 16, 32, 64 × 10) ranked by a finer copy kept on disk (float32, or int8 for binary) instead of
the codes.

  python benchmarks/index_compression.py --model runs/minilm-onnx [--sizes 100000,1000000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_latency import median_ms, recall_at, vectors_for  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("runs/minilm"))
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--cache", type=Path, default=Path("runs/bench/search"),
                        help="embeddings are cached in CACHE/<model directory name>/")
    parser.add_argument("--queries", type=int, default=50, help="single queries timed per case")
    args = parser.parse_args()

    import faiss

    from bertkit.hardware import describe_device
    from bertkit.index import _faiss, exact_search
    from bertkit.index_codec import (binary_flat, calibrate, encode, hamming_candidates, int8_flat, rescore, rotate,
                                     row_bytes)

    import torch

    sizes = sorted(int(s) for s in args.sizes.split(","))
    everything, queries = vectors_for(args.model, sizes[-1], args.cache / args.model.name)
    queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    _faiss()
    dim = everything.shape[1]
    print(f"{describe_device(torch.device('cpu'))}; {len(everything):,} IMDB sentence vectors (dim {dim}) from "
          f"{args.model}, {len(queries)} held-out queries, faiss {faiss.__version__}\n", flush=True)
    table = []
    for size in sizes:
        shard = np.ascontiguousarray(everything[:size], dtype=np.float32)
        _, truth = exact_search([shard], queries, 10)
        single = queries[:args.queries]
        float_ms = statistics.median(median_ms(lambda q=q: exact_search([shard], q[None], 10), 1) for q in single)
        rows = {"float32": (4 * dim, 1.0, float_ms)}
        # bertkit's int8 (turned by the DCT, ranges from quantiles), then the same codec before the turn: each
        # dimension's minimum and maximum, no turn (how indexes built before it were written, and are still read)
        before = {"low": shard.min(0).tolist(), "high": shard.max(0).tolist()}
        calibration = calibrate(shard)
        int8_codes = encode(shard, "int8", calibration)  # encoded once: the int8 rows and the int8 refine copy
        flats = {}
        for name, cal, stored in (("int8", calibration, int8_codes),
                                  ("int8 before the turn (min/max, no DCT)", before, encode(shard, "int8", before))):
            flats[name] = codes = int8_flat([stored], cal, dim, faiss)

            def int8_search(q, codes=codes, cal=cal):
                return codes.search(np.ascontiguousarray(rotate(q, cal)), 10)[1]  # the codes' basis
            int8_ms = statistics.median(median_ms(lambda q=q: int8_search(q[None]), 1) for q in single)
            rows[name] = (row_bytes("int8", dim), recall_at(int8_search(queries), truth), int8_ms)
        # --refine float32: the int8 codes' 4 x 10 candidates ranked by the float copy (a memory-mapped file in
        # bertkit; here the same array)

        def int8_refined(q):
            candidates = flats["int8"].search(np.ascontiguousarray(rotate(q, calibration)), 40)[1]
            return rescore([shard], q, candidates, 10, "float32", dim)[1]
        ms = statistics.median(median_ms(lambda q=q: int8_refined(q[None]), 1) for q in single)
        rows[f"int8 + float32 copy on disk (--refine), rescore 4 (+{4 * dim:,} B on disk)"] = (
            row_bytes("int8", dim), recall_at(int8_refined(queries), truth), ms)
        bits = encode(shard, "binary")
        start = time.perf_counter()
        flat = binary_flat([bits], dim, faiss)
        print(f"{size:,}: binary flat index built in {time.perf_counter() - start:.2f} s", flush=True)
        for factor in (1, 4, 16):
            def search(q, factor=factor):
                candidates = hamming_candidates(flat, q, 10 * factor)
                return rescore([bits], q, candidates, 10, "binary", dim)[1]
            recall = recall_at(search(queries), truth)
            ms = statistics.median(median_ms(lambda q=q: search(q[None]), 1) for q in single)
            rows[f"binary, rescore {factor}"] = (row_bytes("binary", dim), recall, ms)
        for refine, stored, factors in (("int8", int8_codes, (4, 16, 32, 64)), ("float32", shard, (4, 32))):
            for factor in factors:  # --refine: the Hamming candidates ranked by the copy on disk
                def refined(q, factor=factor, refine=refine, stored=stored):
                    return rescore([stored], q, hamming_candidates(flat, q, 10 * factor), 10, refine, dim,
                                   calibration)[1]
                recall = recall_at(refined(queries), truth)
                ms = statistics.median(median_ms(lambda q=q: refined(q[None]), 1) for q in single)
                rows[f"binary + {refine} copy on disk (--refine), rescore {factor} "
                     f"(+{row_bytes(refine, dim):,} B on disk)"] = (row_bytes("binary", dim), recall, ms)
        for name, (size_bytes, recall, ms) in rows.items():
            print(f"  {name:<44} {size_bytes:>5} bytes/vector ({4 * dim / size_bytes:>4.0f}x smaller), "
                  f"recall@10 {recall:.3f}, {ms:.2f} ms/query", flush=True)
        table.append((size, rows))
    print("\n| vectors | stored as | bytes per vector (× smaller) | MB | recall@10 vs exact float32 | ms per query |")
    print("|---|---|---|---|---|---|")
    for size, rows in table:
        for name, (size_bytes, recall, ms) in rows.items():
            megabytes = size * size_bytes / 1e6
            print(f"| {size:,} | {name} | {size_bytes:,} ({4 * dim / size_bytes:.0f}×) | {megabytes:,.1f} | "
                  f"{recall:.3f} | {ms:.2f} |")


if __name__ == "__main__":
    main()
