"""Attention as onnxruntime's fused MultiHeadAttention operator (`bertkit/deploy/onnx_attention.py`) against torch's
own translation of SDPA (MatMul, Softmax, MatMul), in two exports of the same run: the same padded batches (a third
of the rows padded from three quarters of the length), batch 32, at each sequence length and thread count, runs
alternated, medians compared; and the largest cosine gap between the two graphs' sentence embeddings.

    python benchmarks/onnx_attention.py --model runs/minilm [--lengths 128,256,512] [--threads 1,2] [--repeats 5]
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
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def export_both(model: Path, folder: Path) -> dict[str, Path]:
    """The run exported twice (fp32): with the operator, and with torch's translation (no translation table)."""
    from bertkit.deploy import export

    out = {"operator": folder / "operator", "decomposed": folder / "decomposed"}
    export.export_onnx(model, out["operator"], say=lambda line: None)
    table = export.translation_table
    export.translation_table = lambda config: {}
    try:
        export.export_onnx(model, out["decomposed"], say=lambda line: None)
    finally:
        export.translation_table = table
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=Path("runs/minilm"), help="an encoder run (multi-head)")
    parser.add_argument("--lengths", default="128,256,512")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import onnxruntime as ort
    import torch

    from bertkit.deploy.onnx_attention import attention_in
    from bertkit.hardware import describe_device

    print(f"{describe_device(torch.device('cpu'))}, onnxruntime {ort.__version__}; {args.model}, batch "
          f"{args.batch_size}, median of {args.repeats}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        graphs = export_both(args.model, Path(tmp))
        assert attention_in(graphs["operator"] / "model.onnx") == "MultiHeadAttention", "the run is not multi-head"
        rng = np.random.default_rng(0)
        print("\n| threads | tokens | torch's translation ms | operator ms | operator speed-up | lowest cosine |")
        print("|---|---|---|---|---|---|")
        for threads in (int(t) for t in args.threads.split(",")):
            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
            options.log_severity_level = 3
            sessions = {name: ort.InferenceSession(str(folder / "model.onnx"), options,
                                                   providers=["CPUExecutionProvider"])
                        for name, folder in graphs.items()}
            for length in (int(t) for t in args.lengths.split(",")):
                ids = rng.integers(1000, 20000, (args.batch_size, length)).astype(np.int64)  # (B, T)
                mask = np.ones_like(ids)
                mask[::3, length * 3 // 4:] = 0  # a third of the rows padded
                feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
                outputs, times = {}, {name: [] for name in sessions}
                for name, session in sessions.items():  # warm-up, and the outputs compared
                    wanted = {i.name for i in session.get_inputs()}
                    outputs[name] = session.run(["sentence_embedding"],
                                                {k: v for k, v in feed.items() if k in wanted})[0]
                for _ in range(args.repeats):
                    for name, session in sessions.items():
                        wanted = {i.name for i in session.get_inputs()}
                        start = time.perf_counter()
                        session.run(["sentence_embedding"], {k: v for k, v in feed.items() if k in wanted})
                        times[name].append((time.perf_counter() - start) * 1000)
                a, b = outputs["operator"], outputs["decomposed"]
                cosine = float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min())
                plain, fused = statistics.median(times["decomposed"]), statistics.median(times["operator"])
                print(f"| {threads} | {length} | {plain:.1f} | {fused:.1f} | {plain / fused:.2f}x | {cosine:.7f} |",
                      flush=True)


if __name__ == "__main__":
    main()
