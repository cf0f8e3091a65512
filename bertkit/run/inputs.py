"""What a run was trained on: inputs.json records every input file's content (the corpus, the task files) and the
base model, so that a resume on changed content is refused instead of silently training on other text.

inputs.json
  {"files": {"data.corpus": [{"path", "bytes", "mtime_ns", "ctime_ns", "sha256"}, ...], "task.train_file": [...], ...},
   "base_model": {"path", "digest"} | null,      (null: a seq2seq run begun from its recipe alone)
   "changes": [{"role", "was", "now"}, ...]}     (resumes that accepted changed content on purpose)

A file's record is a sha256 of its whole content: any edit, even one that keeps the size, is seen. A resume reads a
file again only when its size, modification time or change time (ctime: every write moves it, and nothing sets it
back) moved (a `touch` costs one read, and changes nothing); files over
`_WHOLE` bytes (a streamed corpus larger than memory can be read) get run.files.content_digest instead — size, both
ends and 64 samples — which a same-size edit in the middle can slip past. The base model's weights are recorded
with content_digest too: they are bertkit's own file, written whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console

from bertkit.errors import BertkitError
from bertkit.paths import need_file
from bertkit.run.directory import WEIGHTS_FILE, read_json
from bertkit.run.files import content_digest, to_json, write_atomic

INPUTS_FILE = "inputs.json"
ACCEPT_OPTION = "--accept-changed-data"
_WHOLE = 4 << 30  # files up to 4 GiB are hashed whole (~1 GB/s)


def _sha256(path: Path) -> str:
    size = path.stat().st_size
    if size > _WHOLE:
        return f"sampled:{content_digest(path)}"
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _file(path: str | Path, before: dict | None = None) -> dict:
    """One file's record; `before` (the recorded one) is reused when size, modification and change time did not
    move (the change time moves on every write, and `touch -r` or `rsync -a` cannot set it back: a same-size edit
    whose modification time was restored kept the old digest)."""
    path = Path(path)
    need_file(path)
    stat = path.stat()
    entry = {"path": str(path.resolve()), "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns,
             "ctime_ns": stat.st_ctime_ns}
    same = before is not None and all(before.get(key) == entry[key] for key in ("bytes", "mtime_ns", "ctime_ns"))
    entry["sha256"] = before["sha256"] if same and "sha256" in before else _sha256(path)
    return entry


def _model(base_model: str | Path) -> dict:
    weights = Path(base_model) / WEIGHTS_FILE
    return {"path": str(Path(base_model).resolve()),
            "digest": content_digest(weights) if weights.is_file() else None}


def describe(files: dict[str, Iterable[str | Path]], base_model: str | Path | None = None,
             with_base: bool = False, before: dict | None = None) -> dict:
    """The inputs record of a run about to start (or resume): each role's files, in order, with their content;
    with `with_base` also the base model (None: the run begins from its recipe). `before` (a stored record) spares
    re-reading files whose size and modification time are as recorded."""
    old = (before or {}).get("files", {})
    record = {"files": {}}
    for role, paths in files.items():
        paths = list(paths)
        was = old.get(role) or []
        record["files"][role] = [_file(p, was[i] if i < len(was) and was[i].get("path") == str(Path(p).resolve())
                                       else None) for i, p in enumerate(paths)]
    if with_base:
        record["base_model"] = _model(base_model) if base_model is not None else None
    return record


def write(directory: str | Path, record: dict) -> None:
    """inputs.json, durably."""
    write_atomic(Path(directory) / INPUTS_FILE, to_json(record) + "\n")


def stored(run: str | Path) -> dict | None:
    """The run's inputs record; None for a run from before it was kept (nothing to compare with)."""
    path = Path(run) / INPUTS_FILE
    return read_json(path, "inputs record") if path.is_file() else None


def base_of(run: str | Path, given: str | Path | None, required: bool) -> Path | None:
    """The base model a run began from, for a resume: the one inputs.json recorded, or the --model given — which
    must hold the same weights when both are known (a moved or copied base is fine; another model is refused, also
    where the run resumes from a checkpoint and would ignore it). `required`: a finetune always has one (a seq2seq
    run may have begun from its recipe alone)."""
    record = stored(run) or {}
    entry = record.get("base_model", "unknown")
    if entry is None:  # recorded: no base model
        if given is not None:
            raise BertkitError(f"{run}: began from its recipe, not from a model; resume without --model")
        return None
    if isinstance(entry, dict) and isinstance(entry.get("path"), str):
        if given is None:
            if not Path(entry["path"]).is_dir():
                raise BertkitError(f"{run}: its base model {entry['path']} is gone; resume with --model and the "
                                   "same model")
            return Path(entry["path"])
        if Path(given).resolve() != Path(entry["path"]) and _model(given)["digest"] != entry.get("digest"):
            raise BertkitError(f"{run}: began from {entry['path']}, not {given} (other weights); resume with --model "
                               f"{entry['path']} (or drop --model)")
        return Path(given)
    if given is None and required:
        raise BertkitError(f"{run}: was killed before its first checkpoint and does not record its base model; "
                           "resume with the --model it began from")
    return Path(given) if given is not None else None


def check(run: str | Path, files: dict[str, Iterable[str | Path]], accept: bool, console: Console,
          main: bool = True, base_model: str | Path | None = None, with_base: bool = False) -> dict:
    """On resume: every recorded role must hold the same content now. A change is refused with one line naming
    the file, unless `accept` (then warned). Nothing is written here: the returned record, with an accepted change
    added to the stored one's "changes", is for `keep` to write once every other check of the resume has passed, so
    that a resume refused later for another reason leaves inputs.json as it was (a run from before inputs.json has
    nothing to compare with, and is not checked). Every process checks; only the `main` one warns."""
    run = Path(run)
    old = stored(run)
    current = describe(files, base_model, with_base, before=old)
    if old is None:
        return current
    changes = []
    for role, now in current["files"].items():
        was = old.get("files", {}).get(role)
        if was is None or [f.get("sha256") for f in was] == [f["sha256"] for f in now]:
            continue
        changes.append({"role": role, "was": was, "now": now})
    old_base, new_base = old.get("base_model"), current.get("base_model")
    if old_base and new_base and old_base.get("digest") != new_base.get("digest"):
        changes.append({"role": "base_model", "was": old_base, "now": new_base})
    if changes and not accept:
        first = changes[0]
        raise BertkitError(f"{run}: {first['role']} changed since the run began "
                           f"({_difference(first['was'], first['now'])}); resume on the same content, or pass "
                           f"{ACCEPT_OPTION} to go on with the new content (it is recorded)")
    if not changes:
        return current
    if main:
        for change in changes:
            console.print(f"[yellow]warning: {change['role']} changed since the run began "
                          f"({_difference(change['was'], change['now'])}); going on with the new content "
                          f"({ACCEPT_OPTION}), recorded in {run / INPUTS_FILE}")
    # what this resume does not name (the base model after a checkpoint) stays as recorded
    return {**old, **current, "files": {**old.get("files", {}), **current["files"]},
            "changes": old.get("changes", []) + changes}


def keep(run: str | Path, record: dict) -> None:
    """After a resume's every check: write the record `check` returned if it holds a change accepted now (one that
    the stored record's "changes" lack); otherwise inputs.json stays as it is."""
    old = stored(Path(run)) or {}
    if record.get("changes") and record["changes"] != old.get("changes"):
        write(run, record)


def _difference(was, now) -> str:
    """A few words on what differs between two records of one role."""
    if isinstance(was, dict):  # the base model
        return f"{now['path']}: other weights than {was['path']} had"
    if len(was) != len(now):
        return f"{len(was)} file(s) then, {len(now)} now"
    for a, b in zip(was, now):
        if a.get("sha256") != b["sha256"]:
            size = f"{a['bytes']:,} -> {b['bytes']:,} bytes" if a["bytes"] != b["bytes"] else "same size, other bytes"
            return f"{b['path']}: {size}"
    return "other content"
