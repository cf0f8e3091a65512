"""Durable, atomic file writes and confinement of names read from files.

Every commit point is: write a temporary beside the target → flush + fsync the file → rename over the target →
fsync the directory. A kill or power cut at any moment leaves the old version or the new one, never a torn file; a
full disk is a user error (one line), with the temporary removed and the old version untouched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.run.faults import fault_point

# errno values that mean "no room": full disk, quota, file size limit (RLIMIT_FSIZE once SIGXFSZ is ignored).
DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def to_json(obj, indent: int | None = 2) -> str:
    """Strict JSON (NaN / inf become null: Python's json would print `NaN`, which no JSON parser reads); a job's
    result dataclass is written as its fields, a path as its text."""
    return json.dumps(_finite(obj), indent=indent, ensure_ascii=False, allow_nan=False)


def _finite(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _finite({f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)})
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def fsync_file(path: str | Path) -> None:
    """Flush a written file's data to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | Path) -> None:
    """Make a directory's entries (a rename, a new file) durable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError as exc:  # pragma: no cover - some filesystems refuse fsync on directories
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            raise
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under `root` (bottom-up), before the rename that commits it."""
    for folder, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            fsync_file(Path(folder) / name)
        fsync_dir(folder)


def replace(src: str | Path, dst: str | Path) -> None:
    """Rename `src` over `dst` and make the rename durable."""
    os.replace(src, dst)
    fsync_dir(Path(dst).parent)


# How libraries that do their own I/O (safetensors in Rust, torch.save's zip writer, FAISS) report a full disk.
_DISK_FULL_TEXT = re.compile(r"os error (28|27|122)\b|No space left|File too large|Disk quota|failed writing file",
                             re.IGNORECASE)


def is_disk_full(exc: BaseException) -> bool:
    """True for an error that means the disk (or a file-size limit) is full."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno in DISK_FULL
    return not isinstance(exc, BertkitError) and bool(_DISK_FULL_TEXT.search(str(exc)))


class DiskFullError(BertkitError):
    """No room to write: the disk (or quota, or a file-size limit) is full."""

    def __init__(self, what: str | Path, reason: str):
        super().__init__(f"{what}: no space left on the device ({reason}); nothing was committed, the previous state "
                         "is intact — free some space and run again")
        self.reason = reason


@contextlib.contextmanager
def disk_errors(what: str | Path) -> Iterator[None]:
    """Turn a full disk (or a file-size limit) while writing `what` into one clear user error. Nested blocks report
    the outermost `what` (the directory being committed, not a temporary file inside it)."""
    try:
        yield
    except DiskFullError as exc:
        raise DiskFullError(what, exc.reason) from None
    except Exception as exc:  # safetensors' own error type is a bare Exception
        if is_disk_full(exc):
            raise DiskFullError(what, _reason(exc)) from None
        raise


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno in DISK_FULL:
        return os.strerror(exc.errno)
    return str(exc).strip().splitlines()[-1][:120]


@contextlib.contextmanager
def atomic_dir(out: str | Path, overwrite: bool = False, exists_hint: str = "choose another output or pass "
               "--overwrite") -> Iterator[Path]:
    """Yield a temporary directory beside `out`; when the block succeeds it is fsynced and becomes `out` in one
    rename.

    An existing non-empty `out` is an error unless `overwrite` (`exists_hint` says what the user can do); then the
    old one is moved aside and removed only after the new one is in place. On any failure the temporary directory
    is deleted and `out` is untouched. The emptiness check is repeated just before the rename, so a directory
    another process created meanwhile is never replaced unless `overwrite`.
    """
    # normalised first: `tok/../tok` names its parent through itself, which is gone once it is moved aside
    out = Path(os.path.abspath(out))
    if out.exists() and not out.is_dir():
        raise BertkitError(f"{out}: exists and is not a directory")
    if _non_empty(out) and not overwrite:
        raise BertkitError(f"{out}: already exists and is not empty ({exists_hint})")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    os.chmod(tmp, 0o777 & ~_UMASK)  # mkdtemp makes 0700; a run directory is an ordinary directory
    try:
        with disk_errors(out):
            yield tmp
            fsync_tree(tmp)
        old = None
        if out.exists():
            if _non_empty(out) and not overwrite:  # another process got there while we worked
                raise BertkitError(f"{out}: was created by another process meanwhile; nothing was replaced")
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
        try:
            replace(tmp, out)
        except BaseException:
            if old is not None:  # put the previous one back where it was
                os.replace(old / out.name, out)
            raise
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _non_empty(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


# read once, at import: reading it means setting it, and a file created meanwhile (another thread) would get mode
# 0666/0777 whole; a process does not change its umask while it writes runs
_UMASK = os.umask(0)
os.umask(_UMASK)


def ordinary_mode(path: str | Path) -> None:
    """Give a file the mode an ordinary one gets (0666 less the umask): safetensors writes its files 0600, so a
    run's weights were the one file colleagues on a shared machine could not read (a review)."""
    os.chmod(path, 0o666 & ~_UMASK)


@contextlib.contextmanager
def atomic_file(out: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `out`; when the block succeeds it is fsynced and becomes `out` in one rename.
    An existing `out` is an error unless `overwrite` (and is untouched on failure)."""
    out = Path(os.path.abspath(out))
    if out.is_dir():
        raise BertkitError(f"{out}: is a directory, expected a file path")
    if out.exists() and not overwrite:
        raise BertkitError(f"{out}: already exists (choose another --out or pass --overwrite)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        with disk_errors(out):
            yield tmp
            if tmp.exists():
                fsync_file(tmp)
                ordinary_mode(tmp)
            fault_point(f"commit:{out.name}")
            replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


_ENDS = 1 << 20  # bytes digested at each end of a file
_SAMPLES, _SAMPLE = 64, 1 << 12  # evenly spaced samples in between


def content_digest(path: str | Path) -> str:
    """A content digest of `path`: its size, its first and last MiB and 64 evenly spaced 4 KiB samples between
    (the corpus cache's cheap digest, widened). Any edit of a small file, and a replacement, truncation or real edit
    of a large one, changes it, for ~2.5 MiB read whatever the size. Used for a run's inputs and an index's
    shards."""
    path = Path(path)
    size = path.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with path.open("rb") as fh:
        h.update(fh.read(_ENDS))
        if size > 2 * _ENDS:
            span = size - 2 * _ENDS
            for i in range(_SAMPLES):
                fh.seek(_ENDS + span * i // _SAMPLES)
                h.update(fh.read(_SAMPLE))
        if size > _ENDS:
            fh.seek(max(_ENDS, size - _ENDS))
            h.update(fh.read())
    return h.hexdigest()[:32]


def write_atomic(out: str | Path, data: str | bytes) -> Path:
    """Write text (UTF-8) or bytes to `out` durably: temp → fsync → rename → fsync directory."""
    with atomic_file(out, overwrite=True) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return Path(out)


def copy_atomic(src: str | Path, out: str | Path) -> Path:
    """Copy a file to `out` durably (the old `out`, if any, is replaced in one rename)."""
    with atomic_file(out, overwrite=True) as tmp:
        shutil.copyfile(src, tmp)
    return Path(out)


def confined(root: str | Path, name: object, what: str) -> Path:
    """`root / name` for a plain file name read from an untrusted file (index.json, state files): no directory
    parts, no `..`, not absolute, no NUL. Anything else is refused, so a shared index or run directory can never
    make bertkit read, write or delete outside itself."""
    if (not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name
            or "\0" in name or os.path.isabs(name)):
        raise BertkitError(f"{Path(root)}: {what} {name!r} is not a plain file name inside it (refused: a hostile or "
                           "corrupt file)")
    return Path(root) / name


def restore_orphans(folder: Path) -> int:
    """Put back what an interrupted `atomic_dir(overwrite=True)` moved aside: a kill between its two renames leaves
    `X` missing and the previous version in `.X.old-*/X`. Returns how many were restored. Call before cleaning."""
    restored = 0
    for aside in folder.glob(".*.old-*"):
        name = aside.name[1:].split(".old-")[0]
        if aside.is_dir() and not aside.is_symlink() and (aside / name).exists() and not (folder / name).exists():
            replace(aside / name, folder / name)
            restored += 1
    return restored


def remove_stale(folder: Path, pattern: str) -> int:
    """Delete leftovers of interrupted writes (`.X.tmp-*` files or directories) matching `pattern` in `folder`;
    returns how many went. Only for directories this process holds the lock of."""
    gone = 0
    for path in folder.glob(pattern):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        gone += 1
    return gone
