"""Finetuned task models <-> transformers' BERT task classes: a classifier or regressor is
`BertForSequenceClassification`, an NER tagger `BertForTokenClassification`, labels as `id2label`.

bertkit's classifier is BERT's: [CLS] -> dense -> tanh -> linear, its dense + tanh being BertPooler's shape (a pooler
the run also holds, from import-hf, is one the classifier never reads, so it is left out); the tagger is BERT's
token classifier. What a run reads its inputs with (columns, `task.max_length`) travels in config.json's
`bertkit_task` entry, which transformers keeps and ignores, so that an export imports back as the same run.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from bertkit.config import Config, ConfigError, TaskConfig
from bertkit.errors import BertkitError
from bertkit.run.directory import INPUTS_UNKNOWN, LABELS_FILE, read_json, read_labels

# task head -> (its transformers class, {bertkit key prefix: HF key prefix})
TASK_HEADS = {
    "classifier": ("BertForSequenceClassification", {"heads.classifier.dense.": "bert.pooler.dense.",
                                                     "heads.classifier.out.": "classifier."}),
    "tagger": ("BertForTokenClassification", {"heads.tagger.out.": "classifier."}),
}
_PROBLEM_TYPES = {"classify": "single_label_classification", "regress": "regression"}
# the TaskConfig fields an export records and an import restores: how the run reads its inputs
_INPUT_FIELDS = ("text_column", "text_pair_column", "label_column", "max_length")
RECORD = "bertkit_task"
# labels.json's note of a source's problem_type where an import made a regressor of a one-output classifier that did
# not say "regression" (a cross-encoder's shape): the export writes that back, so transformers reads it as before
PROBLEM_TYPE_KEY = "hf_problem_type"


def task_head(run: Path, config: Config, command: str) -> tuple[str | None, dict[str, Any]]:
    """The run's task head (None for an encoder) and what config.json says of it (class, labels, problem type, the
    `bertkit_task` record); refuses a head BERT's task classes cannot hold, naming it and the exports that take
    the run."""
    heads = [name for name in config.heads.names if name not in ("mlm", "pooler", "rtd", "generator")]
    if not heads:
        return None, {}
    head = heads[0]
    if len(heads) > 1 or head not in TASK_HEADS:  # SBERT's pair classifier: a training objective, not a model
        raise BertkitError(f"{command}: a Hugging Face export holds BERT (BertModel, BertForMaskedLM, "
                           "BertForSequenceClassification, BertForTokenClassification), which has no place for "
                           f"this run's {', '.join(heads)} head: --format onnx exports the whole model, "
                           "--format sentence-transformers its finetuned encoder")
    if head == "classifier" and config.heads.classifier_pooling != "cls":
        raise BertkitError(f"{command}: heads.classifier_pooling={config.heads.classifier_pooling!r} cannot be "
                           "expressed as BertForSequenceClassification (it classifies from [CLS]): --format onnx "
                           "exports the whole model")
    if not (run / LABELS_FILE).is_file():
        raise BertkitError(f"{command}: {run} has no {LABELS_FILE}, which a finetuned run's export names its labels "
                           "from")
    kind, labels = read_labels(run)
    if len(labels) != config.heads.num_labels:
        raise BertkitError(f"{run / LABELS_FILE}: {len(labels)} labels for a head of {config.heads.num_labels} "
                           "outputs")
    described = {"architectures": [TASK_HEADS[head][0]], "id2label": dict(enumerate(labels)),
                 "label2id": {label: index for index, label in enumerate(labels)},
                 RECORD: {"kind": kind, **{key: getattr(config.task, key) for key in _INPUT_FIELDS}}}
    stored = read_json(run / LABELS_FILE, "labels file")
    problem_type = stored[PROBLEM_TYPE_KEY] if PROBLEM_TYPE_KEY in stored else _PROBLEM_TYPES.get(kind)
    if problem_type:  # "regression": transformers' pipeline then reports the raw score (no sigmoid)
        described["problem_type"] = problem_type
    return head, described


def imported_head(hf_config: dict, weights: dict) -> tuple[str | None, tuple[str, list[str]] | None, str | None]:
    """The task head a BertForSequenceClassification / BertForTokenClassification checkpoint brings ("classifier",
    "tagger"), its (task kind, labels) (`labels_from_hf`) and None; or None, None and why its head is left out (one
    bertkit's heads would decode otherwise than transformers does)."""
    architecture = (hf_config.get("architectures") or [""])[0]
    head = {"BertForSequenceClassification": "classifier", "BertForTokenClassification": "tagger"}.get(architecture)
    if head is None or "classifier.weight" not in weights:
        return None, None, None
    outputs = weights["classifier.weight"].shape[0]
    kind, labels = labels_from_hf(hf_config, head, outputs)
    problem_type = hf_config.get("problem_type")
    if problem_type == "multi_label_classification":
        return None, None, "it is multi-label, and bertkit's classifier picks one label"
    if problem_type == "regression" and outputs > 1:
        return None, None, f"it regresses {outputs} scores, and bertkit's regressor one"
    if len(set(labels)) != len(labels):
        return None, None, f"its id2label names a label twice ({', '.join(labels)})"
    if kind == "ner":
        if not all(tag == "O" or re.match(r"^[BI]-.", tag) for tag in labels):
            return None, None, (f"its tags ({', '.join(labels[:4])}, …) are not IOB tags (B-X, I-X, O), which "
                                "bertkit decodes")
        if missing := sorted({tag[2:] for tag in labels if tag.startswith("I-")}
                             - {tag[2:] for tag in labels if tag.startswith("B-")}):
            return None, None, (f"it has I- tags without their B- tag ({', '.join(missing)}): IOB1, where bertkit "
                                "decodes IOB2 (an entity begins with B-) and would find no entity")
    if head == "classifier" and not any(key.endswith("pooler.dense.weight") for key in weights):
        return None, None, "it has no pooler weights, which its classifier reads"
    return head, (kind, labels), None


def labels_from_hf(hf_config: dict, head: str, outputs: int) -> tuple[str, list[str]]:
    """(task kind, labels in output order) of an HF task checkpoint: a one-output sequence classifier is a
    regressor (transformers trains it with MSE), a token classifier an NER tagger; labels from id2label, else
    label2id, else LABEL_i (as transformers names them)."""
    if head == "classifier" and (hf_config.get("problem_type") == "regression" or outputs == 1):
        return "regress", ["score"]
    names = {}
    for key, value in (hf_config.get("id2label") or {}).items():
        with contextlib.suppress(TypeError, ValueError):
            names[int(key)] = str(value)
    if not names:
        for value, key in (hf_config.get("label2id") or {}).items():
            with contextlib.suppress(TypeError, ValueError):
                names[int(key)] = str(value)
    return "ner" if head == "tagger" else "classify", [names.get(i, f"LABEL_{i}") for i in range(outputs)]


def imported_task(hf_config: dict, kind: str, window: int | None) -> tuple[TaskConfig, dict[str, Any]]:
    """The imported run's [task] section and labels.json's extra entries: its kind, the `bertkit_task` record of
    a bertkit export (columns and max_length), else `window` (the tokenizer's model_max_length where it is below
    the model's positions: `sentence_transformers.tokenizer_window`) and its inputs marked unknown (a classifier may
    read pairs); a regressor whose source did not say "regression" keeps its problem_type for a re-export."""
    values: dict[str, Any] = {"kind": kind}
    record = hf_config.get(RECORD)
    extra = {}
    if isinstance(record, dict) and record.get("kind") == kind:
        values.update({key: record[key] for key in _INPUT_FIELDS if key in record})
    else:
        if window is not None:
            values["max_length"] = window
        if kind != "ner":  # whether it reads text pairs is not known: predict and evaluate say so
            extra.update(INPUTS_UNKNOWN)
    try:
        task = TaskConfig(**values)
    except (ConfigError, TypeError):  # a record edited by hand: the kind alone
        task = TaskConfig(kind=kind)
    if kind == "regress" and hf_config.get("problem_type") != "regression":
        extra[PROBLEM_TYPE_KEY] = hf_config.get("problem_type")
    return task, extra
