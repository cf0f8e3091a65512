"""SentenceBERT objectives for the one loop: a siamese bi-encoder trained on sentence pairs.

Every side of a pair batch (anchor, positive[, hard negative]) runs through the *same* encoder in one forward pass;
pooling (`sentence.pooling`) turns token states into embeddings and the loss takes the embeddings:

- cosine   (Reimers & Gurevych 2019, regression): mean squared error of cos(u, v) against score / max_score;
- mnrl     (multiple negatives ranking, Henderson et al. 2017): cross-entropy of scale * cos(a_i, c_j) over every
           positive (and hard negative) c_j of the micro-batch, the i-th positive being the right answer;
- softmax  (SBERT's NLI objective): cross-entropy of a linear classifier over (u, v, |u - v|).

Batches are a pure function of the step (`EpochSampler`), as for every objective: exact resume, and the same rows
on 1 or N processes. In-batch negatives are those of each process's micro-batch.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from bertkit.config import ModelConfig, TrainConfig
from bertkit.embedding import embed_encoded, normalize_rows
from bertkit.errors import BertkitError
from bertkit.inference import log_softmax
from bertkit.metrics import classification_metrics, correlation_metrics
from bertkit.nn.flops import stack_flops, training
from bertkit.nn.model import Model
from bertkit.text.collate import EpochSampler, pad_sequences
from bertkit.text.features import Encoded

METRICS = {"cosine": ("val_loss", "spearman", "pearson"), "mnrl": ("val_loss", "accuracy", "mrr"),
           "softmax": ("val_loss", "accuracy")}
DEFAULT_METRIC = {"cosine": "spearman", "mnrl": "accuracy", "softmax": "accuracy"}


class SentenceObjective:
    """Pairs of tokenised sentences (+ optional hard negatives) and their targets → SBERT losses and metrics.

    `targets`: scores already divided by max_score (cosine), label ids (softmax), or None (mnrl).
    `validation` holds the same three lists for held-out rows, with gold scores / label names.
    """

    def __init__(self, loss: str, sides: list[list[Encoded]], targets: list | None,
                 validation_sides: list[list[Encoded]], validation_targets: list | None, pooling: str,
                 scale: float, pad_id: int, train: TrainConfig, world: int = 1, label_names: list[str] | None = None):
        if loss not in METRICS:
            raise ValueError(f"unknown sentence loss {loss!r}")
        if not sides or not sides[0]:
            raise BertkitError("no training pairs")
        self.loss_kind, self.sides, self.targets = loss, sides, targets
        self.validation_sides, self.validation_targets = validation_sides, validation_targets
        self.pooling, self.scale, self.pad_id, self.label_names = pooling, scale, pad_id, label_names or []
        self.head = "pair_classifier" if loss == "softmax" else None
        self.metric_names = METRICS[loss]
        self.default_metric = DEFAULT_METRIC[loss]
        self.global_batch = train.batch_size * train.accumulation_steps * world
        self.sampler = EpochSampler(len(sides[0]), self.global_batch, train.seed)
        self.eval_batch = max(train.batch_size, 64)
        n_validation = sum(len(side) for side in validation_sides)
        # an evaluation, in training-step units: forward only (about a third of a training step per sentence)
        self.eval_cost_steps = n_validation / (self.global_batch * len(sides)) * 0.35

    @property
    def steps_per_epoch(self) -> float:
        return len(self.sides[0]) / self.global_batch

    # ------------------------------------------------------------------------------------------------ training

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        """The global batch: per side s, ids_s (B, T_s) and len_s (B,); and the targets (B,)."""
        rows = self.sampler.rows(step).tolist()
        out: dict[str, torch.Tensor] = {}
        for s, side in enumerate(self.sides):
            out[f"ids_{s}"] = pad_sequences([side[r].input_ids for r in rows], self.pad_id)
            out[f"len_{s}"] = torch.tensor([len(side[r].input_ids) for r in rows])
        if self.targets is not None:
            dtype = torch.float32 if self.loss_kind == "cosine" else torch.long
            out["target"] = torch.tensor([self.targets[r] for r in rows], dtype=dtype)
        return out

    @staticmethod
    def normalizer(batch: dict[str, torch.Tensor]) -> float:
        return float(batch["len_0"].shape[0])

    @staticmethod
    def tokens(batch: dict[str, torch.Tensor]) -> int:
        return int(sum(v.sum() for k, v in batch.items() if k.startswith("len_")))

    def flops(self, config: ModelConfig, micro: dict[str, torch.Tensor]) -> int:
        """Model FLOPs of a training step on `micro`: every side through the encoder at the common padded width,
        then the loss's own products (MNRL's similarity matrix, the softmax objective's classifier)."""
        sides = len(self.sides)
        b, width = micro["len_0"].shape[0], max(micro[f"ids_{s}"].shape[1] for s in range(sides))
        loss = {"mnrl": 2 * b * (sides - 1) * b * config.d_model,
                "softmax": 2 * b * 3 * config.d_model * config.num_labels}.get(self.loss_kind, 0)
        return training(stack_flops(config, sides * b, width) + loss)

    def _embed(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]):
        """Every side of the micro-batch in one forward pass: (k * B, T) → pooled (k * B, D)."""
        n_sides = len(self.sides)
        width = max(micro[f"ids_{s}"].shape[1] for s in range(n_sides))
        ids = torch.cat([F.pad(micro[f"ids_{s}"], (0, width - micro[f"ids_{s}"].shape[1]), value=self.pad_id)
                         for s in range(n_sides)])  # (k * B, T)
        lengths = torch.cat([micro[f"len_{s}"] for s in range(n_sides)])  # (k * B,)
        mask = (torch.arange(width, device=ids.device)[None, :] < lengths[:, None]).long()  # (k * B, T)
        return model(ids, attention_mask=mask, pool=self.pooling, head=self.head)

    def loss(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        out = self._embed(model, micro)
        b = micro["len_0"].shape[0]
        if self.loss_kind == "softmax":
            logits = out.logits.float()  # (B, C)
            return (F.cross_entropy(logits, micro["target"], reduction="sum"),
                    {"accuracy": (logits.argmax(-1) == micro["target"]).sum()})
        emb = F.normalize(out.pooled.float(), dim=-1)  # (k * B, D)
        if self.loss_kind == "cosine":
            cos = (emb[:b] * emb[b:2 * b]).sum(-1)  # (B,)
            return ((cos - micro["target"]) ** 2).sum(), {}
        scores = self.scale * emb[:b] @ emb[b:].T  # (B, (k - 1) * B): every positive and negative is a candidate
        gold = torch.arange(b, device=scores.device)
        return F.cross_entropy(scores, gold, reduction="sum"), {"accuracy": (scores.argmax(-1) == gold).sum()}

    # ---------------------------------------------------------------------------------------------- evaluation

    def evaluate(self, model: Model) -> dict[str, float]:
        if not self.validation_sides or not self.validation_sides[0]:
            return {}
        normalize = self.loss_kind != "softmax"
        emb = [embed_encoded(model, side, self.pad_id, self.eval_batch, self.pooling, normalize)
               for side in self.validation_sides]  # each (N, D)
        if self.loss_kind == "cosine":
            return pair_scores(emb[0], emb[1], np.asarray(self.validation_targets))
        if self.loss_kind == "softmax":
            with torch.inference_mode():
                pooled = torch.from_numpy(np.concatenate([emb[0], emb[1]])).to(model.device)
                logits = model.heads["pair_classifier"](pooled).float().cpu().numpy()  # (N, C)
            gold = self.validation_targets
            log_p = log_softmax(logits)
            index = {name: i for i, name in enumerate(self.label_names)}
            known = [i for i, g in enumerate(gold) if g in index]
            val_loss = float(-np.mean([log_p[i, index[gold[i]]] for i in known])) if known else float("nan")
            predicted = [self.label_names[i] for i in logits.argmax(-1)]
            return {"val_loss": val_loss,
                    "accuracy": classification_metrics(gold, predicted, self.label_names)["accuracy"]}
        return ranking_scores(emb[0], np.concatenate(emb[1:]), self.scale)


def pair_scores(u: np.ndarray, v: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    """Cosine regression metrics of normalised pairs: MSE against gold (already scaled to 0..1), Spearman, Pearson."""
    cos = (normalize_rows(u) * normalize_rows(v)).sum(1)
    result = correlation_metrics(gold, cos)
    return {"val_loss": float(np.mean((cos - gold) ** 2)), "spearman": result["spearman"],
            "pearson": result["pearson"]}


def ranking_scores(anchors: np.ndarray, candidates: np.ndarray, scale: float, chunk: int = 1024) -> dict[str, float]:
    """Retrieval of each anchor's own positive (row i of `candidates`) among every candidate: the MNRL loss over
    the whole validation set, accuracy@1 and mean reciprocal rank. anchors (N, D), candidates (M >= N, D)."""
    losses, hits, reciprocal = [], 0, 0.0
    for start in range(0, len(anchors), chunk):
        scores = scale * anchors[start:start + chunk] @ candidates.T  # (n, M)
        rows = np.arange(len(scores))
        own = scores[rows, start + rows]  # (n,)
        log_p = log_softmax(scores)
        losses.append(-log_p[rows, start + rows])
        rank = (scores > own[:, None]).sum(1)  # 0 = best
        hits += int((rank == 0).sum())
        reciprocal += float((1.0 / (rank + 1)).sum())
    return {"val_loss": float(np.concatenate(losses).mean()), "accuracy": hits / len(anchors),
            "mrr": reciprocal / len(anchors)}
