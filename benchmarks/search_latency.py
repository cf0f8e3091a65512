"""Query latency and recall@10 of bertkit's exact (numpy) and FAISS IVF search at 10k, 100k and 1M vectors.

The vectors are real: --model's embeddings of IMDB review sentences (every split, split on sentence ends,
deduplicated), made once with `bertkit embed` and cached; the queries are 200 further IMDB sentences that are not
in the index. The README's figures use the SBERT-trained BERT-mini (256-d; `benchmarks/sts_table.py` makes it),
which embeds 1M sentences in ~15 minutes on 2 cores; all-MiniLM-L6-v2 (384-d, the default) takes over an hour.
For each size it reports:

- exact: one query at a time (median ms) and 16 queries at a time (ms per batch), over every vector;
- faiss: IVF build time, one query at a time, recall@10 against exact search, at bertkit's default nprobe and at
  half and double it;
- faiss flat, 16 and 64 queries at a time, with faiss's default BLAS threshold (20) and bertkit's (1): the setting
  the `index` module tunes (`BLAS_THRESHOLD`).

  python benchmarks/search_latency.py --model runs/sts-table/pretrained+sts [--sizes 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402

from bertkit.paths import find_dataset  # noqa: E402

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")


def imdb_sentences(limit: int) -> list[str]:
    """Distinct sentences of IMDB reviews (unsup, train, test), 20-300 characters, in file order."""
    folder = find_dataset("imdb")
    seen: dict[str, None] = {}
    for name in ("unsup.txt.gz", "train.jsonl.gz", "test.jsonl.gz"):
        with gzip.open(folder / name, "rt", encoding="utf-8") as fh:
            for line in fh:
                text = json.loads(line)["text"] if name.endswith(".jsonl.gz") else line
                for sentence in SENTENCE_END.split(text.replace("<br />", " ").strip()):
                    sentence = sentence.strip()
                    if 20 <= len(sentence) <= 300:
                        seen.setdefault(sentence, None)
                        if len(seen) >= limit:
                            return list(seen)
    return list(seen)


def vectors_for(model: Path, count: int, cache: Path) -> tuple[np.ndarray, np.ndarray]:
    """(index vectors (count, D), 200 query vectors), embedded by `bertkit embed` once and cached."""
    vectors, queries = cache / f"vectors-{count}.npy", cache / f"queries-{count}.npy"
    larger = sorted((int(p.stem.split("-")[1]), p) for p in cache.glob("vectors-*.npy")
                    if int(p.stem.split("-")[1]) >= count)
    if not vectors.is_file() and larger:  # a larger cached run: its first `count` vectors are the same sentences
        size, vectors = larger[0]
        queries = cache / f"queries-{size}.npy"  # sentences after the first `size`: none is in the index either
    if not vectors.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        sentences = imdb_sentences(count + 200)
        if len(sentences) < count + 200:
            sys.exit(f"IMDB gave only {len(sentences):,} sentences; ask for fewer vectors")
        (cache / "index.txt").write_text("\n".join(sentences[:count]) + "\n", encoding="utf-8")
        (cache / "queries.txt").write_text("\n".join(sentences[count:]) + "\n", encoding="utf-8")
        for name, out in (("queries.txt", queries), ("index.txt", vectors)):
            print(f"$ bertkit embed --model {model} {cache / name} -o {out}", flush=True)
            subprocess.run([sys.executable, "-m", "bertkit", "embed", "--model", str(model), str(cache / name),
                            "-o", str(out), "--batch-size", "64", "--overwrite"], check=True)
    return np.load(vectors, mmap_mode="r"), np.load(queries)


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def recall_at(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("runs/minilm"))
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--cache", type=Path, default=Path("runs/bench/search"),
                        help="embeddings are cached in CACHE/<model directory name>/")
    parser.add_argument("--queries", type=int, default=100, help="single queries timed per case")
    args = parser.parse_args()

    import faiss

    from bertkit.index import BLAS_THRESHOLD, _faiss, build_faiss, exact_search, ivf_params

    sizes = sorted(int(s) for s in args.sizes.split(","))
    everything, queries = vectors_for(args.model, sizes[-1], args.cache / args.model.name)  # one cache per model
    _faiss()  # bertkit's faiss settings (threads, BLAS threshold)
    print(f"{len(everything):,} IMDB sentence vectors (dim {everything.shape[1]}), {len(queries)} held-out queries, "
          f"faiss {faiss.__version__}, {faiss.omp_get_max_threads()} threads\n", flush=True)
    rows = []
    for size in sizes:
        shard = np.ascontiguousarray(everything[:size])
        _, truth = exact_search([shard], queries, 10)
        single = queries[:args.queries]
        exact_one = statistics.median(median_ms(lambda q=q: exact_search([shard], q[None], 10), 1) for q in single)
        exact_16 = median_ms(lambda: exact_search([shard], queries[:16], 10), 10)
        start = time.perf_counter()
        nlist, nprobe = ivf_params(size)
        index = build_faiss([shard], shard.shape[1], nlist)
        build = time.perf_counter() - start
        results = {}
        for probe in (max(1, nprobe // 2), nprobe, nprobe * 2):
            index.nprobe = probe
            _, found = index.search(queries, 10)
            one = statistics.median(median_ms(lambda q=q: index.search(q[None], 10), 1) for q in single)
            results[probe] = (recall_at(found, truth), one)
        flat = faiss.IndexFlatIP(shard.shape[1])
        flat.add(shard)
        timings = {}
        for batch in (16, 64):
            for threshold in (20, BLAS_THRESHOLD):
                faiss.cvar.distance_compute_blas_threshold = threshold
                timings[batch, threshold] = median_ms(lambda b=batch: flat.search(queries[:b], 10), 5)
        faiss.cvar.distance_compute_blas_threshold = BLAS_THRESHOLD
        rows.append((size, exact_one, exact_16, nlist, nprobe, build, results, timings))
        print(f"{size:>9,}: exact {exact_one:.2f} ms/query, {exact_16:.1f} ms per 16; IVF{nlist} built in "
              f"{build:.1f} s; " + "; ".join(f"nprobe {p}: recall@10 {r:.3f}, {ms:.2f} ms/query"
                                             for p, (r, ms) in results.items())
              + "".join(f"; flat x{b}: {timings[b, 20]:.1f} ms (threshold 20) vs {timings[b, BLAS_THRESHOLD]:.1f} ms "
                        f"(threshold {BLAS_THRESHOLD})" for b in (16, 64)), flush=True)

    print("\n| vectors | exact: ms/query (1 / 16 at once) | FAISS IVF: lists, nprobe, build | FAISS: ms/query | "
          "FAISS recall@10 | flat search of 16 / 64 queries: BLAS threshold 20 vs 1 |")
    print("|---|---|---|---|---|---|")
    for size, exact_one, exact_16, nlist, nprobe, build, results, timings in rows:
        recall, ms = results[nprobe]
        print(f"| {size:,} | {exact_one:.2f} / {exact_16 / 16:.2f} | {nlist:,}, {nprobe}, {build:.1f} s | {ms:.2f} | "
              f"{recall:.3f} (nprobe/2: {results[max(1, nprobe // 2)][0]:.3f}, ×2: {results[nprobe * 2][0]:.3f}) | "
              + " / ".join(f"{timings[b, 20]:.1f} vs {timings[b, BLAS_THRESHOLD]:.1f} ms "
                           f"({timings[b, 20] / timings[b, BLAS_THRESHOLD]:.1f}×)" for b in (16, 64)) + " |")


if __name__ == "__main__":
    main()
