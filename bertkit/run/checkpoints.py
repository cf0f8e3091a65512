"""Resumable checkpoints inside a run directory.

checkpoints/
  step-N/          model.safetensors, optimizer.pt (optimizer, scheduler, fp16's loss scale), rng.pt,
                   state.json; a sharded run (train.sharding = fsdp) has sharded/ (every process's shards of the
                   model and optimiser, torch.distributed.checkpoint) instead of the weights, and no optimizer
                   in optimizer.pt
  latest           the name of the newest complete step-N, replaced in one durable rename
  best/            finetuning: the weights of the best validation metric so far, and its state.json

A checkpoint directory is committed with one rename after every file in it is fsynced, then `latest` flips to it:
a kill at any moment leaves `latest` naming a complete checkpoint (or none, before the first). Loading never runs
code (`torch.load(weights_only=True)`: a pickle with code in it is refused with one line), and a truncated or
corrupt file is a one-line error that says which earlier checkpoint is left.
"""

from __future__ import annotations

import glob
import json
import os
import pickle
import re
import shutil
from pathlib import Path

import torch

from bertkit.errors import BertkitError
from bertkit.run.directory import WEIGHTS_FILE, load_weights, read_json, write_json, write_weights
from bertkit.run.files import atomic_dir, confined, remove_stale, restore_orphans, write_atomic

CHECKPOINTS = "checkpoints"
LATEST = "latest"
BEST = "best"
_STEP = re.compile(r"step-(\d+)")
OPTIMIZER_FILE = "optimizer.pt"
RNG_FILE = "rng.pt"
SHARDED_DIR = "sharded"  # a sharded run's (train.sharding = fsdp) model and optimiser shards, one file per process
STATE_FILE = "state.json"


def rng_state() -> dict:
    """This process's RNG state (dropout draws): CPU and, where present, its current CUDA device's (one process per
    GPU: a resume on a node with another number of GPUs must not index devices it lacks)."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda_device"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what `rng_state` captured (a checkpoint's "cuda" list of every device's state, from before the
    current device's alone was kept, restores this process's device's entry where it has one)."""
    torch.set_rng_state(state["cpu"])
    if not torch.cuda.is_available():
        return
    if "cuda_device" in state:
        torch.cuda.set_rng_state(state["cuda_device"])
    elif "cuda" in state and torch.cuda.current_device() < len(state["cuda"]):
        torch.cuda.set_rng_state(state["cuda"][torch.cuda.current_device()])


def checkpoint_steps(run_dir: str | Path) -> list[int]:
    """Steps of the complete step-N checkpoints, newest first (anything else in checkpoints/ is ignored)."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = (_STEP.fullmatch(p.name) for p in root.iterdir() if p.is_dir())
    return sorted((int(m.group(1)) for m in found if m and (root / m.group(0) / STATE_FILE).is_file()), reverse=True)


def clean_stale(run_dir: str | Path) -> int:
    """Remove leftovers of interrupted writes: temporary files in the run (`.results.json.tmp-*`, …), in
    checkpoints/ (`.step-N.tmp-*`, `.best.tmp-*`, `.*.old-*`, `.latest.tmp*`) and the run's own temporary
    directories beside it (`.NAME.tmp-*` of a killed first write). Only called by the process holding the run's
    lock (which covers those names)."""
    run_dir = Path(run_dir)
    if (run_dir / CHECKPOINTS).is_dir():
        restore_orphans(run_dir / CHECKPOINTS)  # a best/ moved aside just before a kill is the best there is
    name = glob.escape(run_dir.name)  # `exp[1]` is no pattern matching another run `exp1`'s temporaries
    gone = remove_stale(run_dir.parent, f".{name}.tmp-*") + remove_stale(run_dir.parent, f".{name}.old-*")
    if run_dir.is_dir():
        gone += remove_stale(run_dir, ".*.tmp-*")
    root = run_dir / CHECKPOINTS
    if root.is_dir():
        gone += sum(remove_stale(root, pattern) for pattern in (".*.tmp-*", ".*.old-*", f".{LATEST}.tmp*"))
    return gone


def save_checkpoint(run_dir: str | Path, step: int, model, optimizer, scheduler, state: dict,
                    keep: int, rng_states: list[dict], shards=None, scaler=None) -> Path:
    """Write checkpoints/step-N atomically and durably, flip `latest` to it, then prune old ones. With `shards`
    (a sharded run), `shards(folder)` writes the model and optimiser there (every process takes part) instead.
    `scaler`: fp16's GradScaler, whose loss scale a resume continues with."""
    root = Path(run_dir) / CHECKPOINTS
    final = root / f"step-{step}"
    with atomic_dir(final, overwrite=True) as tmp:
        schedules = {"scheduler": scheduler.state_dict()}
        if scaler is not None:
            schedules["scaler"] = scaler.state_dict()
        if shards is not None:
            shards(tmp)
            torch.save(schedules, tmp / OPTIMIZER_FILE)
        else:
            write_weights(tmp / WEIGHTS_FILE, model, step=str(step))
            torch.save({"optimizer": optimizer.state_dict(), **schedules}, tmp / OPTIMIZER_FILE)
        torch.save(rng_states, tmp / RNG_FILE)
        write_json(tmp / STATE_FILE, state)
    write_atomic(root / LATEST, final.name)
    steps = checkpoint_steps(run_dir)
    # a step-N past this one is from a lost future: written, then killed before `latest` named it, and the resume
    # went on from an earlier one. Kept, it would hold a place that pruning keeps and be what a damaged `latest`
    # falls back to
    newer = [old for old in steps if old > step]
    for old in newer + [old for old in steps if old < step][max(keep - 1, 0):]:
        if old != step:  # renamed first: a kill mid-delete never leaves a half checkpoint that looks complete
            aside = root / f".step-{old}.old-prune"
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(root / f"step-{old}", aside)
            shutil.rmtree(aside, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint `latest` names; if that pointer is missing, unreadable or names something that is not a
    complete step-N, the newest complete step-N; None when there is none."""
    root = Path(run_dir) / CHECKPOINTS
    pointer = root / LATEST
    if pointer.is_file():
        try:
            name = pointer.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            name = ""
        if _STEP.fullmatch(name) and (confined(root, name, "checkpoint") / STATE_FILE).is_file():
            return root / name
    steps = checkpoint_steps(run_dir)
    return root / f"step-{steps[0]}" if steps else None


# state.json's counters and clocks: valid JSON of another type ("step": "30", "total_steps": null) was a traceback
# where the resume compares or adds them
_COUNTS = ("step", "total_steps", "schedule_steps", "max_steps", "evaluations", "best_step", "stale_evals",
           "skipped_steps", "bad_in_row", "reloads", "processes")
_SECONDS = ("elapsed", "step_seconds", "eval_seconds")


def read_state(path: Path) -> dict:
    """A checkpoint's state.json (the loop's TrainState), with a clear error when it is damaged (unreadable, or a
    counter that is not a whole number >= 0, or a clock that is not a number)."""
    try:
        state = read_json(path / STATE_FILE, "checkpoint state")
        if not isinstance(state, dict):
            raise BertkitError(f"{path / STATE_FILE}: not a checkpoint state (a JSON object)")
        for key in _COUNTS + _SECONDS:
            value = state.get(key, 0)
            whole = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            if not (whole or (key in _SECONDS and isinstance(value, float) and value >= 0)):
                raise BertkitError(f"{path / STATE_FILE}: {key} is {value!r}, not a number >= 0")
        return state
    except BertkitError as exc:
        raise _damaged(path, exc) from None


def _damaged(path: Path, exc: Exception) -> BertkitError:
    """One line: which checkpoint is damaged, why, and which earlier one a resume can fall back to."""
    earlier = [s for s in checkpoint_steps(path.parent.parent) if f"step-{s}" != path.name]
    hint = (f"; delete {path} to resume from step-{earlier[0]}" if earlier else
            "; no earlier checkpoint is left: start the run again")
    return BertkitError(f"checkpoint {path.name} is damaged: {exc}{hint}")


def _torch_file(path: Path):
    """torch.load that never runs code, with one-line errors for what users can cause."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise BertkitError(f"{path}: missing") from None
    except pickle.UnpicklingError as exc:
        if "weights_only" in str(exc) or "Unsupported" in str(exc) or "global" in str(exc).lower():
            raise BertkitError(f"{path}: holds Python objects other than tensors; refused to load it (it could run "
                               "code)") from None
        raise BertkitError(f"{path}: truncated or corrupt ({str(exc).splitlines()[0]})") from None
    except (RuntimeError, EOFError, ValueError, OSError) as exc:
        first = str(exc).strip().splitlines()[0].split(". ")[0] if str(exc).strip() else type(exc).__name__
        raise BertkitError(f"{path}: truncated or corrupt ({first})") from None


def saved_processes(path: Path) -> int:
    """How many processes wrote a checkpoint: its state's record of the run's first launch, or (a checkpoint from
    before that record) the number of per-process RNG states it holds."""
    recorded = read_state(path).get("processes", 0)
    if recorded:
        return recorded
    try:
        rng = _torch_file(path / RNG_FILE)
    except BertkitError as exc:
        raise _damaged(path, exc) from None
    return len(rng) if isinstance(rng, list) and rng else 1


def load_checkpoint(path: Path, model, optimizer=None, scheduler=None, scaler=None) -> tuple[dict, list[dict]]:
    """Load weights (and optimizer/scheduler/fp16 scaler when given; a checkpoint without a scaler's state leaves
    the scaler as it is) from a checkpoint; returns (state, rng states). A damaged
    file is one line naming it and the earlier checkpoint that is left, if any. A sharded checkpoint is loaded by
    every process at once (`load_shards`: into a sharded model, or whole into a plain one)."""
    state = read_state(path)
    try:
        sharded = is_sharded_checkpoint(path)
        if sharded:
            load_shards(path, model, optimizer)
        else:
            load_weights(model, path / WEIGHTS_FILE, next(model.parameters()).device)
        if optimizer is not None or scheduler is not None:
            saved = _torch_file(path / OPTIMIZER_FILE)
            try:
                if optimizer is not None and not sharded:
                    optimizer.load_state_dict(saved["optimizer"])
                if scheduler is not None:
                    scheduler.load_state_dict(saved["scheduler"])
                if scaler is not None and "scaler" in saved:
                    scaler.load_state_dict(saved["scaler"])
            except (KeyError, TypeError, ValueError, RuntimeError) as exc:
                raise BertkitError(f"{path / OPTIMIZER_FILE}: does not fit this run ({exc})") from None
        rng = _torch_file(path / RNG_FILE)
        if not (isinstance(rng, list) and rng and all(isinstance(r, dict) and "cpu" in r for r in rng)
                and all(isinstance(r["cpu"], torch.Tensor) and r["cpu"].dtype == torch.uint8 for r in rng)):
            raise BertkitError(f"{path / RNG_FILE}: not a bertkit RNG state")
    except BertkitError as exc:
        raise _damaged(path, exc) from None
    return state, rng


def is_sharded_checkpoint(path: Path) -> bool:
    """Whether checkpoints/step-N holds shards (a run trained with train.sharding = fsdp) rather than one
    model.safetensors and the optimiser in optimizer.pt."""
    return (Path(path) / SHARDED_DIR).is_dir()


def save_shards(folder: Path, model: torch.nn.Module, optimizer) -> None:
    """Every process writes its shards of the model and optimiser into `folder`/sharded (collective; the files
    are fsynced). Keys are parameter names, so a resume with another process count reshards them on load."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state},
             storage_writer=dcp.FileSystemWriter(str(Path(folder) / SHARDED_DIR), sync_files=True))


def load_shards(folder: Path, model: torch.nn.Module, optimizer) -> None:
    """Load what `save_shards` wrote into `model` and `optimizer` (collective), resharding to this launch's
    processes; a damaged or mismatched checkpoint is one line."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    if optimizer is None:
        state = {"model": get_state_dict(model, [])[0]}
    else:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
    try:
        dcp.load(state, storage_reader=dcp.FileSystemReader(str(Path(folder) / SHARDED_DIR)))
    except (dcp.api.CheckpointException, RuntimeError, OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BertkitError(f"{Path(folder) / SHARDED_DIR}: damaged or from another model ({first[:200]})") from None
    set_state_dict(model, optimizer if optimizer is not None else [], model_state_dict=state["model"],
                   optim_state_dict=state.get("optimizer", {}))



# ------------------------------------------------------------------------------------------ best weights

def save_best(run_dir: Path, model, step: int, metric: str, value: float) -> None:
    """checkpoints/best/: the weights of the best evaluation so far (atomic, durable)."""
    with atomic_dir(Path(run_dir) / CHECKPOINTS / BEST, overwrite=True) as tmp:
        write_weights(tmp / WEIGHTS_FILE, model, step=str(step))
        write_json(tmp / STATE_FILE, {"step": step, "metric": metric, "value": value})


def best_weights(run_dir: Path) -> Path | None:
    """checkpoints/best/model.safetensors when a run kept one."""
    path = Path(run_dir) / CHECKPOINTS / BEST / WEIGHTS_FILE
    return path if path.is_file() else None


def newer_best(run_dir: Path, step: int) -> bool:
    """On resume: whether the kept best weights were saved after the checkpoint of `step` (or are damaged). They
    are then not in the resumed state's history, and the best that history names was overwritten by them."""
    path = Path(run_dir) / CHECKPOINTS / BEST / STATE_FILE
    if not path.is_file():
        return False
    try:
        return json.loads(path.read_text(encoding="utf-8"))["step"] > step
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
        return True  # a damaged best is no best: the replay writes it again


def best_metric(run_dir: Path) -> str:
    """The metric the kept best weights were picked by ("" when none are kept, or unreadable)."""
    try:
        metric = json.loads((Path(run_dir) / CHECKPOINTS / BEST / STATE_FILE).read_text(encoding="utf-8"))["metric"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
        return ""
    return metric if isinstance(metric, str) else ""


def drop_best(run_dir: Path) -> None:
    """Remove the kept best weights (see `newer_best`)."""
    shutil.rmtree(Path(run_dir) / CHECKPOINTS / BEST, ignore_errors=True)
