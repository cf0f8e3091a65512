"""Where bertkit reads shared data and keeps its caches, and how it writes directories without damaging them."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bertkit.errors import BertkitError


def cache_root() -> Path:
    """Tokenised/packed corpora live here: $BERTKIT_CACHE, else ~/.cache/bertkit."""
    root = Path(os.environ.get("BERTKIT_CACHE") or Path.home() / ".cache" / "bertkit")
    root.mkdir(parents=True, exist_ok=True)
    return root


def data_roots() -> list[Path]:
    """Candidate data roots in search order: $BERTKIT_DATA, ./data, ../shared/data, and the shared/data beside
    this checkout (so tests find it from any working directory)."""
    roots = [Path(os.environ["BERTKIT_DATA"])] if os.environ.get("BERTKIT_DATA") else []
    beside_checkout = Path(__file__).resolve().parents[2] / "shared" / "data"
    return roots + [Path("data"), Path("..") / "shared" / "data", beside_checkout]


def find_dataset(name: str) -> Path:
    """The folder of a registered dataset (see data/README.md), from the first data root that has it."""
    for root in data_roots():
        if (root / name).is_dir():
            return root / name
    searched = ", ".join(str(r) for r in data_roots())
    raise BertkitError(f"dataset '{name}' not found (searched {searched}; set BERTKIT_DATA to the folder holding it)")


def resolve_data_path(path: str | Path) -> Path:
    """A path as given when it exists (or is absolute), else relative to the first data root that has it, so
    recipes can name `imdb/unsup.txt.gz` or `sst2/dev.tsv`."""
    path = Path(path)
    if path.exists() or path.is_absolute():
        return path
    for root in data_roots():
        if (root / path).exists():
            return root / path
    return path


@contextlib.contextmanager
def atomic_dir(out: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory beside `out`; when the block succeeds it becomes `out` in one rename.

    An existing non-empty `out` is an error unless `overwrite`; then the old one is moved aside and removed only
    after the new one is in place. On any failure the temporary directory is deleted and `out` is untouched.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise BertkitError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise BertkitError(f"{out}: already exists and is not empty (choose another output or pass --overwrite)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; a run directory is an ordinary directory
    try:
        yield tmp
        old = None
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / out.name)
        try:
            os.replace(tmp, out)
        except BaseException:
            if old is not None:  # put the previous run back where it was
                os.replace(old / out.name, out)
            raise
        finally:
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_file(out: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `out`; when the block succeeds it becomes `out` in one rename. An existing
    `out` is an error unless `overwrite` (and is untouched on failure)."""
    out = Path(out)
    if out.is_dir():
        raise BertkitError(f"{out}: is a directory, expected a file path")
    if out.exists() and not overwrite:
        raise BertkitError(f"{out}: already exists (choose another --out or pass --overwrite)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    try:
        yield tmp
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
