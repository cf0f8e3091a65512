"""`bertkit export RUN --format onnx [--quantize int8]`: one ONNX graph with everything the run does at inference.

An encoder run (pretrained, imported or SBERT-trained) becomes transformer + pooling + normalisation with outputs
`sentence_embedding` and `token_embeddings`; a classifier, regressor or NER tagger its `logits`. The graph comes from
torch's exporter (torch.export → ONNX, opset `OPSET`, dynamic batch and sequence axes; attention as onnxruntime's
fused MultiHeadAttention operator where it covers the model, `onnx_attention`), then onnxruntime's transformer
optimiser (fused LayerNorm / GELU); `--quantize int8` applies onnxruntime's dynamic int8 quantization
to the matrix products (weights per output channel). A parity check on fixed probe texts of mixed lengths, in
batches of 1, 7 and 32, compares the graph with the run's torch model in fp32 and refuses the export below cosine
0.9999 on every probe (fp32), or 0.99 on their mean with 0.95 on every probe (int8), leaving nothing behind. Where
int8 on every matrix product misses the bound, the FFN's output projections (the activations with the widest range,
after GELU) stay fp32 and the check runs again; the manifest records which.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import io
import logging
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from bertkit.config import Config
from bertkit.deploy.manifest import GRAPH_FILE, INPUTS, MANIFEST_FILE, OUTPUTS, TOKENIZER_FILE, Manifest, \
    manifest_json
from bertkit.deploy.onnx_attention import attention_in, refused, translation_table
from bertkit.deploy.runtime import OnnxModel
from bertkit.embedding import model_identity
from bertkit.errors import BertkitError, a_or_an
from bertkit.nn.model import TASK_HEADS, Model
from bertkit.run.directory import INPUTS_UNKNOWN, LABELS_FILE, inputs_unknown, load_run, read_labels
from bertkit.run.files import atomic_dir, content_digest, write_atomic
from bertkit.run.outputs import ONNX_EXPORT, claim
from bertkit.text.features import Encoded, TaskEncoder, pad_batch, split_words
from bertkit.text.tokenizer import load_run_tokenizer, special_ids

OPSET = 18
# the parity bounds: fp32 on every probe text; int8 on their mean (dynamic int8 moves a one-word text's vector more
# than a sentence's: all-MiniLM-L6-v2 measured mean 0.991, lowest 0.96 for "ok"), with a floor for every text
MIN_COSINE = {"fp32": 0.9999, "int8": 0.99}
FLOOR_COSINE = 0.95
# and what a cosine cannot see: a regressor's largest score error in units of its scores' spread (int8 measured
# 0.058 on a 400-step STS-B cell), a classifier's or tagger's decisions kept (int8 kept all 40 of an SST-2 cell's)
MAX_DIFF_IN_SPREADS = {"fp32": 1e-3, "int8": 0.25}
SPREAD_FLOOR = 1e-3  # the least spread a regressor's scores are measured in: a thousandth of their largest (or 1)
SAME_DECISION = {"fp32": 1.0, "int8": 0.9}
PROBE_BATCHES = (1, 7, 32)
PROBES = (
    "The film was a delight from start to finish.",
    "Terrible.",
    "I would not recommend this restaurant to anyone who values their time or their money.",
    "A man is playing a guitar on the stage while the crowd sings along.",
    "Stocks fell sharply on Monday after the central bank raised interest rates again.",
    "Where is the nearest train station?",
    "The quick brown fox jumps over the lazy dog.",
    "She said it was fine, but her face told another story entirely.",
    "EU rejects German call to boycott British lamb.",
    "Peter Blackburn reported from Brussels on Friday.",
    "Two dogs are running through a field of tall grass.",
    "A woman is slicing an onion in the kitchen.",
    "The plot is thin, the acting wooden, and the ending arrives far too late to matter.",
    "ok",
    "An utterly charming, funny and moving story about growing up in a small town.",
    "The committee will meet again next week to discuss the budget for the coming year.",
    "He scored twice in the second half as United came back to win three goals to two.",
    "Is this the right way to the museum, or should we have turned left at the bridge?",
    "Rain is expected across the north of the country by the end of the weekend.",
    "The software update fixed the crash but made the battery drain faster than before.",
    "Nobody expected the quiet librarian to win the national chess championship.",
    "A child in a red coat is feeding ducks by the pond.",
    "Prices for crude oil rose to their highest level in six months.",
    "I loved it.",
    "Despite a promising first act, the sequel loses its way in a maze of subplots.",
    "The researchers trained the model on a small corpus and still beat the baseline.",
    "Japan's exports grew for the third month in a row, the finance ministry said.",
    "Please send the signed contract back to us by Thursday at the latest.",
    "The cat sat on the mat and watched the birds outside the window all afternoon.",
    "What a waste of a talented cast.",
    "A group of people are hiking up a snowy mountain trail.",
    " ".join(["The long text at the end runs past the model's window so that truncation is part of the check."] * 12),
)


def _kind(run: Path, config: Config) -> tuple[str, tuple[str, ...]]:
    """The export kind of a run and its labels: a task head with labels.json → its task kind; else an encoder."""
    if config.model.architecture != "encoder":
        raise BertkitError(f"export --format onnx: {run} is {a_or_an(config.model.architecture)}; ONNX export "
                           "covers encoder runs (encoders, classifiers, regressors, NER taggers)")
    if any(h in config.heads.names for h in TASK_HEADS) and (run / LABELS_FILE).is_file():
        kind, labels = read_labels(run)
        return kind, tuple(labels)
    return "encoder", ()


class _Graph(torch.nn.Module):
    """What the exported graph computes: the run's model with its pooling and normalisation (an encoder) or its
    task head's logits, from (B, T) ids, mask and token types."""

    def __init__(self, model: Model, kind: str, pooling: str, normalize: bool):
        super().__init__()
        self.model, self.kind, self.pooling, self.normalize = model, kind, pooling, normalize

    def forward(self, input_ids, attention_mask, token_type_ids):
        if self.kind == "encoder":
            out = self.model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                             pool=self.pooling)
            pooled = out.pooled  # (B, D)
            if self.normalize:
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
            return pooled, out.last_hidden_state  # (B, D), (B, T, D)
        head = "tagger" if self.kind == "ner" else "classifier"
        return self.model(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, head=head).logits


@contextlib.contextmanager
def _quiet():
    """The exporter and onnxruntime's tools print progress and warnings of their own: kept off the terminal."""
    loggers = [logging.getLogger(name) for name in ("onnxruntime", "onnxscript", "torch.onnx", "root")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _probes(kind: str, encoder: TaskEncoder, pairs: bool = False) -> list[Encoded]:
    """The probe texts tokenised as the kind's inference does (words for a tagger; for a run on text pairs, each
    probe paired with the next, so the second segment's token types are checked too)."""
    if kind == "ner":
        return encoder.words(list(PROBES), [split_words(text) for text in PROBES])
    return encoder.texts(list(PROBES), list(PROBES[1:] + PROBES[:1]) if pairs else None)


def _export_graph(graph: _Graph, sample: list[Encoded], pad_id: int, max_length: int, path: Path,
                  table: dict | None = None) -> None:
    """torch.export → ONNX (one self-contained file) with dynamic batch and sequence axes; `table`: the
    exporter's custom translations (attention as one onnxruntime operator, `onnx_attention`)."""
    ids, mask, types = (torch.from_numpy(a) for a in pad_batch(sample, pad_id))
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence", max=max_length)
    axes = {name: {0: batch, 1: sequence} for name in INPUTS}
    outputs = list(OUTPUTS[graph.kind])
    with _quiet():
        program = torch.onnx.export(graph, (ids, mask, types), input_names=list(INPUTS), output_names=outputs,
                                    dynamic_shapes=axes, opset_version=OPSET, dynamo=True, verbose=False,
                                    custom_translation_table=table or None)
        program.save(str(path), external_data=False)


def _optimise(source: Path, target: Path, config: Config) -> bool:
    """onnxruntime's transformer optimiser (BERT fusions: LayerNorm, bias + GELU); False where it fails."""
    try:
        with _quiet():
            from onnxruntime.transformers.fusion_options import FusionOptions
            from onnxruntime.transformers.optimizer import optimize_model

            options = FusionOptions("bert")
            # without token types the embeddings fuse into an EmbedLayerNormalization with an empty segment input,
            # which aborts the process when it runs (no exception: the unfused fallback never came)
            options.enable_embed_layer_norm = config.model.type_vocab_size > 0
            optimised = optimize_model(str(source), model_type="bert", num_heads=config.model.n_heads,
                                       hidden_size=config.model.d_model, optimization_options=options)
            optimised.save_model_to_file(str(target))
        return True
    except Exception:  # noqa: BLE001 - an optimiser that cannot handle this graph leaves it as it is
        return False


def _nodes_kept(path: Path, config: Config) -> tuple[list[str], list[str]]:
    """The nodes int8 leaves fp32 always (the small position and token-type tables' lookups: their int8 error is
    not worth their few kilobytes), and the MatMuls of the FFN's output projections (weight (d_ff, ·)), which the
    fallback leaves fp32 too."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    shapes = {init.name: tuple(init.dims) for init in graph.initializer}
    small = [node.name for node in graph.node if node.op_type == "Gather" and node.input
             and len(shapes.get(node.input[0], ())) == 2 and shapes[node.input[0]][0] != config.model.vocab_size]
    ffn = [node.name for node in graph.node if node.op_type == "MatMul" and len(node.input) > 1
           and shapes.get(node.input[1], (0,))[0] == config.model.d_ff]
    return small, ffn


def _quantize(source: Path, target: Path, keep_fp32: list[str]) -> None:
    """onnxruntime's dynamic int8 on the matrix products (weights per output channel) and the embedding tables
    (`keep_fp32`: nodes left)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet():
        quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul", "Gather"], nodes_to_exclude=keep_fp32)


def _reference(graph: _Graph, batches: list[list[Encoded]], pad_id: int, output: str) -> list[np.ndarray]:
    """The torch model's fp32 output on each probe batch."""
    index = OUTPUTS[graph.kind].index(output)
    out = []
    with torch.inference_mode():
        for batch in batches:
            result = graph(*(torch.from_numpy(a) for a in pad_batch(batch, pad_id)))
            out.append((result[index] if isinstance(result, tuple) else result).float().numpy())
    return out


def parity(folder: Path, reference: list[np.ndarray], batches: list[list[Encoded]], pad_id: int,
           kind: str) -> dict:
    """The export's output against the torch model's on the probe batches: the lowest cosine (per row; per real
    token for a tagger; over all scores for a one-output regressor) and the largest absolute difference."""
    model = OnnxModel(folder, threads=1)
    output = OUTPUTS[kind][0]
    ours, theirs = [], []
    for batch, expected in zip(batches, reference):
        ids, mask, types = pad_batch(batch, pad_id)
        got = model.forward(ids, mask, types, output)
        if got.ndim == 3:  # (B, T, C): real tokens only
            real = mask.astype(bool)
            got, expected = got[real], expected[real]
        ours.append(got.reshape(len(got), -1))
        theirs.append(expected.reshape(len(expected), -1))
    a, b = np.concatenate(ours).astype(np.float64), np.concatenate(theirs).astype(np.float64)
    extra = {}
    if a.shape[1] == 1:  # one score per text: the scores as one vector, and (the cosine is blind to a scale or a
        # shift of every score) the largest error in units of the scores' spread; a spread of at least a
        # thousandth of the scores' size, so a run whose scores barely vary (an early checkpoint) is not refused
        # for an error of 2e-7 (a review, 2026-11-28)
        floor = SPREAD_FLOOR * max(1.0, float(np.abs(b).max()))
        extra["max_diff_in_spreads"] = float(np.abs(a - b).max() / max(float(b.std()), floor))
        extra["spread"], extra["spread_floor"] = float(b.std()), floor
        a, b = a.T, b.T
    elif kind in ("classify", "ner"):  # a flipped decision moves a few-class cosine little: count decisions
        extra["same_decision"] = float((a.argmax(1) == b.argmax(1)).mean())
    cosine = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12)
    return {"min_cosine": float(cosine.min()), "mean_cosine": float(cosine.mean()),
            "max_abs_diff": float(np.abs(a - b).max()), "rows": len(a), **extra}


def passes(result: dict, precision: str) -> bool:
    """The parity bound: fp32 on every probe, int8 on the mean with a floor for every probe; a regressor's scores
    within a share of their spread, a classifier's decisions kept."""
    if result.get("max_diff_in_spreads", 0.0) > MAX_DIFF_IN_SPREADS[precision]:
        return False
    if result.get("same_decision", 1.0) < SAME_DECISION[precision]:
        return False
    if precision == "fp32":
        return result["min_cosine"] >= MIN_COSINE["fp32"]
    return result["mean_cosine"] >= MIN_COSINE[precision] and result["min_cosine"] >= FLOOR_COSINE


def _bound(precision: str, kind: str) -> str:
    """The parity bound in words, for the error line."""
    bound = (f"every probe >= {MIN_COSINE[precision]}" if precision == "fp32" else
             f"mean >= {MIN_COSINE[precision]}, every probe >= {FLOOR_COSINE}")
    if kind == "regress":
        bound += f", every score within {MAX_DIFF_IN_SPREADS[precision]:g} of the scores' spread"
    elif kind in ("classify", "ner"):
        bound += f", {SAME_DECISION[precision]:.0%} of the decisions the same"
    return bound


@dataclasses.dataclass
class _Source:
    """A run prepared for export: its config and kind, the graph module, the probe batches and their reference."""

    run: Path
    config: Config
    kind: str
    labels: tuple[str, ...]
    max_length: int
    pad_id: int
    graph: _Graph
    batches: list[list[Encoded]]
    reference: list[np.ndarray]


def _prepare(run: Path) -> _Source:
    """Load the run, find its kind and window, tokenise the probes and compute the torch model's fp32 outputs."""
    config, model = load_run(run, "cpu")
    kind, labels = _kind(run, config)
    tokenizer = load_run_tokenizer(run, config)
    pad_id = special_ids(tokenizer).pad
    if kind == "encoder":
        max_length = config.sentence.window(config.model.max_len)
    else:
        max_length = config.task.window(config.model.max_len)
    pairs = kind != "encoder" and bool(config.task.text_pair_column)
    probes = _probes(kind, TaskEncoder(tokenizer, max_length), pairs)
    batches = [probes[:n] for n in PROBE_BATCHES]
    graph = _Graph(model.float().eval(), kind, config.sentence.pooling, config.sentence.normalize)
    reference = _reference(graph, batches, pad_id, OUTPUTS[kind][0])
    return _Source(run, config, kind, labels, max_length, pad_id, graph, batches, reference)


def _raw_graph(source: _Source, tmp: Path, fused_attention: bool, say) -> tuple[Path, str]:
    """Export the run's graph to tmp/raw.onnx; returns it and how its attention is computed: one onnxruntime operator
    per layer ("MultiHeadAttention", where `fused_attention` and the operator covers the model) or torch's own
    translation ("decomposed"). An SDPA call the operator refuses (Unsupported) falls back quietly, any other failure
    of the operator's translation with one line; a full disk or exhausted memory stops the export."""
    raw, sample = tmp / "raw.onnx", source.batches[1][:2]
    if fused_attention:
        try:
            table = translation_table(source.config)
            if table:
                _export_graph(source.graph, sample, source.pad_id, source.max_length, raw, table)
                return raw, attention_in(raw)
        except (OSError, MemoryError):
            raise
        except Exception as error:  # noqa: BLE001 - the exporter wraps what the translation raised
            if not refused(error):
                say(f"  attention as one operator failed ({str(error).strip().splitlines()[0][:160]}); exporting "
                    "it as torch translates it")
    _export_graph(source.graph, sample, source.pad_id, source.max_length, raw)
    return raw, "decomposed"


def _candidates(source: _Source, tmp: Path, quantize: str | None, say) -> Iterator[tuple[Path, Path | None, dict]]:
    """The graphs to try in order, each as (file, the fp32 graph it is quantized from as it is tried, or None; what
    the manifest records of it): fp32 optimised, then plain; int8 on every matrix product of the best fp32 graph,
    then with the FFN outputs kept fp32 — first with attention as one operator, then, only where none of those
    passes (the generator is lazy: nothing is exported twice otherwise), with torch's translation of attention."""
    fused = tmp / "fused.onnx"
    for fused_attention in (True, False):
        raw, attention = _raw_graph(source, tmp, fused_attention, say)
        candidates = [(fused, None, {"optimised": True, "attention": attention})] \
            if _optimise(raw, fused, source.config) else []
        candidates.append((raw, None, {"optimised": False, "attention": attention}))
        if quantize == "int8":
            base, _, how = candidates[0]
            small, ffn = _nodes_kept(base, source.config)
            candidates = [(tmp / "int8.onnx", base, {**how, "kept_fp32": small}),
                          (tmp / "int8-ffn.onnx", base, {**how, "kept_fp32": small + ffn, "ffn_fp32": True})]
        yield from candidates
        if attention == "decomposed":
            return


def _manifest(source: _Source, precision: str, graph: Path, details: dict) -> Manifest:
    config, encoder = source.config, source.kind == "encoder"
    if inputs_unknown(source.run):  # an imported transformers classifier: its export takes a pair column alike
        details = {**details, **INPUTS_UNKNOWN}
    return Manifest(kind=source.kind, precision=precision, config=config, labels=source.labels,
                    max_length=source.max_length, dim=config.model.d_model,
                    pooling=config.sentence.pooling if encoder else None,
                    normalize=config.sentence.normalize if encoder else None,
                    identity=_identity(source.run, config, precision, details), graph_digest=content_digest(graph),
                    details=details)


ONNX_INSTALL = "pip install -e \".[onnx]\" in a checkout, pip install \"bertkit[onnx]\" otherwise"


def require_onnx() -> None:
    """One clear error, before any work, where the packages an ONNX export needs are missing (they are the `onnx`
    extra, not in a plain install)."""
    missing = [name for name in ("onnx", "onnxscript", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        raise BertkitError(f"export --format onnx needs {', '.join(missing)}, not installed: {ONNX_INSTALL}")


def export_onnx(run: str | Path, out: str | Path, quantize: str | None = None, overwrite: bool = False,
                say=print) -> dict:
    """Export `run` to the folder `out` (see the module docstring); `say` gets the progress lines. Returns what
    was written: out, kind, precision, parity, bytes, seconds."""
    run, out = Path(run), Path(out)
    if quantize not in (None, "int8"):
        raise BertkitError(f"--quantize {quantize!r}: the one quantization is int8")
    require_onnx()
    source = _prepare(run)
    claim(out, ONNX_EXPORT, overwrite, inputs=(run,), hint="choose another --out or pass --overwrite")
    precision = quantize or "fp32"
    started = time.perf_counter()
    with atomic_dir(out, overwrite=overwrite) as tmp:
        say(f"exporting {run} ({source.kind}, {source.config.model.n_layers} x {source.config.model.d_model}) to "
            f"ONNX opset {OPSET}")
        shutil.copyfile(run / TOKENIZER_FILE, tmp / TOKENIZER_FILE)
        result = None
        for path, fp32_graph, how in _candidates(source, tmp, quantize, say):
            if fp32_graph is not None:
                _quantize(fp32_graph, path, how["kept_fp32"])
            shutil.copyfile(path, tmp / GRAPH_FILE)
            details = {"source": str(run.resolve()), "opset": OPSET, "torch": torch.__version__, **how}
            manifest = _manifest(source, precision, tmp / GRAPH_FILE, details)
            write_atomic(tmp / MANIFEST_FILE, manifest_json(manifest))
            label = (f"  {precision}{' (FFN outputs kept fp32)' if how.get('ffn_fp32') else ''}"
                     f"{', optimised' if how['optimised'] else ''}, attention {how['attention']}")
            try:
                result = parity(tmp, source.reference, source.batches, source.pad_id, source.kind)
            except BertkitError as error:  # onnxruntime cannot run this graph: the next one
                say(f"{label}: {error}")
                continue
            say(f"{label}: cosine to the run mean {result['mean_cosine']:.6f}, lowest {result['min_cosine']:.6f}, "
                f"max |diff| {result['max_abs_diff']:.2e} on {len(PROBES)} probe texts in batches of "
                f"{' / '.join(map(str, PROBE_BATCHES))}")
            if passes(result, precision):
                break
        else:
            found = "onnxruntime could run none of the graphs" if result is None else \
                f"cosine mean {result['mean_cosine']:.5f}, lowest {result['min_cosine']:.5f}" + (
                    f", max error {result['max_diff_in_spreads']:.3g} spreads" if "max_diff_in_spreads" in result
                    else f", {result['same_decision']:.0%} of the decisions the same" if "same_decision" in result
                    else "")
            flat = result is not None and result.get("spread", 1.0) < result.get("spread_floor", 0.0)
            why = "; the run's scores barely vary (std {:.2g} on the probes): is it trained?".format(
                result["spread"]) if flat else ""
            raise BertkitError(f"export --format onnx: the {precision} graph's outputs differ from the run's ({found}; "
                               f"needed {_bound(precision, source.kind)}){why}; nothing was written")
        details = {**manifest.details, "parity": result, "min_cosine_required": MIN_COSINE[precision]}
        write_atomic(tmp / MANIFEST_FILE, manifest_json(dataclasses.replace(manifest, details=details)))
        for leftover in ("raw.onnx", "fused.onnx", "int8.onnx", "int8-ffn.onnx"):
            (tmp / leftover).unlink(missing_ok=True)
    return {"out": str(out), "kind": source.kind, "precision": precision, "parity": result,
            "bytes": (out / GRAPH_FILE).stat().st_size, "seconds": time.perf_counter() - started}


def _identity(run: Path, config: Config, precision: str, how: dict) -> str:
    """An fp32 export keeps its run's embedding fingerprint (it embeds alike within the parity bound, so an index
    built from the run serves it); an int8 one has its own."""
    identity = model_identity(run, config)
    if precision == "fp32":
        return identity
    return hashlib.sha256(f"{identity}:{precision}:{sorted(how.get('kept_fp32', []))}".encode()).hexdigest()[:24]
