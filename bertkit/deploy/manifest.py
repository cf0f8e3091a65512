"""The manifest of an ONNX export folder (`bertkit export RUN --format onnx`): what its graph computes.

An export folder holds `model.onnx` (one graph: inputs `input_ids`, `attention_mask`, `token_type_ids`, each (B, T)
int64; outputs by kind, below), `tokenizer.json` and `manifest.json`. The manifest names the kind and everything an
inference command needs besides the graph: the source run's config (task columns, window, pooling), its labels,
the precision, and a digest of the graph file, so that a folder whose manifest does not match its graph is refused
with one line instead of producing wrong vectors.

Kinds and their outputs:
    encoder   sentence_embedding (B, D): pooled as the run's [sentence] says and L2-normalised where it says so;
              token_embeddings (B, T, D): the last layer's states (padded positions undefined)
    classify  logits (B, C)      regress  logits (B, 1): the score      ner  logits (B, T, C)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from bertkit.config import Config
from bertkit.errors import BertkitError
from bertkit.run.files import content_digest

FORMAT = "bertkit-onnx"
VERSION = 1
MANIFEST_FILE = "manifest.json"
GRAPH_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUTS = {"encoder": ("sentence_embedding", "token_embeddings"), "classify": ("logits",), "regress": ("logits",),
           "ner": ("logits",)}


@dataclasses.dataclass(frozen=True)
class Manifest:
    """An export folder's manifest.json, parsed and checked."""

    kind: str  # encoder | classify | regress | ner
    precision: str  # fp32 | int8
    config: Config  # the source run's config (the model's shape, [sentence], [task])
    labels: tuple[str, ...]  # task kinds: the label order of the logits; () for an encoder
    max_length: int  # tokens per text the graph was exported for (specials included)
    dim: int  # the width of sentence_embedding / token_embeddings
    pooling: str | None  # encoder: cls | mean | max
    normalize: bool | None  # encoder: sentence_embedding is L2-normalised
    identity: str  # the embedding fingerprint (an fp32 export keeps its run's: it embeds alike within 1e-4 cosine)
    graph_digest: str  # run.files.content_digest of model.onnx
    details: dict  # everything else the export recorded (source, opset, optimisation, quantization, parity)


def is_onnx_export(path: str | Path) -> bool:
    """True when `path` is a folder with an ONNX export's manifest (whatever its state: reading it checks that)."""
    path = Path(path)
    return path.is_dir() and (path / MANIFEST_FILE).is_file() and not (path / "config.json").is_file()


def read_manifest(folder: str | Path) -> Manifest:
    """The folder's manifest, with one-line errors for a folder from another tool, a damaged or foreign manifest,
    and a graph file that is not the one the manifest was written for."""
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise BertkitError(f"{path}: not readable as a bertkit ONNX manifest ({error})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BertkitError(f"{folder}: an ONNX folder bertkit did not write (its {MANIFEST_FILE} is not "
                           f"format {FORMAT!r}); export the run with `bertkit export RUN --format onnx`")
    if data.get("version") != VERSION:
        raise BertkitError(f"{path}: manifest version {data.get('version')!r}; this bertkit reads version {VERSION}")
    for name in (GRAPH_FILE, TOKENIZER_FILE):
        if not (folder / name).is_file():
            raise BertkitError(f"{folder}: no {name} beside its {MANIFEST_FILE}")
    try:
        kind = data["kind"]
        if kind not in OUTPUTS:
            raise ValueError(f"kind {kind!r}")
        config = Config.from_dict(dict(data["config"]), source=str(path), stored=True)
        manifest = Manifest(kind=kind, precision=str(data["precision"]), config=config,
                            labels=tuple(str(label) for label in data.get("labels") or ()),
                            max_length=int(data["max_length"]), dim=int(data["dim"]), pooling=data.get("pooling"),
                            normalize=data.get("normalize"), identity=str(data["identity"]),
                            graph_digest=str(data["graph_digest"]), details=dict(data.get("details") or {}))
    except (KeyError, TypeError, ValueError) as error:
        raise BertkitError(f"{path}: damaged manifest ({error})") from None
    if content_digest(folder / GRAPH_FILE) != manifest.graph_digest:
        raise BertkitError(f"{folder}: {GRAPH_FILE} is not the graph its {MANIFEST_FILE} describes (replaced or "
                           "damaged); export the run again")
    return manifest


def manifest_json(manifest: Manifest) -> str:
    """The manifest as manifest.json's text."""
    data = {"format": FORMAT, "version": VERSION, "kind": manifest.kind, "precision": manifest.precision,
            "labels": list(manifest.labels), "max_length": manifest.max_length, "dim": manifest.dim,
            "pooling": manifest.pooling, "normalize": manifest.normalize, "identity": manifest.identity,
            "inputs": list(INPUTS), "outputs": list(OUTPUTS[manifest.kind]), "graph_digest": manifest.graph_digest,
            "details": manifest.details, "config": manifest.config.to_dict()}
    return json.dumps(data, indent=2) + "\n"
