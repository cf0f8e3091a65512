"""Sentence embeddings from any encoder run: backbone → pooling (mean | cls | max) → optional L2 normalisation.

`SentenceEncoder` is what `bertkit embed`, `similarity`, `index`, `search`, `evaluate-sts` and the SBERT
objectives' evaluation share: one tokenisation (truncation counted), one length-sorted batching with the input
order restored (`inference.run_sorted`), and one identity per model so an index can refuse queries embedded by
another model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch
from rich.console import Console

from bertkit.config import Config
from bertkit.deploy.manifest import is_onnx_export
from bertkit.deploy.runtime import OnnxModel
from bertkit.errors import BertkitError, a_or_an, need_batch_size
from bertkit.hardware import resolve_precision
from bertkit.inference import run_sorted
from bertkit.nn.heads import pool as pool_states
from bertkit.nn.model import Model
from bertkit.run.directory import TOKENIZER_FILE, WEIGHTS_FILE, default_device, load_run
from bertkit.text.features import Encoded, TaskEncoder, bucket_rows, bucket_widths
from bertkit.text.tokenizer import load_run_tokenizer, special_ids


def parse_layers(text: str, layer_count: int) -> list[int]:
    """'all' | '0,3,-1' -> layer indices into `Model.layer_states` (0: embeddings output; negative from the end)."""
    if text.strip().lower() == "all":
        return list(range(layer_count))
    layers = []
    for part in text.split(","):
        try:
            index = int(part)
        except ValueError:
            raise BertkitError(f"--layers {text!r}: expected 'all' or layer numbers such as 0,3,-1") from None
        if not -layer_count <= index < layer_count:
            raise BertkitError(f"--layers: layer {index} does not exist (this model has layers 0..{layer_count - 1}; "
                               "0 is the embeddings output)")
        layers.append(index % layer_count)
    if len(set(layers)) != len(layers):
        raise BertkitError(f"--layers {text!r}: a layer is named twice")
    return layers


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    """L2-normalise each row (a zero row stays zero). (N, D) -> (N, D) float32"""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


def model_identity(run: str | Path, config: Config) -> str:
    """A fingerprint of everything that decides an embedding: the weights, the tokenizer, the architecture (its
    weight-free switches too: activation, norms, positions) and the pooling settings with the effective length.
    Two runs with the same fingerprint embed every text identically; a retrained or different model never shares
    one."""
    digest = hashlib.sha256()
    for name in (WEIGHTS_FILE, TOKENIZER_FILE):
        path = Path(run) / name
        if path.is_file():
            with path.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    digest.update(block)
    # hashed in the shape the config had before issue 17 split it (heads, num_labels and pooling sat in [model]; the
    # window was `max_length`), so an index built before then still matches its model
    model = {k: v for k, v in dataclasses.asdict(config.model).items() if k not in ("dropout", "attention_dropout")}
    model.update(heads=config.heads.names, num_labels=config.heads.num_labels, pooling=config.heads.classifier_pooling)
    sentence = {"pooling": config.sentence.pooling, "normalize": config.sentence.normalize,
                "max_length": config.sentence.window(config.model.max_len)}
    digest.update(json.dumps({"model": model, "sentence": sentence}, sort_keys=True).encode())
    return digest.hexdigest()[:24]


def embed_encoded(model: Model, encoded: list[Encoded], pad_id: int, batch_size: int, pooling: str,
                  normalize: bool, on_batch: Callable[[int], None] | None = None, precision: str = "fp32",
                  bucket_window: int | None = None) -> np.ndarray:
    """Pooled (and optionally normalised) embeddings of tokenised texts: (N, D) float32, in input order; the
    forward at `precision` (resolved: fp32 / bf16); `bucket_window`: see `run_sorted`."""
    if not encoded:
        return np.zeros((0, model.config.d_model), dtype=np.float32)
    rows = run_sorted(model, encoded, pad_id, batch_size,
                      lambda ids, mask, types: model(ids, attention_mask=mask, token_type_ids=types,
                                                     pool=pooling).pooled, on_batch, precision=precision,
                      bucket_window=bucket_window)
    vectors = np.stack(rows).astype(np.float32, copy=False)  # (N, D)
    return normalize_rows(vectors) if normalize else vectors


CompileShapes = Literal["auto", "buckets", "dynamic"]  # `SentenceEncoder(compile_shapes=)`, `embed --compile-shapes`
COMPILE_SHAPES = get_args(CompileShapes)


def compile_shapes_for(choice: str, device: torch.device) -> str:
    """`SentenceEncoder`'s shape policy under compile: "auto" is "buckets" on a GPU, "dynamic" elsewhere. Why: on an
    H100 (torch 2.11) the dynamic-shape inference graph did not finish compiling in 150 s, twice: compiled
    in-process, it sat in ptxas on one of its Triton kernels (on an H200 it did not finish in 90 s, cause not
    found; docs/results.md). Static shapes are what training compiles there in ~37 s; whether buckets compile and
    pay on a GPU is not yet measured (benchmarks/gpu_check.sh lever-embed). On a CPU dynamic shapes compile and
    run (0.94x eager on 2 cores), one graph for every batch."""
    if choice == "auto":
        return "buckets" if device.type == "cuda" else "dynamic"
    return choice


def allow_bucket_graphs(window: int, batch_size: int) -> None:
    """Let dynamo keep a graph for every shape buckets can give (`bucket_widths` x `bucket_rows`): past its
    recompile limit (8) it would run the rest eagerly, with a warning only. Raises the limit, never lowers it."""
    import torch._dynamo.config as dynamo

    rows = {bucket_rows(count, batch_size) for count in range(1, batch_size + 1)}
    dynamo.recompile_limit = max(dynamo.recompile_limit, len(bucket_widths(window)) * len(rows))


class SentenceEncoder:
    """An encoder run ready to embed sentences: (N texts) -> (N, D) float32, in input order.

    `run` is a run directory or an ONNX export folder (`bertkit export --format onnx`), which runs through
    onnxruntime on the CPU at its own precision, `threads` batches at once (default: the cores this process may use).
    Pooling, normalisation and the window are the run's `[sentence]` settings (`bertkit finetune sentence --pooling`,
    or `--set sentence.pooling=…` when training, set them); `threads` sizes an ONNX session (a torch run uses
    torch's threads); `precision` "auto" runs in
    bf16 where the device computes it natively (`hardware.resolve_precision`), else fp32. `compile` runs the
    forward through torch.compile (off by default: on a 2-core CPU it measured 0.94x eager,
    benchmarks/compile_speed.py), with `compile_shapes`: "dynamic" (one graph for every batch shape), "buckets"
    (static graphs: each batch padded to a power-of-two number of rows and width, 6 widths for a 512-token window,
    up to ~2x the tokens; `compile_shapes_for` says why) or "auto": buckets on a GPU, dynamic elsewhere.
    """

    def __init__(self, run: str | Path, batch_size: int = 64, device: str | torch.device | None = None,
                 model: tuple[Config, Model] | None = None, precision: str = "auto", compile: bool = False,
                 threads: int | None = None, compile_shapes: str = "auto"):
        self.run = Path(run)
        self.batch_size = need_batch_size(batch_size)
        self.truncated = 0  # texts cut to max_length so far
        self.onnx = None  # an ONNX export folder's OnnxModel (`bertkit export --format onnx`), else the torch model
        if compile_shapes not in COMPILE_SHAPES:  # before anything loads
            raise BertkitError(f"--compile-shapes must be one of {', '.join(COMPILE_SHAPES)}, not {compile_shapes!r}")
        if compile_shapes != "auto" and not compile:
            raise BertkitError("--compile-shapes applies with --compile")
        if model is None and is_onnx_export(self.run):
            self._open_onnx(device, precision, compile, threads)
            return
        config, net = model if model is not None else load_run(self.run)
        if config.model.architecture != "encoder":
            arch = config.model.architecture
            raise BertkitError(f"{run}: sentence embeddings need an encoder, this is "
                               f"{a_or_an(arch)}")
        self.config, self.model = config, net
        if device is not None or model is None:
            self.model.to(default_device(device))
        self.sentence = config.sentence
        self.precision = resolve_precision(precision, self.model.device).precision
        self.tokenizer = load_run_tokenizer(self.run, config)
        self.pad_id = special_ids(self.tokenizer).pad
        self.encoder = TaskEncoder(self.tokenizer, self.sentence.window(config.model.max_len))
        self.bucket_window: int | None = None  # the window every batch pads within, when compiled for buckets
        if compile:
            shapes = compile_shapes_for(compile_shapes, self.model.device)
            if shapes == "buckets":
                self.bucket_window = self.encoder.max_length
                allow_bucket_graphs(self.bucket_window, batch_size)
            self.model.compile(dynamic=shapes == "dynamic")  # dynamic: every batch length is another shape
        self.dim = config.model.d_model
        self._identity: str | None = None

    def _open_onnx(self, device, precision: str, compile: bool, threads: int | None) -> None:
        """An export folder: its graph through onnxruntime (pooling and normalisation inside it)."""
        self.onnx = OnnxModel(self.run, threads)
        manifest = self.onnx.manifest
        if manifest.kind != "encoder":
            raise BertkitError(f"{self.run}: an ONNX export of a {manifest.kind} run; sentence embeddings need an "
                               "encoder's export")
        if compile:
            raise BertkitError(f"--compile: {self.run} is an ONNX export, which onnxruntime runs as a graph already")
        if precision not in ("auto", manifest.precision):
            raise BertkitError(f"{self.run}: an ONNX export runs at its own precision ({manifest.precision}); "
                               "drop --precision")
        if device is not None and str(device) != "cpu":
            raise BertkitError(f"{self.run}: an ONNX export runs on the CPU through onnxruntime, not on {device}")
        self.config, self.model, self.sentence = manifest.config, None, manifest.config.sentence
        self.precision = manifest.precision
        self.tokenizer = load_run_tokenizer(self.run, manifest.config)
        self.pad_id = special_ids(self.tokenizer).pad
        self.encoder = TaskEncoder(self.tokenizer, manifest.max_length)
        self.dim = manifest.dim
        self._identity = manifest.identity

    def _torch_only(self) -> None:
        """Refuse what needs the layers an ONNX export does not hold."""
        if self.onnx is not None:
            raise BertkitError(f"{self.run}: an ONNX export holds the pooled output only; --layers, --tokens and "
                               "probes need the bertkit run it came from")

    @property
    def layer_count(self) -> int:
        """The layers `encode_layers` can read (0: the embeddings output); an ONNX export has none to read."""
        self._torch_only()
        return self.model.layer_count

    @property
    def max_length(self) -> int:
        return self.encoder.max_length

    @property
    def identity(self) -> str:
        """The model's fingerprint (`model_identity`), computed once."""
        if self._identity is None:
            self._identity = model_identity(self.run, self.config)
        return self._identity

    def encode(self, texts: list[str] | str, on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        """Embed texts: (N,) -> (N, D) float32, rows in input order (batches run sorted by length). One string is
        one text -> (D,), as sentence-transformers' `encode` takes it (list("a text") would be a text per
        character)."""
        if isinstance(texts, str):
            return self.encode([texts], on_batch)[0]
        encoded = self.encoder.texts(stripped(texts)) if texts else []
        self.truncated += sum(e.truncated for e in encoded)
        return self.embed_encoded(encoded, on_batch=on_batch)

    def embed_encoded(self, encoded: list[Encoded], normalize: bool | None = None,
                      on_batch: Callable[[int], None] | None = None) -> np.ndarray:
        """Embeddings of texts already tokenised by `self.encoder`: (N, D) float32 in input order; `normalize`
        None: as the model's settings say (search passes True: cosine needs unit vectors)."""
        normalize = self.sentence.normalize if normalize is None else normalize
        if self.onnx is None:
            return embed_encoded(self.model, encoded, self.pad_id, self.batch_size, self.sentence.pooling,
                                 normalize, on_batch, self.precision, self.bucket_window)
        if not encoded:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.stack(self.onnx.run_sorted(encoded, self.pad_id, self.batch_size, "sentence_embedding",
                                                on_batch))  # (N, D), normalised in the graph where the run says
        return normalize_rows(vectors) if normalize and not self.sentence.normalize else vectors

    def encode_layers(self, texts: list[str], layers: list[int], tokens: bool = False,
                      on_batch: Callable[[int], None] | None = None) -> list[np.ndarray] | np.ndarray:
        """Every chosen layer's representation (`layers` index `layer_states`: 0 the embeddings output, -1 the last
        layer). Pooled (the run's pooling and normalisation, per layer): (N, L', D). With `tokens`: one
        (T_i, L', D) array per text, every token of it (specials included) un-normalised."""
        encoded = self.encoder.texts(stripped(texts)) if texts else []
        return self.encode_layers_encoded(encoded, layers, tokens, on_batch)

    def encode_layers_encoded(self, encoded: list[Encoded], layers: list[int], tokens: bool = False,
                              on_batch: Callable[[int], None] | None = None) -> list[np.ndarray] | np.ndarray:
        """`encode_layers` of texts already tokenised by `self.encoder` (callers that also need the tokens)."""
        self._torch_only()
        self.truncated += sum(e.truncated for e in encoded)
        chosen = torch.tensor(layers)

        def forward(ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
            states = self.model.layer_states(ids, mask, types)[:, :, chosen.to(ids.device)]  # (B, T, L', D)
            if tokens:
                return states
            b, t, n, d = states.shape
            pooled = pool_states(states.permute(0, 2, 1, 3).reshape(b * n, t, d),
                                 mask.repeat_interleave(n, dim=0), self.sentence.pooling)  # (B * L', D)
            return pooled.reshape(b, n, d)  # (B, L', D)

        if not encoded:
            return [] if tokens else np.zeros((0, len(layers), self.dim), dtype=np.float32)
        rows = run_sorted(self.model, encoded, self.pad_id, self.batch_size, forward, on_batch,
                          per_token=tokens, precision=self.precision)
        if tokens:
            return rows
        vectors = np.stack(rows).astype(np.float32, copy=False)  # (N, L', D)
        if self.sentence.normalize:
            vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
        return vectors

    def similarity(self, a: list[str], b: list[str]) -> np.ndarray:
        """Cosine similarity of a[i] and b[i] for every i (one length-sorted pass over both sides). -> (N,)"""
        both = normalize_rows(self.encode(list(a) + list(b)))
        return (both[:len(a)] * both[len(a):]).sum(1)


def stripped(texts) -> list[str]:
    """Texts without the spaces and line breaks around them, as `embed`, `index` and `search` read them (the corpus
    reader strips): a byte-level tokenizer reads a trailing space or newline as a token, so `similarity` and the
    Python `encode` of "a text " differed from `embed`'s vector of it (0.9363 against 0.9577 on a review's pair)."""
    return [text.strip() for text in texts]


def truncation_warning(console: Console, encoder: SentenceEncoder, what: str = "texts") -> None:
    """The one warning about texts cut to the model's window (`what`: their plural name, such as "sentences")."""
    if encoder.truncated:
        one = encoder.truncated == 1
        console.print(f"[yellow]warning: {encoder.truncated:,} {what[:-1] if one else what} "
                      f"{'is' if one else 'are'} longer than {encoder.max_length} tokens and "
                      f"{'was' if one else 'were'} truncated (sentence.max_seq_length)")
