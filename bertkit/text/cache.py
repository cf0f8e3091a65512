"""Caches that heal themselves: a folder of Arrow files whose manifest.json, written last, records every file's size,
row count and a digest of its first and last MiB.

Opening a cache checks all of it, so a damaged cache (truncated, emptied, overwritten, unreadable, a manifest cut
short) is rebuilt with a one-line warning instead of failing every later run until someone deletes it by hand. A
full checksum is left out on purpose: it would read every byte of a multi-GB cache on every run, while a truncation
(the usual damage: a full disk, a killed copy, a network filesystem) always changes the size.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa
from rich.console import Console

from bertkit.errors import BertkitError
from bertkit.run.files import confined

if TYPE_CHECKING:  # types only: datasets is imported where a cache is opened
    from datasets import Dataset

T = TypeVar("T")
MANIFEST = "manifest.json"
_ENDS = 1 << 20  # bytes digested at each end of a file


class Damaged(Exception):
    """A cache folder that exists but cannot be trusted; the message says why."""


def _ends_digest(path: Path) -> str:
    """sha256 of a file's first and last MiB (its Arrow schema and its last batch): cheap to check on every open."""
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        h.update(fh.read(_ENDS))
        if size > _ENDS:
            fh.seek(max(_ENDS, size - _ENDS))
            h.update(fh.read())
    return h.hexdigest()[:24]


def write_manifest(folder: Path, version: str, rows: dict[str, int], **extra) -> None:
    """Record the Arrow files (name -> row count) of a cache being built in `folder` (the temporary directory of an
    `atomic_dir`). Call it last: a folder without its manifest is an unfinished build."""
    files = {name: {"bytes": (folder / name).stat().st_size, "rows": count, "ends": _ends_digest(folder / name)}
             for name, count in rows.items()}
    manifest = {"version": version, **extra, "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def open_verified(folder: Path, version: str, read: Callable[[dict, dict[str, Dataset]], T]) -> T | None:
    """`read(manifest, datasets by file name)` of an intact cache (memory-mapped); None when there is no finished
    cache in `folder`. Raises `Damaged` when a file differs from what the manifest recorded, or when `read` finds
    the manifest lacking (KeyError, TypeError, ValueError)."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if manifest["version"] != version:
            raise Damaged(f"{MANIFEST} is of version {manifest['version']!r}, expected {version!r}")
        records = {confined(folder, name, "cache file"): (int(r["bytes"]), int(r["rows"]), str(r["ends"]))
                   for name, r in manifest["files"].items()}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, BertkitError) as exc:
        raise Damaged(f"{MANIFEST} is unreadable ({type(exc).__name__})") from None
    opened = {}
    for file, (size, rows, ends) in records.items():
        if not file.is_file():
            raise Damaged(f"{file.name} is missing")
        if file.stat().st_size != size:
            raise Damaged(f"{file.name} has {file.stat().st_size:,} bytes, {size:,} were written")
        if _ends_digest(file) != ends:
            raise Damaged(f"{file.name} changed since it was written")
        try:
            from datasets import Dataset  # here: importing a corpus module must not import datasets

            dataset = Dataset.from_file(str(file))
        except (pa.ArrowException, OSError, ValueError) as exc:  # a torn stream: ArrowInvalid and friends
            raise Damaged(f"{file.name} is unreadable ({str(exc).splitlines()[0] if str(exc) else exc!r})") from None
        if dataset.num_rows != rows:
            raise Damaged(f"{file.name} has {dataset.num_rows:,} rows, {rows:,} were written")
        opened[file.name] = dataset
    try:
        return read(manifest, opened)
    except (KeyError, TypeError, ValueError) as exc:
        raise Damaged(f"{MANIFEST} lacks {exc}") from None


def open_or_build(folder: Path, version: str, build: Callable[[Path], None],
                  read: Callable[[dict, dict[str, Dataset]], T], what: str, console: Console | None = None) -> T:
    """Open the cache in `folder` (see `open_verified`), building it first when there is none, or again when it is
    damaged (one yellow line on `console`, stderr when None). `build(folder)` must write the whole folder
    atomically (`atomic_dir`), its manifest last (`write_manifest`)."""
    try:
        opened = open_verified(folder, version, read)
    except Damaged as exc:
        (console or Console(stderr=True)).print(f"[yellow]the {what} cache {folder} is damaged ({exc}); "
                                                "rebuilding it", soft_wrap=True, highlight=False)
        opened = None
    if opened is not None:
        return opened
    build(folder)
    try:
        opened = open_verified(folder, version, read)
    except Damaged as exc:  # just written and already wrong: the disk, not the cache, is the problem
        raise BertkitError(f"{folder}: the {what} cache was rebuilt but reads back damaged ({exc}); check the disk "
                           "that holds BERTKIT_CACHE") from None
    if opened is None:  # pragma: no cover - build() always writes the manifest
        raise BertkitError(f"{folder}: the {what} cache was built but has no {MANIFEST}")
    return opened
