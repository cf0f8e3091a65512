"""What the labelled finetuning objectives (classify, ner) share: each step's global batch drawn from an
`EpochSampler` (a pure function of the step: exact resume, same batches on 1 or N processes), padded to its longest
example; evaluation goes through `bertkit.inference`, the code path `bertkit predict` and `bertkit evaluate` use."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from bertkit.config import Config, ModelConfig, TrainConfig
from bertkit.errors import BertkitError
from bertkit.inference import TaskModel
from bertkit.nn.flops import head_flops, stack_flops, training
from bertkit.nn.model import Model
from bertkit.tasks.base import FinetuneTask
from bertkit.text.collate import EpochSampler, pad_sequences
from bertkit.text.features import Encoded


class LabelledTask(FinetuneTask):
    """What classify and ner share as tasks: the final metrics come through the run directory, as `bertkit
    evaluate` reads it (`inference.TaskModel`)."""

    def final_validation(self, out: Path, model: Model, objective, validation: list, device: torch.device,
                         precision: str) -> dict:
        return TaskModel(out, device=device, precision=precision).evaluate(validation)

    def step_flops(self, config: Config, rows: int, t: int) -> tuple[int, int]:
        (head,) = self.heads([])
        forward = stack_flops(config.model, rows, t) + head_flops(config.model, head, rows, t, config.heads.num_labels)
        return training(forward), rows * t


def sorted_labels(names: set[str]) -> list[str]:
    """Label names in head order: sorted, numerically when every one is an integer; two or more."""
    ordered = sorted(names)
    if all(re.fullmatch(r"-?[0-9]+", n) for n in ordered):
        ordered.sort(key=int)
    if len(ordered) < 2:
        raise BertkitError(f"the training data has only one label ({ordered[0]!r}): a classifier needs two or more")
    return ordered


class LabelledObjective:
    """Shared batching: rows of encoded examples → padded (B, T) ids, token types, attention mask, labels."""

    head = ""
    outputs = 0  # the head's outputs: labels or tags (1 for a score)
    default_metric = ""

    def __init__(self, examples: list[Encoded], targets: list, pad_id: int, train: TrainConfig, world: int,
                 n_validation: int):
        self.examples, self.targets, self.pad_id = examples, targets, pad_id
        self.global_batch = train.batch_size * train.accumulation_steps * world
        if len(examples) < 1:
            raise BertkitError("no training examples")
        self.sampler = EpochSampler(len(examples), self.global_batch, train.seed)
        self.eval_batch = max(train.batch_size, 32)
        # an evaluation, in training-step units (forward only, about a third of a training step per example); every
        # process scores the whole validation set, so a step's share is one process's rows, not the global batch's
        # (that guessed an N-process run's final evaluation N x too short before one was timed)
        self.eval_cost_steps = n_validation / (train.batch_size * train.accumulation_steps) * 0.35

    def init_head(self, model) -> None:
        """Set the task head's starting weights from the training data, before training (a resume loads its
        checkpoint over them): nothing here; a regressor starts at the mean score."""

    @property
    def steps_per_epoch(self) -> float:
        return len(self.examples) / self.global_batch

    def _inputs(self, rows: list[int]) -> dict[str, torch.Tensor]:
        ids = pad_sequences([self.examples[r].input_ids for r in rows], self.pad_id)  # (B, T)
        lengths = torch.tensor([len(self.examples[r].input_ids) for r in rows])
        return {"input_ids": ids, "token_type_ids": pad_sequences([self.examples[r].type_ids for r in rows], 0),
                "attention_mask": (torch.arange(ids.shape[1])[None, :] < lengths[:, None]).long()}

    @staticmethod
    def tokens(batch: dict[str, torch.Tensor]) -> int:
        return int(batch["attention_mask"].sum())

    def flops(self, config: ModelConfig, micro: dict[str, torch.Tensor]) -> int:
        """Model FLOPs of a training step on `micro` (padded: what the kernels multiply): the encoder and the
        task head (nn/flops.py)."""
        rows, t = micro["input_ids"].shape
        return training(stack_flops(config, rows, t) + head_flops(config, self.head, rows, t, self.outputs))

    def _logits(self, model: torch.nn.Module, micro: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(micro["input_ids"], attention_mask=micro["attention_mask"],
                     token_type_ids=micro["token_type_ids"], head=self.head).logits
