"""What a run was trained on: inputs.json records a content digest of every input file (the corpus, the task files)
and the base model, so that a resume on changed content is refused instead of silently training on other text.

inputs.json
  {"files": {"data.corpus": [{"path", "bytes", "digest"}, ...], "task.train_file": [...], ...},
   "base_model": {"path", "digest"} | null,
   "changes": [{"role", "was", "now"}, ...]}   (resumes that accepted changed content on purpose)

The digest is run.files.content_digest: cheap on any size, changed by an edit, a replacement or a truncation.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from rich.console import Console

from bertkit.errors import BertkitError
from bertkit.run.directory import read_json
from bertkit.run.files import content_digest, to_json, write_atomic

INPUTS_FILE = "inputs.json"
ACCEPT_OPTION = "--accept-changed-data"


def describe(files: dict[str, Iterable[str | Path]], base_model: str | Path | None = None) -> dict:
    """The inputs record of a run about to start (or resume): each role's files, in order, with their digests."""
    for paths in files.values():
        for path in paths:
            if not Path(path).is_file():
                raise BertkitError(f"{path}: no such file")
    record = {"files": {role: [{"path": str(Path(p).resolve()), "bytes": Path(p).stat().st_size,
                                "digest": content_digest(p)} for p in paths]
                        for role, paths in files.items()}}
    if base_model is not None:
        weights = Path(base_model) / "model.safetensors"
        record["base_model"] = {"path": str(Path(base_model).resolve()),
                                "digest": content_digest(weights) if weights.is_file() else None}
    return record


def write(directory: str | Path, record: dict) -> None:
    """inputs.json, durably."""
    write_atomic(Path(directory) / INPUTS_FILE, to_json(record) + "\n")


def stored(run: str | Path) -> dict | None:
    """The run's inputs record; None for a run from before it was kept (nothing to compare with)."""
    path = Path(run) / INPUTS_FILE
    return read_json(path, "inputs record") if path.is_file() else None


def base_model(run: str | Path) -> Path | None:
    """The base model the run was started from, as recorded."""
    record = stored(run) or {}
    entry = record.get("base_model")
    return Path(entry["path"]) if isinstance(entry, dict) and isinstance(entry.get("path"), str) else None


def restart_base(run: str | Path, given: str | Path | None, required: bool) -> Path | None:
    """The base model of a run started again after a kill before its first checkpoint: the one inputs.json
    recorded, or the --model given (which must be that one when both are known). `required`: a finetune always has
    one (a seq2seq run may have begun from the recipe alone)."""
    recorded = base_model(run)
    if given is not None and recorded is not None and Path(given).resolve() != recorded:
        raise BertkitError(f"{run}: began from {recorded}, not {given}; resume with --model {recorded} (or drop "
                           "--model)")
    base = given if given is not None else recorded
    if base is None and required:
        raise BertkitError(f"{run}: was killed before its first checkpoint and does not record its base model; "
                           "resume with the --model it began from")
    return Path(base) if base is not None else None


def check(run: str | Path, current: dict, accept: bool, console: Console, main: bool = True) -> None:
    """On resume: every recorded role must hold the same content now. A change is refused with one line naming
    the file, unless `accept` (then warned, and recorded in inputs.json's "changes"). A run from before inputs.json
    gets one now, so its next resume is checked. Every process checks; only the `main` one writes and warns."""
    run = Path(run)
    old = stored(run)
    if old is None:
        if main:
            write(run, current)
        return
    changes = []
    for role, now in current["files"].items():
        was = old.get("files", {}).get(role)
        if was is None or [f["digest"] for f in was] == [f["digest"] for f in now]:
            continue
        changes.append({"role": role, "was": was, "now": now})
    old_base, new_base = old.get("base_model"), current.get("base_model")
    if old_base and new_base and old_base.get("digest") != new_base.get("digest"):
        changes.append({"role": "base_model", "was": old_base, "now": new_base})
    if not changes:
        return
    first = changes[0]
    detail = _difference(first["was"], first["now"])
    if not accept:
        raise BertkitError(f"{run}: {first['role']} changed since the run began ({detail}); resume on the same "
                           f"content, or pass {ACCEPT_OPTION} to go on with the new content (it is recorded)")
    if not main:
        return
    for change in changes:
        console.print(f"[yellow]warning: {change['role']} changed since the run began "
                      f"({_difference(change['was'], change['now'])}); going on with the new content "
                      f"({ACCEPT_OPTION}), recorded in {run / INPUTS_FILE}")
    write(run, {**current, "changes": old.get("changes", []) + changes})


def _difference(was, now) -> str:
    """A few words on what differs between two records of one role."""
    if isinstance(was, dict):  # the base model
        return f"{now['path']}: other weights than {was['path']} had"
    if len(was) != len(now):
        return f"{len(was)} file(s) then, {len(now)} now"
    for a, b in zip(was, now):
        if a["digest"] != b["digest"]:
            size = f"{a['bytes']:,} -> {b['bytes']:,} bytes" if a["bytes"] != b["bytes"] else "same size, other bytes"
            return f"{b['path']}: {size}"
    return "other content"
