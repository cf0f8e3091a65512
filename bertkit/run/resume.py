"""What a resume may change: `check_run_output` refuses to write over another run, or to resume one whose settings
differ from the command's (the limits and cadences of RESUMABLE_TRAIN_KEYS aside), before any work. It reads
config.json (`directory`) and the latest checkpoint's state (`checkpoints`), so it sits above both."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from bertkit.config import Config
from bertkit.errors import BertkitError
from bertkit.hardware import resolve_precision
from bertkit.run.checkpoints import latest_checkpoint, read_state
from bertkit.run.directory import CONFIG_FILE, same_setting, default_device, load_config
from bertkit.run.outputs import refuse_nested


def check_run_output(out: Path, config: Config, resume: bool, sections: tuple[str, ...],
                     may_change: set[str]) -> None:
    """Refuse to touch an existing different run, or to resume what is not there. On resume, every key of
    `sections` must match the stored run except the dotted keys in `may_change` (e.g. "train.max_steps"). A run
    killed before its first checkpoint resumes from step 0 (the loop starts it again). A run never goes inside
    another run or an index."""
    refuse_nested(out)
    if out.is_symlink() and not (resume and out.is_dir()):
        # a dangling link ran the whole job and then failed on the rename; a link to an empty folder was replaced by
        # a real folder on the link's own disk: a new run takes its path's place, so the path must be the folder
        where = os.readlink(out)
        raise BertkitError(f"{out}: a link to {where}" + (", which is not there" if not out.exists() else "")
                           + "; a new run replaces what is at its path: give --out the folder itself")
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
            if f"{section}.{key}" not in may_change and not same_setting(f"{section}.{key}", value, new[key]) \
                    and not _pinned_as_trained(out, f"{section}.{key}", new[key]):
                pin = f" (pass --set {section}.{key}={value} to keep it)" if key == "precision" else ""
                raise BertkitError(f"{out}: holds a different run ({section}.{key} = {value!r}, now {new[key]!r})"
                                   f"{pin}; resume with the same settings or choose another --out")


def _pinned_as_trained(out: Path, key: str, given) -> bool:
    """Whether `given` pins train.precision to what the run's latest checkpoint trained at: what the warning of a
    resume whose `auto` now means another precision (another machine) tells the user to pass, to continue exactly."""
    if key != "train.precision":
        return False
    checkpoint = latest_checkpoint(out)
    if checkpoint is None:
        return False
    trained = read_state(checkpoint).get("precision")
    return bool(trained) and resolve_precision(given, default_device()).precision == trained
