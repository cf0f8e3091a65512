"""An ONNX export folder at inference: its graph in an onnxruntime session, fed length-sorted padded batches.

This path builds no torch module and imports nothing of the training stack (Accelerate, the loop, datasets): what
`SentenceEncoder` and `TaskModel` use when `--model` names an export folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from bertkit.deploy.manifest import GRAPH_FILE, INPUTS, OUTPUTS, Manifest, read_manifest
from bertkit.errors import BertkitError
from bertkit.text.features import Encoded, in_input_order, length_sorted, pad_batch


def _onnxruntime():
    try:
        import onnxruntime
    except ImportError:
        raise BertkitError("an ONNX export runs through onnxruntime, which is not installed: pip install -e "
                           "\".[onnx]\" in a checkout, pip install \"bertkit[onnx]\" otherwise") from None
    return onnxruntime


def cpu_threads() -> int:
    """The cores this process may use (its affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class OnnxModel:
    """An export folder ready to run: its manifest and an onnxruntime session (CPU).

    `threads` (default: the cores this process may use) are spent as `torch` inference spends them on a CPU: that
    many batches at once, each single-threaded — sentence-length batches keep a core busier alone than split (the
    same choice as `inference.inference_workers`; `benchmarks/embed_throughput.py` measures both)."""

    def __init__(self, folder: str | Path, threads: int | None = None):
        self.folder = Path(folder)
        self.manifest: Manifest = read_manifest(self.folder)
        ort = _onnxruntime()
        self.threads = threads or cpu_threads()
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # parallel over batches instead (run_sorted)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only: onnxruntime warns about every unused initializer
        try:
            self.session = ort.InferenceSession(str(self.folder / GRAPH_FILE), options,
                                                providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime raises its own exception types for a damaged graph
            raise BertkitError(f"{self.folder / GRAPH_FILE}: onnxruntime cannot load it ({str(error)[:200]})") from None
        names = {i.name for i in self.session.get_inputs()}
        outputs = {o.name for o in self.session.get_outputs()}
        wanted = set(OUTPUTS[self.manifest.kind])
        if not names <= set(INPUTS) or not wanted <= outputs:
            raise BertkitError(f"{self.folder}: the graph's inputs {sorted(names)} / outputs {sorted(outputs)} are "
                               f"not what its manifest's kind {self.manifest.kind!r} has ({', '.join(INPUTS)} → "
                               f"{', '.join(sorted(wanted))})")
        self.inputs = [name for name in INPUTS if name in names]  # an unused input (no token types) is pruned

    def forward(self, ids: np.ndarray, mask: np.ndarray, types: np.ndarray, output: str) -> np.ndarray:
        """One padded batch, (B, T) int64 each → the named output as float32."""
        feed = dict(zip(INPUTS, (ids, mask, types)))
        return self.session.run([output], {name: feed[name] for name in self.inputs})[0].astype(np.float32,
                                                                                                 copy=False)

    def run_sorted(self, examples: list[Encoded], pad_id: int, batch_size: int, output: str,
                   on_batch: Callable[[int], None] | None = None, per_token: bool = False) -> list[np.ndarray]:
        """`output` for every example over length-sorted batches, one float32 row per example in input order (a
        per-token output keeps the example's own tokens): `inference.run_sorted`'s contract."""
        lengths, batches = length_sorted(examples, batch_size)

        def one(chunk: np.ndarray) -> np.ndarray:
            return self.forward(*pad_batch([examples[index] for index in chunk], pad_id), output)

        workers = min(self.threads, len(batches))
        pool = ThreadPoolExecutor(workers) if workers > 1 else None  # session.run releases the GIL
        try:
            results = pool.map(one, batches) if pool is not None else map(one, batches)
            return in_input_order(len(examples), batches, results, lengths, per_token, on_batch)
        finally:
            if pool is not None:
                pool.shutdown(cancel_futures=True)
