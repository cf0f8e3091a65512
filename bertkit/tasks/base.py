"""The two contracts a task kind fulfils. A pretraining objective (`mlm`, `clm`, `rtd`) is a `PretrainTask`: the
stack it trains, the heads it adds, and its objective class. A finetuning task (`classify`, `ner`, `sentence`) is a
`FinetuneTask`: everything `bertkit finetune` needs to know about it, so that the job is one generic driver. The
objectives they build are what the loop trains (`bertkit.train.loop.Objective` / `SupervisedObjective`).

Adding a task: one module in `bertkit/tasks/` with its objective and its `TASK`, one line in `registry.py`, and its
name in `config.py`'s Literal (docs/architecture.md › "Adding a task" walks through it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from bertkit.config import Config
from bertkit.nn.model import Model
from bertkit.text.features import Encoded, TaskEncoder


@dataclass(frozen=True)
class PretrainTask:
    """A pretraining objective on packed corpus blocks."""

    name: str  # train.objective
    architecture: str  # the stack it trains: "encoder" | "decoder"
    heads: tuple[str, ...]  # heads it adds to the model (nn/model.py HEADS)
    description: str  # for messages: "masked-LM pretraining"
    objective: type  # (packed, special ids, vocab size, DataConfig, TrainConfig, world) -> Objective


class FinetuneTask:
    """A finetuning task kind: its reader, label set, checks, inputs, head, objective, opening line and final
    metrics; subclasses override what differs."""

    kind = ""
    examples_name = "training examples"  # what the truncation warning counts
    graded_name = "examples"  # what validation grades one label of (the unseen-labels warning counts them)
    label_option = "--label-column"  # the option that picks the labels, for hints
    length_key = "task.max_length"  # the setting that bounds an input's length

    def settings(self, config: Config, base: Config, model_dir: Path | None, out: Path, resume: bool) -> Config:
        """Task checks that need no data, and the config with the task's own settings resolved (`base`: the config
        of the model being finetuned, or of the run being resumed). A task model keeps its encoder's `[sentence]`
        settings, so it still embeds as its base did."""
        return dataclasses.replace(config, sentence=base.sentence)

    def read(self, config: Config, path: str | Path, skip_bad_lines: bool | None = None,
             warn: Callable[[str], None] | None = None) -> list:
        """The examples of one task file (a data-root-relative path is fine), read with the task's columns. Rows
        without a label or text are refused, or skipped with `skip_bad_lines` and counted through `warn` (None: the
        command cannot skip them, so its error does not offer --skip-bad-lines)."""
        raise NotImplementedError

    def max_length(self, config: Config, base: Config) -> int:
        """Tokens per input (truncated beyond)."""
        return config.task.max_length or base.model.max_len

    def label_set(self, examples: list) -> list[str]:
        """Label names in head order, from the training examples."""
        raise NotImplementedError

    def example_labels(self, example) -> list[str]:
        """The labels one training example uses (a resumed run refuses ones its label set lacks)."""
        return [example.label] if example.label is not None else []

    def graded_labels(self, example) -> list[str]:
        """The labels validation grades the model on in one example (NER: its entity tags, not O)."""
        return self.example_labels(example)

    def unseen(self, validation: list, labels: list[str]) -> tuple[int, int, list[str]]:
        """Graded validation labels the label set lacks: (how many, of how many graded, which; sorted)."""
        graded = [label for e in validation for label in self.graded_labels(e)]
        known = set(labels)
        missing = [label for label in graded if label not in known]
        return len(missing), len(graded), sorted(set(missing))

    def pools_processes(self, config: Config) -> bool:
        """Whether the loss couples every process's micro-batch of one step (an elastic resume then keeps that pool,
        not the per-process batch: train/elastic.py)."""
        return False

    def heads(self, labels: list[str]) -> tuple[str, ...]:
        """The heads the finetuned model carries."""
        raise NotImplementedError

    def objective(self, config: Config, train: list, validation: list, labels: list[str], encoder: TaskEncoder,
                  pad_id: int, world: int):
        """The objective for the loop, and every encoded training input (for the truncation count)."""
        raise NotImplementedError

    def step_flops(self, config: Config, rows: int, t: int) -> tuple[int, int]:
        """Model FLOPs of a training step on `rows` examples of `t` tokens each (no padding) for the run `config`
        describes (its head sized by `heads.num_labels`), and the tokens the step trains on: what `bertkit info`
        gives per token. The same count as the task's objective makes of such a batch (its `flops`)."""
        raise NotImplementedError

    def summary(self, config: Config, labels: list[str], world: int = 1) -> str:
        """What the opening line says of the task's set-up (`world`: the run's processes)."""
        return f"{len(labels)} labels"

    def final_validation(self, out: Path, model: Model, objective, validation: list, device: torch.device,
                         precision: str) -> dict:
        """The best checkpoint's validation metrics, written to results.json (`model` holds its weights)."""
        raise NotImplementedError


def encode_texts(encoder: TaskEncoder, examples: list, pairs: bool) -> list[Encoded]:
    """Tokenise labelled texts (with their second text when the task reads a pair column)."""
    return encoder.texts([e.text for e in examples], [e.pair or "" for e in examples] if pairs else None)
