"""Inference for task models: length-sorted batches (order restored), constrained IOB2 decoding, entity spans.

Shared by training-time evaluation, `bertkit predict` and `bertkit evaluate`, so the numbers a finetune reports
are the numbers its predictions give.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from bertkit.deploy.manifest import is_onnx_export
from bertkit.deploy.runtime import OnnxModel
from bertkit.errors import BertkitError, need_batch_size
from bertkit.hardware import autocast, resolve_precision
from bertkit.metrics import classification_metrics, correlation_metrics, entity_metrics
from bertkit.nn.model import TASK_HEADS, Model
from bertkit.run.directory import LABELS_FILE, inputs_unknown, load_run, read_labels
from bertkit.text.features import (Encoded, TaskEncoder, bucket_rows, bucket_width, in_input_order, join_words,
                                   length_sorted, pad_batch)
from bertkit.text.tokenizer import load_run_tokenizer, special_ids

if TYPE_CHECKING:  # types only: text.tasks reads files through datasets, which inference does not need
    from bertkit.text.tasks import LabelledText, TaggedSentence


def inference_workers(device: torch.device) -> int:
    """Batches run at once: on a CPU one per core, each op single-threaded — the small matrices of sentence-length
    batches keep a core busier than one batch split over all cores (+30% sentences/s on 2 cores, see
    benchmarks/embed_throughput.py); on a GPU one."""
    return max(1, torch.get_num_threads()) if device.type == "cpu" else 1


def run_sorted(model: Model, examples: list[Encoded], pad_id: int, batch_size: int,
               forward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
               on_batch: Callable[[int], None] | None = None, per_token: bool | None = None,
               precision: str = "fp32", bucket_window: int | None = None) -> list[np.ndarray]:
    """`forward(ids, mask, token_types)` over length-sorted batches; one float32 row per example, in input order.

    Examples run shortest first, so a batch pads only to about its own length; `forward` returns (B, ...) and the
    rows are put back in the input order (a per-token output keeps only the example's own tokens). On a CPU,
    `inference_workers` batches run concurrently (one at a time through a compiled model). `on_batch(n)` is called
    after each batch of n examples (progress bars). `precision` (resolved: fp32 / bf16 / fp16) runs `forward` under
    autocast; rows come back float32 either way. `bucket_window` (the model's window, in tokens) pads every batch
    to a power-of-two number of rows (`bucket_rows`: copies of its first row, dropped again) and a power-of-two
    width within that window (`bucket_width`), so that a model compiled for static shapes sees a few shapes, not one
    per batch length: up to ~2x the tokens of a batch padded to its own longest.
    """
    was_training = model.training
    model.eval()
    device = model.device
    lengths, batches = length_sorted(examples, batch_size)

    def one(chunk: np.ndarray) -> np.ndarray:
        rows, width = chunk, None
        if bucket_window is not None:
            # padding rows repeat the first example (a real one: an all-padding row is a fully masked softmax)
            rows = np.concatenate([chunk, np.repeat(chunk[:1], bucket_rows(len(chunk), batch_size) - len(chunk))])
            width = bucket_width(int(lengths[chunk].max()), bucket_window)
        ids, mask, types = pad_batch([examples[index] for index in rows], pad_id, width)  # (B, T) each
        with torch.inference_mode(), autocast(device, precision):  # per thread: both are thread-local
            out = forward(torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device),
                          torch.from_numpy(types).to(device))  # (B, ...)
            return out[:len(chunk)].float().cpu().numpy()

    # A compiled model (Module.compile, or torch.compile's wrapper) runs one batch at a time: two threads in it at
    # once can deadlock in dynamo (bf16 `embed --compile` on a 2-core CPU hung for good, one thread tracing, the
    # other leaving autocast)
    compiled = getattr(model, "_compiled_call_impl", None) is not None or hasattr(model, "_orig_mod")
    # Under several processes (a training run's evaluation) a forward may hold collectives: a sharded (FSDP) model
    # gathers its weights in each. Two threads' forwards at once issued them out of order and gloo aborted on a
    # collective mismatch (or, with blocks of one size, could have mixed them): one batch at a time there
    distributed = torch.distributed.is_available() and torch.distributed.is_initialized() \
        and torch.distributed.get_world_size() > 1
    workers = 1 if compiled or distributed else min(inference_workers(device), len(batches))
    threads = torch.get_num_threads()
    pool = None
    try:
        if workers > 1:
            torch.set_num_threads(1)
            pool = ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,))
            results = pool.map(one, batches)  # in order, `workers` batches in flight
        else:
            results = map(one, batches)
        return in_input_order(len(examples), batches, results, lengths, per_token, on_batch)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
            torch.set_num_threads(threads)
        model.train(was_training)


def batched_logits(model: Model, examples: list[Encoded], head: str, pad_id: int, batch_size: int = 64,
                   precision: str = "fp32") -> list[np.ndarray]:
    """Logits per example, in input order: (C,) for the classifier, (T_i, C) for the tagger (length-sorted
    batches, see `run_sorted`)."""
    return run_sorted(model, examples, pad_id, batch_size,
                      lambda ids, mask, types: model(ids, attention_mask=mask, token_type_ids=types,
                                                     head=head).logits, precision=precision)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64."""
    z = logits.astype(np.float64) - logits.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def iob2_constraints(tags: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Which tag may start a sentence (C,) and which may follow which (C, C): I-X only after B-X or I-X."""
    kinds = [t[2:] if t != "O" else None for t in tags]
    inside = [t.startswith("I-") for t in tags]
    start = np.array([not i for i in inside])
    allowed = np.ones((len(tags), len(tags)), dtype=bool)
    for j, tag in enumerate(tags):
        if inside[j]:
            allowed[:, j] = [kinds[i] == kinds[j] for i in range(len(tags))]
    return start, allowed


def viterbi(log_probs: np.ndarray, start: np.ndarray, allowed: np.ndarray) -> list[int]:
    """The most probable tag sequence (W, C) -> W tag ids that never breaks the constraints (so never an invalid
    span: no I-X after O or after another type)."""
    if len(log_probs) == 0:
        return []
    forbid = np.where(allowed, 0.0, -np.inf)  # (C, C)
    score = np.where(start, log_probs[0], -np.inf)  # (C,)
    back = []
    for row in log_probs[1:]:
        total = score[:, None] + forbid  # (C_prev, C)
        best = total.argmax(0)
        back.append(best)
        score = total[best, np.arange(len(row))] + row
    path = [int(score.argmax())]
    for best in reversed(back):
        path.append(int(best[path[-1]]))
    return path[::-1]


def decode_tags(token_logits: np.ndarray, encoded: Encoded, tags: list[str], constraints) -> tuple[list[str],
                                                                                                   list[float]]:
    """Word tags and their probabilities from token logits: each word reads its first subword; words truncated
    away are O with probability 1 (they were not seen). A word whose first subword is the previous word's (a token
    covering both, or a word no token touches: a character the normaliser deletes) is not decoded on its own: it
    continues the previous word's entity (I-X after B-X or I-X), else O. Decoded on the shared logits it came out
    B-X again after B-X, splitting the entity in two."""
    words = encoded.first_token or []

    def follows(w: int) -> bool:
        return w > 0 and words[w] == words[w - 1]

    seen = [w for w, position in enumerate(words) if position >= 0 and not follows(w)]
    log_probs = log_softmax(token_logits[[words[w] for w in seen]]) if seen else np.zeros((0, len(tags)))
    path = viterbi(log_probs, *constraints)
    out, scores = ["O"] * len(words), [1.0] * len(words)
    for k, (w, tag) in enumerate(zip(seen, path)):
        out[w], scores[w] = tags[tag], float(np.exp(log_probs[k, tag]))
    for w, position in enumerate(words):
        if position >= 0 and follows(w):  # left to right: the previous word's tag is final
            out[w] = "O" if out[w - 1] == "O" else f"I-{out[w - 1][2:]}"
            scores[w] = scores[w - 1]
    return out, scores


def entities(tags: list[str], scores: list[float], spans: list[tuple[int, int]], text: str) -> list[dict]:
    """IOB2 word tags → entities with character offsets into `text` and a score (the mean word probability)."""
    found, current = [], None
    for tag, score, (start, end) in zip(tags, scores, spans):
        if tag.startswith("I-") and current is not None and current["label"] == tag[2:]:
            current["end"] = end
            current["_scores"].append(score)
            continue
        if current is not None:
            found.append(current)
            current = None
        if tag != "O":  # B-X (a stray I-X cannot come out of viterbi; it would start an entity here)
            current = {"label": tag[2:], "start": start, "end": end, "_scores": [score]}
    if current is not None:
        found.append(current)
    for entity in found:
        entity["text"] = text[entity["start"]:entity["end"]]
        entity["score"] = round(float(np.mean(entity.pop("_scores"))), 4)
    return found


# ------------------------------------------------------------------------------------------- finetuned models

class TaskModel:
    """A finetuned run directory ready for inference: model, tokenizer, label names, input encoder. `run` may be an
    ONNX export folder of a task run (`bertkit export --format onnx`): its logits come from onnxruntime on the CPU,
    `threads` batches at once."""

    def __init__(self, run: str | Path, batch_size: int = 64, device: str | torch.device | None = None,
                 precision: str = "auto", threads: int | None = None):
        run = Path(run)
        batch_size = need_batch_size(batch_size)  # before the run loads
        self.run = run
        self.onnx = None  # an ONNX export folder's OnnxModel (`bertkit export --format onnx`), else the torch model
        if is_onnx_export(run):
            self._open_onnx(run, device, precision, threads)
        else:
            self.config, self.model = load_run(run, device)
            heads = [h for h in TASK_HEADS if h in self.config.heads.names]
            if not heads or not (run / LABELS_FILE).is_file():
                if self.config.task.kind == "sentence":  # an SBERT run: scored by its embeddings' cosines
                    raise BertkitError(f"{run}: a sentence-embedding run (finetune sentence): score it with "
                                       "`bertkit evaluate-sts`, use it with `embed`, `similarity` or `index build`")
                raise BertkitError(f"{run}: has no task head (heads: {', '.join(self.config.heads.names) or 'none'}); "
                                   "finetune it first with `bertkit finetune classify|ner`")
            self.kind, self.labels = read_labels(run)
            self.inputs_unknown = inputs_unknown(run)  # an imported transformers classifier: pairs?
            self.head = heads[0]
            self.precision = resolve_precision(precision, self.model.device).precision
            if self.kind == "regress" and precision == "auto":  # a score in bf16 is rounded to ~0.03 near 5: ties
                self.precision = "fp32"
        self.tokenizer = load_run_tokenizer(run, self.config)
        self.pad_id = special_ids(self.tokenizer).pad
        self.encoder = TaskEncoder(self.tokenizer, self.config.task.window(self.config.model.max_len))
        self.batch_size = batch_size
        self.constraints = iob2_constraints(self.labels) if self.kind == "ner" else None

    def _open_onnx(self, run: Path, device, precision: str, threads: int | None) -> None:
        """An export folder of a task run: its logits through onnxruntime."""
        self.onnx = OnnxModel(run, threads)
        manifest = self.onnx.manifest
        if manifest.kind == "encoder":
            raise BertkitError(f"{run}: an ONNX export of an encoder has no task head; export a finetuned "
                               "classifier or tagger run")
        if precision not in ("auto", manifest.precision):
            raise BertkitError(f"{run}: an ONNX export runs at its own precision ({manifest.precision}); "
                               "drop --precision")
        if device is not None and str(device) != "cpu":
            raise BertkitError(f"{run}: an ONNX export runs on the CPU through onnxruntime, not on {device}")
        self.config, self.model = manifest.config, None
        self.kind, self.labels = manifest.kind, list(manifest.labels)
        self.inputs_unknown = manifest.details.get("inputs") == "unknown"
        self.head = "tagger" if self.kind == "ner" else "classifier"
        self.precision = manifest.precision

    def pair_column(self, given: str | None, warn: Callable[[str], None] | None = None) -> str | None:
        """The column a pair's second text is read from: `given` (--text-pair-column), else the run's own; refused
        for a tagger and for a run finetuned on single texts. A model imported from transformers, whose config does
        not say which texts it reads, takes one (an MRPC or STS-B model reads pairs), and `warn` hears when none is
        given for it."""
        task, unknown = self.config.task, self.inputs_unknown
        if given is not None and (self.kind == "ner" or (task.text_pair_column is None and not unknown)):
            raise BertkitError(f"--text-pair-column {given}: {self.run} was finetuned on single texts; it reads "
                               "no second text")
        if given is None and unknown and task.text_pair_column is None and warn is not None:
            warn(f"{self.run} was imported from transformers, whose config does not say whether it reads text "
                 "pairs: each input is read as one text; a pair model (MRPC's, STS-B's shape) needs "
                 "--text-pair-column (and rows: a CSV, TSV or JSON lines input)")
        return given or task.text_pair_column

    def _logits(self, encoded: list[Encoded]) -> list[np.ndarray]:
        """The task head's logits per example, in input order: (C,) per text, (T_i, C) per tagged sentence."""
        if self.onnx is not None:
            return self.onnx.run_sorted(encoded, self.pad_id, self.batch_size, "logits", per_token=self.kind == "ner")
        return batched_logits(self.model, encoded, self.head, self.pad_id, self.batch_size, self.precision)

    def classify(self, texts: list[str], pairs: list[str] | None = None,
                 digits: int | None = 4) -> tuple[list[dict], int]:
        """Label, its probability and every label's probability per text (rounded to `digits` for output; None:
        as computed, what metrics take); and how many were truncated. Texts are read stripped, as `predict` and
        finetuning read them (a byte-level BPE makes edge spaces tokens); one str is one text."""
        if self.kind == "ner":
            raise BertkitError(f"{self.run} is a tagger: TaskModel.tag labels its words")
        texts, pairs = _stripped(texts), None if pairs is None else _stripped(pairs)
        if pairs is not None and self.config.task.text_pair_column is None and not self.inputs_unknown:
            raise BertkitError(f"{self.run} was finetuned on single texts; it reads no second text (pairs)")
        if pairs is not None and len(pairs) != len(texts):
            raise BertkitError(f"{len(texts):,} texts but {len(pairs):,} pairs: give one second text per text")
        encoded = self.encoder.texts(texts, pairs)
        logits = self._logits(encoded)
        out = []
        shown = float if digits is None else (lambda v: round(float(v), digits))
        if self.kind == "regress":  # one output: the score itself
            return [{"score": shown(row[0])} for row in logits], sum(e.truncated for e in encoded)
        for row in logits:
            p = np.exp(log_softmax(row))
            best = int(p.argmax())
            out.append({"label": self.labels[best], "score": shown(p[best]),
                        "scores": {name: shown(v) for name, v in zip(self.labels, p)}})
        return out, sum(e.truncated for e in encoded)

    def tag(self, texts: list[str], spans: list[list[tuple[int, int]]]) -> tuple[list[tuple[list[str],
                                                                                         list[float]]], int]:
        """IOB2 tags and probabilities per word (words given as character spans); and how many texts were
        truncated (their cut-off words are tagged O)."""
        if self.kind != "ner":
            raise BertkitError(f"{self.run} is a {'regressor' if self.kind == 'regress' else 'classifier'}: "
                               "TaskModel.classify scores its texts")
        encoded = self.encoder.words(texts, spans)
        logits = self._logits(encoded)
        return ([decode_tags(row, e, self.labels, self.constraints) for row, e in zip(logits, encoded)],
                sum(e.truncated for e in encoded))

    def evaluate(self, examples: list[LabelledText] | list[TaggedSentence], records: list | None = None) -> dict:
        """Metrics on labelled examples, through the same path as `classify` / `tag` (`bertkit predict`):
        classification metrics, or strict entity P/R/F1. Labels the model never saw count as errors and are
        listed (`unseen_labels`). `records`: a list that gets each example's gold and predicted answer, in file
        order (`evaluate --predictions`): text (pair), gold, and predict's label / score / scores, score, or the
        sentence's tokens with their gold and predicted tags and the predicted entities."""
        known = set(self.labels)
        # pairs where the run reads them or the examples carry them (`evaluate --text-pair-column` on an imported
        # pair model)
        pairs = [e.pair or "" for e in examples] if self.config.task.text_pair_column or any(
            getattr(e, "pair", None) is not None for e in examples) else None
        if self.kind == "regress":
            # unrounded: four decimals made ties of near-equal scores (Spearman 0.19184 against scipy's 0.19208)
            predictions, truncated = self.classify([e.text for e in examples], pairs, digits=None)
            try:
                gold = np.asarray([float(e.label) for e in examples], dtype=np.float64)
            except ValueError as error:
                raise BertkitError(f"a regression run is scored on numbers: {error}") from None
            predicted = np.asarray([p["score"] for p in predictions])
            if records is not None:
                records.extend({**_texts(e, pairs), "gold": float(g), "score": p["score"]}
                               for e, g, p in zip(examples, gold, predictions))
            result = {**correlation_metrics(gold, predicted), "mse": float(((predicted - gold) ** 2).mean()),
                      "examples": len(examples)}
            result.pop("pairs")
            return {**result, "unseen_labels": [], "truncated": truncated}
        if self.kind == "classify":
            predictions, truncated = self.classify([e.text for e in examples], pairs)
            gold = [e.label for e in examples]
            result = classification_metrics(gold, [p["label"] for p in predictions], self.labels)
            unseen = sorted({g for g in gold if g not in known})
            result["unseen_examples"] = sum(g not in known for g in gold)
            if records is not None:
                records.extend({**_texts(e, pairs), "gold": g, **p} for e, g, p in zip(examples, gold, predictions))
        else:
            joined = [join_words(e.tokens) for e in examples]
            tagged, truncated = self.tag([t for t, _ in joined], [s for _, s in joined])
            result = entity_metrics([list(e.tags) for e in examples], [tags for tags, _ in tagged])
            unseen = sorted({t for e in examples for t in e.tags if t not in known})
            if records is not None:
                records.extend({"text": text, "tokens": list(e.tokens), "gold": list(e.tags), "tags": tags,
                                "entities": entities(tags, scores, spans, text)}
                               for e, (text, spans), (tags, scores) in zip(examples, joined, tagged))
            result["unseen_tags"] = sum(t not in known for e in examples for t in e.tags)
        result["unseen_labels"] = unseen
        result["truncated"] = truncated
        return result


def _texts(example: LabelledText, pairs: list[str] | None) -> dict:
    """An evaluation record's inputs: the text, and its pair where the run reads pairs."""
    return {"text": example.text, **({"pair": example.pair or ""} if pairs is not None else {})}


def _stripped(texts: str | list[str]) -> list[str]:
    """Texts as a list, each stripped of edge spaces and line breaks; one str is one text."""
    return [texts.strip()] if isinstance(texts, str) else [text.strip() for text in texts]
