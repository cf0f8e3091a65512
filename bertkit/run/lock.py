"""Advisory locks: one writer per run directory (or index) for the whole life of a writing job.

The lock file sits beside the directory (`.NAME.lock`), not inside it, so it exists before the directory is
created and survives the atomic rename that commits a new run. `fcntl.flock` is released by the kernel when the
holder exits, however it exits (kill -9 included): a stale lock can never block the next run.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from bertkit.errors import BertkitError


def lock_path(directory: str | Path) -> Path:
    """Where the lock of `directory` lives: `.NAME.lock` in its real parent. Links resolved: a run reached through a
    link to it (`runs/link -> runs/run`) has its one lock, not a second writer's own."""
    directory = Path(directory)
    # a path that is not there (a new run; a dangling link, refused after the lock) locks beside its own name:
    # followed, a dangling link's target folders were created before the refusal
    directory = directory.resolve() if directory.exists() else directory.parent.resolve() / directory.name
    return directory.parent / f".{directory.name}.lock"


@contextlib.contextmanager
def locked(directory: str | Path, what: str = "run", enabled: bool | None = None) -> Iterator[None]:
    """Hold the exclusive lock of `directory` for the block; a second writer gets one clear line naming the
    holder's pid. Only the main process of a distributed launch takes it (`enabled=None`: RANK is 0 or unset)."""
    if enabled is None:
        enabled = int(os.environ.get("RANK", "0") or 0) == 0
    if not enabled:
        yield
        return
    with hold(lock_path(directory), directory, what, wait=False, remove=True):
        yield


@contextlib.contextmanager
def hold(path: Path, target: str | Path, what: str, wait: bool, remove: bool) -> Iterator[None]:
    """flock the file `path` for the block (`target` and `what` name what it guards in messages). `wait`: block
    until the holder is done, else refuse with its pid. `remove`: unlink the file on release, so no lock file is
    left behind (only a kill -9 leaves one, holding the dead pid, and the kernel has released it already)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where a folder should be, no permission: the user's path, one line
        raise BertkitError(f"{path.parent}: cannot create the folder for the {what} ({exc.strerror})") from None
    while True:
        try:  # never through a link: a planted lock file must not truncate a file elsewhere
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            why = "a link (refused)" if exc.errno == errno.ELOOP else exc.strerror
            raise BertkitError(f"{path}: cannot be opened to lock the {what} ({why})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise BertkitError(f"{path}: not a regular file (refused as the {what}'s lock)")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise BertkitError(f"{target}: the {what} is in use by another bertkit process (pid {holder}); wait "
                               "for it to finish or stop it first") from None
        if _same_file(fd, path):
            break
        os.close(fd)  # the holder removed this file as it released it: lock the one there now
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        if remove:
            with contextlib.suppress(OSError):
                os.unlink(path)  # still held: a process waiting on this inode sees it gone and retries
        os.close(fd)  # releases the lock


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open, locked `fd` is still the file at `path` (not one its holder removed meanwhile)."""
    try:
        here = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    there = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
