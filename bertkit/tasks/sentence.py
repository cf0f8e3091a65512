"""SentenceBERT training (`finetune sentence`): a siamese bi-encoder trained on sentence pairs.

Every side of a pair batch (anchor, positive[, hard negative]) runs through the *same* encoder in one forward pass;
pooling (`sentence.pooling`) turns token states into embeddings and the loss (`sentence_losses.py`: cosine, mnrl,
softmax) takes the embeddings.

Batches are a pure function of the step (`EpochSampler`), as for every objective: exact resume, and the same rows
on 1 or N processes. In-batch negatives are those of each process's micro-batch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from bertkit.config import Config, ModelConfig, TrainConfig
from bertkit.embedding import embed_encoded
from bertkit.errors import BertkitError
from bertkit.nn.flops import stack_flops, training
from bertkit.nn.model import Model
from bertkit.paths import resolve_data_path
from bertkit.tasks.base import FinetuneTask
from bertkit.tasks.labelled import sorted_labels
from bertkit.tasks.sentence_losses import LOSSES
from bertkit.text.collate import EpochSampler, pad_sequences
from bertkit.text.features import Encoded, TaskEncoder
from bertkit.text.tasks import SentencePair, read_pairs


class SentenceObjective:
    """Pairs of tokenised sentences (+ optional hard negatives) and their targets → SBERT losses and metrics.

    `targets`: scores already divided by max_score (cosine), label ids (softmax), or None (mnrl).
    `validation` holds the same three lists for held-out rows, with gold scores / label names.
    """

    def __init__(self, loss: str, sides: list[list[Encoded]], targets: list | None,
                 validation_sides: list[list[Encoded]], validation_targets: list | None, pooling: str,
                 scale: float, pad_id: int, train: TrainConfig, world: int = 1, label_names: list[str] | None = None,
                 cross_process: bool = True):
        if loss not in LOSSES:
            raise ValueError(f"unknown sentence loss {loss!r}")
        if not sides or not sides[0]:
            raise BertkitError("no training pairs")
        self.criterion = LOSSES[loss](scale, label_names, world if cross_process else 1)
        self.sides, self.targets = sides, targets
        self.validation_sides, self.validation_targets = validation_sides, validation_targets
        self.pooling, self.pad_id = pooling, pad_id
        self.head = self.criterion.head
        self.metric_names = self.criterion.metric_names
        self.default_metric = self.criterion.default_metric
        self.global_batch = train.batch_size * train.accumulation_steps * world
        self.sampler = EpochSampler(len(sides[0]), self.global_batch, train.seed)
        self.eval_batch = max(train.batch_size, 64)
        n_validation = sum(len(side) for side in validation_sides)
        # an evaluation, in training-step units: forward only (about a third of a training step per sentence); every
        # process encodes the whole validation set, against one process's rows a step
        self.eval_cost_steps = n_validation / (train.batch_size * train.accumulation_steps * len(sides)) * 0.35

    def init_head(self, model) -> None:
        """As LabelledObjective.init_head: nothing to set from the data."""

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
        if self.criterion.target_dtype is not None and self.targets is not None:
            out["target"] = torch.tensor([self.targets[r] for r in rows], dtype=self.criterion.target_dtype)
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
        loss = self.criterion.flops(config.d_model, len(self.criterion.label_names), b, sides)
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
        return self.criterion.loss(self._embed(model, micro), micro.get("target"), micro["len_0"].shape[0])

    # ---------------------------------------------------------------------------------------------- evaluation

    def evaluate(self, model: Model) -> dict[str, float]:
        if not self.validation_sides or not self.validation_sides[0]:
            return {}
        embedded = [embed_encoded(model, side, self.pad_id, self.eval_batch, self.pooling, self.criterion.normalize)
                    for side in self.validation_sides]  # each (N, D)
        return self.criterion.evaluate(model, embedded, self.validation_targets)


class SentenceTask(FinetuneTask):
    """`task.kind = "sentence"`: SBERT training of the encoder's pooled embeddings; no task head unless the softmax
    loss has labels. The run stores its `[sentence]` settings (pooling, normalisation, length) for `embed`."""

    kind = "sentence"
    examples_name = "sentences"
    graded_name = "pairs"
    length_key = "sentence.max_seq_length"

    def settings(self, config: Config, base: Config, model_dir: Path | None, out: Path, resume: bool) -> Config:
        loss = config.sentence_loss
        if loss.negative_column and not LOSSES[loss.loss].negatives:  # it was read by nothing, without a word
            raise BertkitError(f"sentence_loss.negative_column: the {loss.loss} loss reads no hard negatives (mnrl "
                               "does); leave --negative-column out")
        # one length for a sentence: what training cuts at is what the run embeds with (the base's unless set)
        if config.task.max_length is not None:
            raise BertkitError("task.max_length: sentence training cuts sentences at sentence.max_seq_length (--set "
                               "max_seq_length=N), the length the run then embeds with")
        sentence = config.sentence
        sentence = dataclasses.replace(sentence, max_seq_length=sentence.max_seq_length
                                       or base.sentence.max_seq_length)
        if resume and sentence != base.sentence:
            raise BertkitError(f"{out}: holds a different run ([sentence] {dataclasses.asdict(base.sentence)}, "
                               f"now {dataclasses.asdict(sentence)}); resume with the same settings")
        return dataclasses.replace(config, sentence=sentence)

    def read(self, config: Config, path: str | Path, skip_bad_lines: bool | None = None,
             warn: Callable[[str], None] | None = None) -> list[SentencePair]:
        task = config.task
        if task.text_pair_column is None:
            raise BertkitError("task.text_pair_column: sentence training reads pairs; name the second sentence's "
                               "column (--text-pair-column)")
        settings = config.sentence_loss
        loss = LOSSES[settings.loss]
        pairs = read_pairs(resolve_data_path(path), task.text_column, task.text_pair_column, loss.target_column,
                           task.label_column, settings.negative_column if loss.negatives else None,
                           settings.max_score, skip_bad_lines, warn)
        top = max((e.score for e in pairs if e.score is not None), default=None)
        if warn is not None and top is not None and 0 < top <= settings.max_score / 4:
            # scores on a 0..1 scale read against STS-B's 5 train cosines of 0..0.2, without a word (Spearman, rank
            # only, hid it; a review, 2026-11-28)
            end = math.ceil(top)  # a 0..1 file's best pair scores 0.95: its scale ends at 1
            fix = f"if its scale ends at {end}, pass --max-score {end}" if end < settings.max_score else \
                f"is its scale 0..{settings.max_score:g}?"
            warn(f"{path}: its scores reach at most {top:g} of sentence_loss.max_score {settings.max_score:g} (the "
                 f"targets are score / {settings.max_score:g}); {fix}")
        return pairs

    def max_length(self, config: Config, base: Config) -> int:
        return config.sentence.max_seq_length or base.model.max_len

    def label_set(self, examples: list) -> list[str]:
        """Pairs with labels (the softmax loss): their names in head order; pairs with scores (or none): none."""
        if not any(e.label is not None for e in examples):
            return []
        return sorted_labels({e.label for e in examples})

    def pools_processes(self, config: Config) -> bool:
        return LOSSES[config.sentence_loss.loss].in_batch and config.sentence_loss.cross_process_negatives

    def heads(self, labels: list[str]) -> tuple[str, ...]:
        return ("pair_classifier",) if labels else ()

    def objective(self, config: Config, train: list, validation: list, labels: list[str], encoder: TaskEncoder,
                  pad_id: int, world: int):
        """Each side of the pairs tokenised once (a hard-negative side when every row has one)."""
        task = config.sentence_loss
        criterion = LOSSES[task.loss](task.scale, labels)
        negatives = criterion.negatives and all(e.negative for e in train)
        for name, rows in (("training", train), ("validation", validation)):
            # (validation had dropped every hard negative for one row without: its ranking silently got easier)
            if criterion.negatives and task.negative_column and (missing := sum(not e.negative for e in rows)):
                raise BertkitError(f"sentence_loss.negative_column: {missing:,} {name} rows have no hard negative "
                                   f"in '{task.negative_column}' (give one per row, or leave the column out)")
        pool = self._pool(config, world)
        if criterion.in_batch and not negatives and pool is not None and pool < 2:
            # one row a micro-batch: its positive is its only candidate, loss and gradient 0 at every step
            raise BertkitError(f"train.batch_size: the {task.loss} loss ranks each anchor's positive among the other "
                               "rows of its micro-batch, and 1 row has none to learn from: give 2 or more "
                               "(accumulation_steps adds rows to a step, not candidates), or hard negatives")

        def sides(examples: list, with_negatives: bool):
            texts = [[e.text for e in examples], [e.pair for e in examples]]
            if with_negatives:
                texts.append([e.negative or "" for e in examples])
            return [encoder.texts(t) for t in texts]

        train_sides = sides(train, negatives)
        validation_negatives = negatives and all(e.negative for e in validation)
        objective = SentenceObjective(task.loss, train_sides, criterion.targets(train, task.max_score, False),
                                      sides(validation, validation_negatives),
                                      criterion.targets(validation, task.max_score, True),
                                      config.sentence.pooling, task.scale, pad_id, config.train, world, labels,
                                      task.cross_process_negatives)
        return objective, [e for side in train_sides for e in side]

    def step_flops(self, config: Config, rows: int, t: int) -> tuple[int, int]:
        settings = config.sentence_loss
        criterion = LOSSES[settings.loss](settings.scale)  # one process's candidates (mnrl), as on one GPU
        sides = 3 if criterion.negatives and settings.negative_column else 2  # anchor, positive[, hard negative]
        loss = criterion.flops(config.model.d_model, config.heads.num_labels, rows, sides)
        return training(stack_flops(config.model, sides * rows, t) + loss), sides * rows * t

    def _pool(self, config: Config, world: int) -> int | None:
        """The rows an anchor's positive is ranked among (in-batch losses): its micro-batch, every process's with
        cross_process_negatives; None where the batch size is chosen later ("auto")."""
        rows = config.train.batch_size
        return rows * (world if self.pools_processes(config) else 1) if isinstance(rows, int) else None

    def summary(self, config: Config, labels: list[str], world: int = 1) -> str:
        train, loss = config.train, config.sentence_loss.loss
        # a step's rows are batch_size x processes x accumulation_steps, an anchor's candidates one micro-step's:
        # its micro-batch, or every process's (cross_process_negatives)
        pool = "" if not LOSSES[loss].in_batch or train.accumulation_steps * world == 1 else (
            f" (in-batch negatives: each micro-step's {self._pool(config, world)} rows over {world} processes)"
            if self.pools_processes(config) and world > 1 else
            f" (in-batch negatives: each micro-batch's {train.batch_size} rows)")
        return (f"loss {loss}{pool}" + (f", {len(labels)} labels" if labels else "")
                + f", {config.sentence.pooling} pooling")

    def final_validation(self, out: Path, model: Model, objective, validation: list, device: torch.device,
                         precision: str) -> dict:
        # the best weights, through the embedding path `embed` and `evaluate-sts` use
        return objective.evaluate(model.to(device))


TASK = SentenceTask()
