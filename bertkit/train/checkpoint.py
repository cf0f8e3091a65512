"""The run directory: one format for every model and task, written atomically, loaded with clear errors.

run/
  config.json        resolved config (every section) + bertkit version
  tokenizer.json     when the model has a tokenizer
  model.safetensors  weights only (tied weights stored once)
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

import bertkit
from bertkit.config import Config
from bertkit.errors import BertkitError
from bertkit.nn.model import Model
from bertkit.paths import atomic_dir

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"


def write_config(directory: Path, config: Config) -> None:
    """config.json: the resolved config of every section, stamped with the bertkit version."""
    payload = {"bertkit_version": bertkit.__version__, **config.to_dict()}
    (directory / CONFIG_FILE).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def write_run_files(directory: Path, model: Model, config: Config, tokenizer_file: str | Path | None = None) -> None:
    """Write config.json, model.safetensors and (if given) tokenizer.json into an existing directory."""
    write_config(directory, config)
    save_model(model, str(directory / WEIGHTS_FILE), metadata={"format": "pt", "bertkit": bertkit.__version__})
    if tokenizer_file is not None:
        shutil.copyfile(tokenizer_file, directory / TOKENIZER_FILE)


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


def load_config(run: str | Path) -> Config:
    """The Config stored in a run directory."""
    path = Path(run) / CONFIG_FILE
    if not path.is_file():
        raise BertkitError(f"{run}: not a bertkit run directory (no {CONFIG_FILE})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BertkitError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict) or "bertkit_version" not in data:
        raise BertkitError(f"{path}: not a bertkit config (a Hugging Face folder? use `bertkit import-hf`)")
    data.pop("bertkit_version")
    return Config.from_dict(data, source=str(path))


def check_run_output(out: Path, config: Config, resume: bool, sections: tuple[str, ...],
                     may_change: set[str]) -> None:
    """Refuse to touch an existing different run, or to resume what is not there. On resume, every key of
    `sections` must match the stored run except the dotted keys in `may_change` (e.g. "train.max_steps")."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        if resume:
            raise BertkitError(f"{out}: nothing to resume (no run there)")
        return
    if not (out / CONFIG_FILE).is_file():
        raise BertkitError(f"{out}: exists and is not a bertkit run (choose another --out)")
    if not resume:
        raise BertkitError(f"{out}: already holds a run (pass --resume to continue it, or choose another --out)")
    existing = load_config(out)
    for section in sections:
        old, new = dataclasses.asdict(getattr(existing, section)), dataclasses.asdict(getattr(config, section))
        for key, value in old.items():
            if f"{section}.{key}" not in may_change and value != new[key]:
                raise BertkitError(f"{out}: holds a different run ({section}.{key} = {value!r}, now {new[key]!r}); "
                                   "resume with the same settings or choose another --out")
    if latest_checkpoint(out) is None:
        raise BertkitError(f"{out}: has no checkpoint yet to resume from (delete it and start again)")


def load_run(run: str | Path, map_location: str = "cpu") -> tuple[Config, Model]:
    """Rebuild the model stored in a run directory; missing, corrupt or mismatched weights are user errors."""
    config = load_config(run)
    weights = Path(run) / WEIGHTS_FILE
    if not weights.is_file():
        raise BertkitError(f"{run}: no {WEIGHTS_FILE}")
    model = Model(config.model)
    try:
        load_model(model, str(weights), strict=True)
    except (SafetensorError, RuntimeError, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BertkitError(f"{weights}: weights do not fit the config ({first})") from None
    return config, model.to(map_location).eval()




# ------------------------------------------------------------------------------------------ resumable checkpoints

CHECKPOINTS = "checkpoints"
LATEST = "latest"


def rng_state() -> dict:
    """This process's RNG state (dropout draws): CPU and, where present, CUDA."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what `rng_state` captured."""
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: str | Path, step: int, model: Model, optimizer, scheduler, state: dict,
                    keep: int, rng_states: list[dict]) -> Path:
    """Write checkpoints/step-N atomically, then flip `latest` to it (one rename), then prune old ones.

    A kill at any moment leaves `latest` naming a complete checkpoint (or none, before the first).
    """
    root = Path(run_dir) / CHECKPOINTS
    final = root / f"step-{step}"
    with atomic_dir(final, overwrite=True) as tmp:
        save_model(model, str(tmp / WEIGHTS_FILE), metadata={"format": "pt", "step": str(step)})
        torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp / "optimizer.pt")
        torch.save(rng_states, tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps(state, indent=1), encoding="utf-8")
    pointer = root / f".{LATEST}.tmp"
    pointer.write_text(final.name, encoding="utf-8")
    os.replace(pointer, root / LATEST)
    steps = sorted((int(p.name.split("-")[1]) for p in root.glob("step-*") if p.is_dir()), reverse=True)
    for old in steps[keep:]:
        if old != step:
            shutil.rmtree(root / f"step-{old}", ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint `latest` names, or None."""
    pointer = Path(run_dir) / CHECKPOINTS / LATEST
    if not pointer.is_file():
        return None
    path = pointer.parent / pointer.read_text(encoding="utf-8").strip()
    return path if (path / "state.json").is_file() else None


def load_checkpoint(path: Path, model: Model, optimizer=None, scheduler=None) -> tuple[dict, list[dict]]:
    """Load weights (and optimizer/scheduler when given) from a checkpoint; returns (state, rng states)."""
    load_model(model, str(path / WEIGHTS_FILE), strict=True, device=str(next(model.parameters()).device))
    if optimizer is not None or scheduler is not None:
        saved = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
        if optimizer is not None:
            optimizer.load_state_dict(saved["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(saved["scheduler"])
    state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    rng = torch.load(path / "rng.pt", map_location="cpu", weights_only=True)
    return state, rng
