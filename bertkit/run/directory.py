"""The run directory: one format for every model and task, written durably, read with clear errors.

run/
  config.json        resolved config (every section) + bertkit version
  tokenizer.json     when the model has a tokenizer
  model.safetensors  weights only (tied weights stored once); never a pickle
  labels.json        task heads: the task and its label set, in head-output order
  metrics.jsonl      one line per logged step / evaluation (bertkit.run.metrics)
  results.json       the finished run's summary (written last: its presence means "finished")
  baseline.json      pretraining: the unigram baseline of the validation set
  checkpoints/       resumable state (bertkit.run.checkpoints)

Every loader (TaskModel, SentenceEncoder, Translator, generate, fill-mask, probe, attention, export) comes through
`load_run` and `load_run_tokenizer`, so the checks (weights fit the config, weights are finite, the tokenizer fits
the embedding table) and the device choice live here once.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

import bertkit
from bertkit.config import BUDGET_STEPS, Config
from bertkit.errors import BertkitError
from bertkit.hardware import resolve_precision
from bertkit.nn.model import Model
from bertkit.paths import where_looked
from bertkit.run.files import atomic_dir, atomic_file, copy_atomic, to_json, write_atomic
from bertkit.text.labels import canonical_label

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
LABELS_FILE = "labels.json"
RESULTS_FILE = "results.json"
BASELINE_FILE = "baseline.json"


def default_device(device: str | torch.device | None = None) -> torch.device:
    """The device a loaded model runs on: the one asked for, else CUDA when there is one, else the CPU. A device
    this machine does not have (or a name torch does not know) is a user error, not torch's traceback."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise BertkitError(f"device {device!r}: not a device torch knows ({str(exc).splitlines()[0]})") from None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise BertkitError(f"device {device!r}: this machine has no CUDA device torch can use")
    if chosen.type == "cuda" and chosen.index is not None and chosen.index >= torch.cuda.device_count():
        raise BertkitError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return chosen


def read_json(path: str | Path, what: str = "file") -> dict:
    """A JSON object from a run file; a missing, truncated or non-object file is a one-line user error."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BertkitError(f"{path}: missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BertkitError(f"{path}: not valid JSON, truncated or corrupt ({exc})") from None
    if not isinstance(data, dict):
        raise BertkitError(f"{path}: not a bertkit {what}")
    return data


def write_json(path: str | Path, obj) -> Path:
    """Write a JSON run file durably (temp → fsync → rename → fsync directory)."""
    return write_atomic(path, to_json(obj) + "\n")


def write_config(directory: Path, config: Config) -> None:
    """config.json: the resolved config of every section, stamped with the bertkit version."""
    write_json(Path(directory) / CONFIG_FILE, {"bertkit_version": bertkit.__version__, **config.to_dict()})


def write_weights(path: str | Path, model: torch.nn.Module, **metadata: str) -> Path:
    """model.safetensors (or a checkpoint's weights) written durably."""
    with atomic_file(path, overwrite=True) as tmp:
        save_model(model, str(tmp), metadata={"format": "pt", "bertkit": bertkit.__version__, **metadata})
    return Path(path)


def copy_weights(src: str | Path, path: str | Path) -> Path:
    """Replace `path` with a copy of the weights file `src` (e.g. the best checkpoint), durably."""
    return copy_atomic(src, path)


def write_labels(directory: Path, kind: str, labels: list[str], **extra) -> None:
    """labels.json: the task and its label set, in head-output order (and `extra` entries, e.g. an imported
    model's `hf_problem_type`)."""
    write_json(Path(directory) / LABELS_FILE, {"task": kind, "labels": labels, **extra})


def read_labels(run: str | Path) -> tuple[str, list[str]]:
    """(task kind, labels) from labels.json."""
    path = Path(run) / LABELS_FILE
    data = read_json(path, "labels file")
    if not isinstance(data.get("task"), str) or not isinstance(data.get("labels"), list):
        raise BertkitError(f"{path}: not a bertkit labels file (needs 'task' and 'labels')")
    labels = [str(label) for label in data["labels"]]
    # a run from before labels were canonical may hold "1.0" for the class task files now read as "1": the same
    # class, unless that would merge two of its classes
    canonical = [name if name is not None else label for label, (name, _) in zip(labels, map(canonical_label, labels))]
    return data["task"], canonical if len(set(canonical)) == len(labels) else labels


INPUTS_UNKNOWN = {"inputs": "unknown"}  # labels.json of a model imported from transformers, whose config does not
# say which texts it reads (whether pairs): `predict` and `evaluate` then take a pair column and warn without one


def inputs_unknown(run: str | Path) -> bool:
    """Whether the run's labels.json marks its inputs unknown (an imported transformers task model)."""
    path = Path(run) / LABELS_FILE
    return path.is_file() and read_json(path, "labels file").get("inputs") == INPUTS_UNKNOWN["inputs"]


def write_run_files(directory: Path, model: Model, config: Config, tokenizer_file: str | Path | None = None) -> None:
    """Write config.json, model.safetensors and (if given) tokenizer.json into an existing directory."""
    if model.head_config != config.heads:  # load_run rebuilds the heads config.json names: they must be these
        raise ValueError(f"the model's heads {model.head_config} are not the config's {config.heads}")
    write_config(directory, config)
    write_weights(Path(directory) / WEIGHTS_FILE, model)
    if tokenizer_file is not None:
        copy_atomic(tokenizer_file, Path(directory) / TOKENIZER_FILE)


def save_run(out: str | Path, model: Model, config: Config, tokenizer_file: str | Path | None = None,
             overwrite: bool = False) -> Path:
    """Save a complete run directory atomically; returns its path."""
    with atomic_dir(out, overwrite=overwrite) as tmp:
        write_run_files(tmp, model, config, tokenizer_file)
    return Path(out)


def is_run_dir(path: str | Path) -> bool:
    """True when `path` looks like a bertkit run directory."""
    path = Path(path)
    return (path / CONFIG_FILE).is_file() and (path / WEIGHTS_FILE).is_file()


def is_finished(run: str | Path) -> bool:
    """True when the run wrote its results (the last file a training job writes)."""
    return (Path(run) / RESULTS_FILE).is_file()


def load_config(run: str | Path) -> Config:
    """The Config stored in a run directory."""
    path = Path(run) / CONFIG_FILE
    if not path.is_file():
        if (Path(run) / "manifest.json").is_file():  # deploy/manifest.py's MANIFEST_FILE (run/ may not import it)
            raise BertkitError(f"{run}: an ONNX export (bertkit export --format onnx), not a run directory: the "
                               "inference commands (predict, evaluate, embed, similarity, evaluate-sts, index, "
                               "search) take it; this one takes the run it was exported from")
        if not Path(run).exists():  # a typo'd path was "not a run directory", as if something were there
            raise BertkitError(f"{run}: no such directory (a run directory, written by pretrain, finetune or "
                               f"import-hf){where_looked(run)}")
        raise BertkitError(f"{run}: not a bertkit run directory (no {CONFIG_FILE})")
    data = read_json(path, "config")
    if "bertkit_version" not in data:
        raise BertkitError(f"{path}: not a bertkit config (a Hugging Face folder? use `bertkit import-hf`)")
    data.pop("bertkit_version")
    return Config.from_dict(data, source=str(path), stored=True)


# Train settings a resumed run may change without breaking its exact continuation (limits, logging, checkpoint
# cadence, compilation, early stopping, sharding: a sharded checkpoint also loads whole); every other stored
# setting must match.
RESUMABLE_TRAIN_KEYS = frozenset(f"train.{key}" for key in (
    "max_steps", "max_time", "log_every", "eval_every", "save_every", "keep_checkpoints", "compile", "patience",
    "epochs", "sharding"))


def same_setting(key: str, stored, given) -> bool:
    """Whether a resumed run's stored setting and the given one mean the same thing here: equal, or (precision)
    resolving to the same precision on this machine — a run stored as "fp32" (the default before "auto")
    resumes under "auto" wherever auto picks fp32."""
    if key == "train.precision" and stored != given:
        device = default_device()
        return resolve_precision(stored, device).precision == resolve_precision(given, device).precision
    return stored == given


LIMITS = ("max_steps", "max_time", "epochs")  # the train keys that say how long a run goes


def keep_run_limits(config: Config, out: str | Path, given: dict[str, object], sets: list[str]) -> Config:
    """On --resume: the training limits the run has, unless this command gives them (an option or --set). A plain
    `--resume` so continues the run as it was planned; a larger --max-steps / --max-time extends it (--max-steps
    alone drops the run's time budget and epochs: the step count is the new limit)."""
    if not (Path(out) / CONFIG_FILE).is_file():
        return config
    stored = load_config(out).train
    named = {item.split("=", 1)[0].strip().removeprefix("train.") for item in sets}
    chosen = {key for key in LIMITS if given.get(key) is not None or key in named}
    dropped = {}
    if "max_steps" in chosen:  # an explicit step count replaces the run's epochs and its time budget, and the
        # recipe's too (a demo or budget recipe sets max_time: kept, it ended an extension at the old budget)
        dropped = {key: None for key in ("epochs", "max_time") if key not in chosen}
        chosen.update(("epochs", "max_time"))
    keep = {key: getattr(stored, key) for key in LIMITS if key not in chosen}
    limits = dataclasses.replace(config.train, **keep, **dropped)
    if "max_time" in chosen and "max_steps" not in chosen and stored.max_time is not None and \
            limits.max_time is None and limits.epochs is None and limits.max_steps >= BUDGET_STEPS:
        # a run whose only limit was its clock, resumed with `--max-time none` and no step count: it had re-planned
        # to a million steps with no clock (a review, 2026-11-28)
        raise BertkitError(f"{out}: its time budget was its only limit; with --max-time none give --max-steps N "
                           "(how long it goes on)")
    return dataclasses.replace(config, train=limits)


def record_train(out: str | Path, train) -> None:
    """Store a resumed run's (possibly extended) [train] section in its config.json, durably, when it changed (a
    directory the API trained into without a config.json is left alone)."""
    if not (Path(out) / CONFIG_FILE).is_file():
        return
    stored = load_config(out)
    if stored.train.precision != train.precision and same_setting("train.precision", stored.train.precision,
                                                                   train.precision):
        # "fp32" resumed under an equivalent "auto" stays "fp32": on another machine auto may mean bf16
        train = dataclasses.replace(train, precision=stored.train.precision)
    # an elastic resume runs another accumulation (or batch_size) for another process count; the run's own stays
    # (train/elastic.py)
    train = dataclasses.replace(train, accumulation_steps=stored.train.accumulation_steps,
                                batch_size=stored.train.batch_size)
    if stored.train != train:
        write_config(Path(out), dataclasses.replace(stored, train=train))


def load_weights(model: torch.nn.Module, path: str | Path, device: str | torch.device = "cpu") -> None:
    """Load a safetensors file into `model` (strict); a truncated, mismatched or non-finite file is a user error."""
    path = Path(path)
    if not path.is_file():
        raise BertkitError(f"{path}: missing")
    try:
        load_model(model, str(path), strict=True, device=str(device))
    except (SafetensorError, RuntimeError, OSError, ValueError) as exc:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        if isinstance(exc, RuntimeError) and "state_dict" in text:  # a readable file for another architecture
            detail = next((line.strip() for line in text.splitlines()[1:] if line.strip()), first)
            raise BertkitError(f"{path}: weights do not fit the config ({detail[:200]})") from None
        raise BertkitError(f"{path}: truncated or corrupt ({first})") from None
    bad = next((name for name, p in model.state_dict().items()
                if p.is_floating_point() and not torch.isfinite(p).all()), None)
    if bad is not None:
        raise BertkitError(f"{path}: weights are not finite (NaN or inf in {bad}); the file is damaged or the run "
                           "diverged")


def load_run(run: str | Path, device: str | torch.device | None = "cpu") -> tuple[Config, Model]:
    """Rebuild the model stored in a run directory on `device` (None: CUDA when there is one, else the CPU), in
    eval mode; missing, corrupt, mismatched or non-finite weights are user errors."""
    config = load_config(run)
    weights = Path(run) / WEIGHTS_FILE
    if not weights.is_file():
        raise BertkitError(f"{run}: no {WEIGHTS_FILE}")
    model = Model(config.model, config.heads)
    load_weights(model, weights)
    return config, model.to(default_device(device)).eval()
