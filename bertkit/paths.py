"""Where bertkit reads shared data and keeps its caches (durable writes live in bertkit.run.files)."""

from __future__ import annotations

import os
from pathlib import Path

from bertkit.errors import BertkitError


def cache_root() -> Path:
    """Tokenised/packed corpora live here: $BERTKIT_CACHE, else ~/.cache/bertkit."""
    root = Path(os.environ.get("BERTKIT_CACHE") or Path.home() / ".cache" / "bertkit")
    root.mkdir(parents=True, exist_ok=True)
    return root


# the datasets data/README.md registers: a relative path under one of them names a data root's copy
DATASETS = ("imdb", "sst2", "conll2003", "stsb", "multi30k", "wikitext2", "glue", "tiny_shakespeare")


def data_roots() -> list[Path]:
    """Candidate data roots in search order: $BERTKIT_DATA, ./data, ../shared/data, and the shared/data beside
    this checkout (so tests find it from any working directory)."""
    roots = [Path(os.environ["BERTKIT_DATA"])] if os.environ.get("BERTKIT_DATA") else []
    beside_checkout = Path(__file__).resolve().parents[2] / "shared" / "data"
    return roots + [Path("data"), Path("..") / "shared" / "data", beside_checkout]


def missing_root() -> str:
    """For a "not found" message: a note that $BERTKIT_DATA names no folder (a typo there fell back to the other
    roots without a word), else nothing."""
    root = os.environ.get("BERTKIT_DATA")
    return f"; note: BERTKIT_DATA={root} is not a folder" if root and not Path(root).is_dir() else ""


def where_looked(path: str | Path) -> str:
    """For a "no such file" message about a relative path: the working directory it is relative to, and a copy a
    data root or the bertkit checkout has (the README's `data/samples/...` run from another folder); nothing for an
    absolute path. It claims no search: some commands look in the data roots, some only where they are run."""
    path = Path(path)
    if path.is_absolute():
        return ""
    copies = [root / path for root in data_roots()] + [Path(__file__).resolve().parents[1] / path]
    found = next((copy.resolve() for copy in copies if copy.exists()), None)
    there = f"; {found} has it" if found else ""
    if found is None and path.parts[0] in DATASETS:  # a fresh clone has none: say where the data root is looked for
        roots = ", ".join(str(root) for root in data_roots())
        there = (f"; no data root has it either ({roots}): the datasets are not in the repository, data/README.md "
                 "gives each one's source and layout; set BERTKIT_DATA to the folder holding them" + missing_root())
    return f" (relative to {Path.cwd()}{there})"


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


def path_list(value) -> tuple[str, ...]:
    """A job's files or directories as a tuple of strings: one str / Path is one path (a bare string would be
    iterated as one-character paths), any other iterable one path per item."""
    if isinstance(value, (str, Path)):
        return (str(value),)
    return tuple(str(v) for v in value)


def one_is_one(job, *names: str) -> None:
    """A frozen job's tuple fields `names` made tuples where one str (or Path) was given: it is one item (one query,
    one task, one model), where it was iterated as one-character items (`SearchJob(index, "guitar")` ran six
    searches)."""
    for name in names:
        value = getattr(job, name)
        object.__setattr__(job, name, (value,) if isinstance(value, (str, Path)) else tuple(value))


def need_file(path: str | Path) -> None:
    """Refuse a path that is not a file: a directory is named as one (not as "no such file")."""
    path = Path(path)
    if path.is_dir():
        raise BertkitError(f"{path}: is a directory; give a file")
    if not path.is_file():
        raise BertkitError(f"{path}: no such file{where_looked(path)}")
