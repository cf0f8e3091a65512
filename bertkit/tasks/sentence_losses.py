"""The SBERT losses, one class each (sentence-transformers' split: the model embeds, a loss scores embeddings). A
loss says what its targets are, which head it needs, its training loss on one micro-batch's pooled output, its
extra FLOPs, and its validation metrics on embedded validation sides.

- cosine   (Reimers & Gurevych 2019, regression): mean squared error of cos(u, v) against score / max_score;
- mnrl     (multiple negatives ranking, Henderson et al. 2017): cross-entropy of scale * cos(a_i, c_j) over every
           positive (and hard negative) c_j of the micro-batch — of every process's micro-batch when
           `sentence_loss.cross_process_negatives` — the i-th positive being the right answer; a candidate with the
           i-th positive's text, or the positive of a row with the i-th anchor's text, is no negative and is masked
           (sentence-transformers keeps such duplicates out of a batch; an epoch wrapping mid-batch repeats rows);
- softmax  (SBERT's NLI objective): cross-entropy of a linear classifier over (u, v, |u - v|).

Adding a loss: a class here with the same members, one entry in `LOSSES`, and its name in `config.SentenceLoss`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.embedding import normalize_rows
from bertkit.inference import log_softmax
from bertkit.metrics import classification_metrics, correlation_metrics
from bertkit.nn.distributed import gather_rows
from bertkit.nn.heads import HeadInput
from bertkit.nn.model import Model
from bertkit.text.records import id_hash


class SentenceLoss:
    """The members every SBERT loss has."""

    name = ""
    metric_names: tuple[str, ...] = ()
    default_metric = ""
    head: str | None = None  # a task head the loss trains (nn/model.py HEADS), or None
    target_dtype: torch.dtype | None = None  # per-pair targets in the batch, or None (none needed)
    target_column: str | None = None  # what `text.tasks.read_pairs` reads per pair: "score", "label" or nothing
    negatives = False  # reads a hard-negative column (sentence_loss.negative_column)
    in_batch = False  # scores each anchor against the other rows of the micro-batch (every process's, gathered)
    normalize = True  # validation embeddings normalised (cosine geometry)

    def __init__(self, scale: float = 20.0, label_names: list[str] | None = None, world: int = 1):
        # world: processes whose micro-batches are one pool of candidates (mnrl's cross-process negatives; 1: none)
        self.scale, self.label_names, self.world = scale, label_names or [], world

    def targets(self, examples: list, max_score: float, gold: bool) -> list | None:
        """Per-pair training targets (`gold`: the validation form the metrics compare against), or None."""
        return None

    def flops(self, d_model: int, num_labels: int, rows: int, sides: int) -> int:
        """Forward FLOPs of the loss's own products on a micro-batch of `rows` pairs with `sides` sides."""
        return 0

    def loss(self, out, target: torch.Tensor | None, rows: int) -> tuple[torch.Tensor, dict]:
        """Summed loss over the micro-batch's `rows` pairs and summed statistics; `out` is the model's output on
        every side at once (sides stacked: `out.pooled` (k * B, D), `out.logits` for a head)."""
        raise NotImplementedError

    def evaluate(self, model: Model, embedded: list[np.ndarray], gold: list | None) -> dict[str, float]:
        """Validation metrics from each side's embeddings ((N, D) each) and the gold targets."""
        raise NotImplementedError


class CosineLoss(SentenceLoss):
    """Regression of cos(u, v) onto a similarity score scaled to 0..1."""

    name = "cosine"
    metric_names = ("val_loss", "spearman", "pearson")
    default_metric = "spearman"
    target_dtype = torch.float32
    target_column = "score"

    def targets(self, examples, max_score, gold):
        return [e.score / max_score for e in examples]  # 0..1, as cosines of similar sentences are

    def loss(self, out, target, rows):
        emb = F.normalize(out.pooled.float(), dim=-1)  # (k * B, D)
        cos = (emb[:rows] * emb[rows:2 * rows]).sum(-1)  # (B,)
        return ((cos - target) ** 2).sum(), {}

    def evaluate(self, model, embedded, gold):
        return pair_scores(embedded[0], embedded[1], np.asarray(gold))


class MNRLoss(SentenceLoss):
    """In-batch ranking: every other positive (and every hard negative) of the micro-batch is a negative, except a
    duplicate of the row's own positive, the row's anchor text itself, or a positive of the same anchor text, which
    are masked."""

    name = "mnrl"
    metric_names = ("val_loss", "accuracy", "mrr")
    default_metric = "accuracy"
    negatives = True
    in_batch = True
    target_dtype = torch.long  # per pair, each side's text key (anchor, positive[, negative]): duplicates found

    def targets(self, examples, max_score, gold):
        # id_hash: a 64-bit key, the same in every process (Python's hash is salted per process); validation masks
        # by them too (`ranking_scores`), a hard negative's only where every row has one (as its sides are built)
        negatives = all(e.negative for e in examples) if gold else True
        return [[id_hash(e.text), id_hash(e.pair)] + ([id_hash(e.negative)] if e.negative and negatives else [])
                for e in examples]

    def flops(self, d_model, num_labels, rows, sides):
        return 2 * rows * (sides - 1) * rows * self.world * d_model  # the (B, W * (k - 1) * B) similarity matrix

    def loss(self, out, target, rows):
        emb = F.normalize(out.pooled.float(), dim=-1)  # (k * B, D)
        candidates, start = emb[rows:], 0  # (((k - 1) * B, D): this micro-batch's positives, then its negatives
        keys = target  # (B, k) text keys (anchor, positive[, negative]); None: nothing masked
        if keys is not None:
            sides = keys.shape[1] - 1
            found = keys[:, 1:].T.reshape(-1)  # ((k - 1) * B,) each candidate's text, in `candidates` order
            anchors = keys[:, 0].repeat(sides)  # the anchor of each candidate's row
        if self.world > 1:  # every process's candidates, in rank order; gradients return to whoever embedded them
            candidates, start = gather_rows(candidates)  # (W * (k - 1) * B, D)
            if keys is not None:
                found, anchors = gather_rows(found)[0], gather_rows(anchors)[0]
        scores = self.scale * emb[:rows] @ candidates.T  # (B, W * (k - 1) * B): every positive and negative
        gold = start + torch.arange(rows, device=scores.device)  # this process's positives
        if keys is not None:
            # a candidate is no negative where it is this row's positive text, or this row's anchor text itself
            # (symmetrised pairs (a, b) and (b, a) in one batch: "a" scored 1 against row (a, b), a loss that could
            # not fall; a review, 2026-11-28), or (on a positive side) the positive of a row with this row's anchor
            # text: a duplicate pair, or a row an epoch's wrap repeated
            positive = torch.arange(found.shape[0], device=scores.device) % (sides * rows) < rows  # (W*(k-1)*B,)
            same = no_negatives(found, anchors, positive, keys)
            same[torch.arange(rows, device=scores.device), gold] = False
            scores = scores.masked_fill(same, float("-inf"))
        return F.cross_entropy(scores, gold, reduction="sum"), {"accuracy": (scores.argmax(-1) == gold).sum()}

    def evaluate(self, model, embedded, gold):
        return ranking_scores(embedded[0], np.concatenate(embedded[1:]), self.scale,
                              None if gold is None else np.asarray(gold, dtype=np.int64))


class SoftmaxLoss(SentenceLoss):
    """A linear classifier over (u, v, |u − v|) (the `pair_classifier` head), cross-entropy on the pair's label."""

    name = "softmax"
    metric_names = ("val_loss", "accuracy")
    default_metric = "accuracy"
    head = "pair_classifier"
    target_dtype = torch.long
    target_column = "label"
    normalize = False

    def targets(self, examples, max_score, gold):
        if gold:  # label names: unseen ones count as errors
            return [e.label for e in examples]
        index = {name: i for i, name in enumerate(self.label_names)}
        return [index[e.label] for e in examples]

    def flops(self, d_model, num_labels, rows, sides):
        return 2 * rows * 3 * d_model * num_labels

    def loss(self, out, target, rows):
        logits = out.logits.float()  # (B, C)
        return F.cross_entropy(logits, target, reduction="sum"), {"accuracy": (logits.argmax(-1) == target).sum()}

    def evaluate(self, model, embedded, gold):
        with torch.inference_mode():
            pooled = torch.from_numpy(np.concatenate([embedded[0], embedded[1]])).to(model.device)
            logits = model.heads[self.head](HeadInput(pooled=pooled)).float().cpu().numpy()  # (N, C)
        log_p = log_softmax(logits)
        index = {name: i for i, name in enumerate(self.label_names)}
        known = [i for i, g in enumerate(gold) if g in index]
        val_loss = float(-np.mean([log_p[i, index[gold[i]]] for i in known])) if known else float("nan")
        predicted = [self.label_names[i] for i in logits.argmax(-1)]
        return {"val_loss": val_loss, "accuracy": classification_metrics(gold, predicted, self.label_names)["accuracy"]}


LOSSES: dict[str, type[SentenceLoss]] = {loss.name: loss for loss in (CosineLoss, MNRLoss, SoftmaxLoss)}


def pair_scores(u: np.ndarray, v: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Cosine regression metrics of normalised pairs: MSE against gold (already scaled to 0..1), Spearman, Pearson."""
    cos = (normalize_rows(u) * normalize_rows(v)).sum(1)
    result = correlation_metrics(gold, cos)
    return {"val_loss": float(np.mean((cos - gold) ** 2)), "spearman": result["spearman"],
            "pearson": result["pearson"]}


def no_negatives(found, anchors, positive, keys):
    """The candidates that are no negative of each row (training's torch tensors or validation's numpy arrays
    alike): its positive's text again, its own anchor text, or on a positive side the positive of a row with its
    anchor text. found, anchors, positive (M,): each candidate's text key, its row's anchor key, whether it is a
    positive; keys (n, 1 + sides): the rows' own keys. Returns (n, M); the caller unmasks each row's gold column."""
    return (found[None, :] == keys[:, 1:2]) | (found[None, :] == keys[:, :1]) | \
        (positive[None, :] & (anchors[None, :] == keys[:, :1]))


def ranking_scores(anchors: np.ndarray, candidates: np.ndarray, scale: float, keys: np.ndarray | None = None,
                   chunk: int = 1024) -> dict[str, float]:
    """Retrieval of each anchor's own positive (row i of `candidates`) among every candidate: the MNRL loss over
    the whole validation set, accuracy@1 and mean reciprocal rank. anchors (N, D), candidates (M >= N, D): the
    positives, then any hard negatives. `keys` (N, 1 + sides): the rows' text keys (`MNRLoss.targets`), which mask
    what training masks — another copy of the row's positive, its anchor's own text, a positive of a row with the
    same anchor (they held every symmetrised or duplicated pair below its real rank)."""
    losses, hits, reciprocal = [], 0, 0.0
    sides = len(candidates) // len(anchors)
    if keys is not None:
        found = keys[:, 1:1 + sides].T.reshape(-1)  # (M,) each candidate's text key
        of_anchor = np.tile(keys[:, 0], sides)  # (M,) the anchor of each candidate's row
        positive = np.arange(len(found)) < len(anchors)  # (M,)
    for start in range(0, len(anchors), chunk):
        scores = scale * anchors[start:start + chunk] @ candidates.T  # (n, M)
        rows = np.arange(len(scores))
        if keys is not None:
            same = no_negatives(found, of_anchor, positive, keys[start:start + chunk])  # (n, M)
            same[rows, start + rows] = False
            scores = np.where(same, -np.inf, scores)
        own = scores[rows, start + rows]  # (n,)
        log_p = log_softmax(scores)
        losses.append(-log_p[rows, start + rows])
        rank = (scores > own[:, None]).sum(1)  # 0 = best
        hits += int((rank == 0).sum())
        reciprocal += float((1.0 / (rank + 1)).sum())
    return {"val_loss": float(np.concatenate(losses).mean()), "accuracy": hits / len(anchors),
            "mrr": reciprocal / len(anchors)}
