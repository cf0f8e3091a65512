"""metrics.jsonl: one JSON record per logged step or evaluation, appended and flushed to disk as it is written.

A kill or a full disk can leave a torn last line; readers drop it with a warning instead of failing, and a resumed
run rewrites the file (atomically) with only the records up to its checkpoint, so lines are never duplicated.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.run.faults import fault_point
from bertkit.run.files import disk_errors, to_json, write_atomic

METRICS_FILE = "metrics.jsonl"


def _parse(path: Path) -> tuple[list[dict], list[str], bool]:
    """(records, their raw lines, whether a torn trailing line was dropped)."""
    if not path.is_file():
        return [], [], False
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    records, raw, torn = [], [], False
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            if number == len(lines):  # the last line of an interrupted append
                torn = True
                break
            raise BertkitError(f"{path}:{number}: not a JSON record ({exc}); the file is corrupt") from None
        records.append(record)
        raw.append(line)
    return records, raw, torn


def read_metrics(run_dir: str | Path) -> list[dict]:
    """Every record a run logged, in order ([] when it has none yet); a torn last line is dropped with a
    warning."""
    path = Path(run_dir) / METRICS_FILE
    records, _, torn = _parse(path)
    if torn:
        warnings.warn(f"{path}: dropped a torn last line (the run was interrupted while logging)", stacklevel=2)
    return records


def truncate_metrics(run_dir: str | Path, step: int) -> bool:
    """On resume: keep the records up to `step` (and drop a torn last line), rewriting the file atomically only
    when something changes. Returns True when a torn line was dropped."""
    path = Path(run_dir) / METRICS_FILE
    records, raw, torn = _parse(path)
    kept = [line for line, record in zip(raw, records) if record.get("step", 0) <= step]
    if torn or len(kept) != len(raw):
        write_atomic(path, "".join(line + "\n" for line in kept))
    return torn


class MetricsLog:
    """Appends records to metrics.jsonl, each flushed and fsynced, so a kill loses at most the line in flight."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / METRICS_FILE

    def append(self, record: dict) -> None:
        line = to_json(record, indent=None) + "\n"
        with disk_errors(self.path), self.path.open("a", encoding="utf-8") as fh:
            size = fh.tell()
            try:
                if os.environ.get("BERTKIT_FAULT"):  # the tests' kill in mid-line: write half, then the point
                    fh.write(line[:len(line) // 2])
                    fh.flush()
                    fault_point("metrics-append")
                    line = line[len(line) // 2:]
                fh.write(line)
                fh.flush()
                os.fsync(fh.fileno())
            except OSError:  # a full disk: leave no partial line behind
                fh.truncate(size)
                raise
