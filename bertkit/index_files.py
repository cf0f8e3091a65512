"""An index directory's bookkeeping: index.json read and checked (untrusted input: every file name it gives must be
one bertkit writes, inside the directory), written in one rename, and the file names an append may use or must
sweep. The search itself is bertkit/index.py's; how compressed vectors are stored, bertkit/index_codec.py's."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.index_codec import PRECISIONS, REFINES, check_calibration
from bertkit.run.files import confined, fsync_dir, remove_stale, write_atomic

INDEX_FILE = "index.json"
FORMAT = "bertkit-index"
VERSION = 1
# Version 2: int8 codes turned by the DCT, or a refine copy (index_codec). Only such indexes are written as 2, so a
# bertkit from before refuses them instead of scoring unturned queries against turned codes (recall ~0.01) or
# appending a shard without its copy; every other index stays 1, readable by every bertkit.
VERSION_TURNED = 2
READABLE = (VERSION, VERSION_TURNED)
_SHARD_KEYS = ("vectors", "docs", "offsets", "count", "docs_bytes")
# The only file names an index holds (besides index.json and .lock): a name read from index.json must be one of them.
_NAMES = {"vectors": re.compile(r"shard-(\d{5,9})\.(?:f32|i8|b1)"), "refine": re.compile(r"shard-(\d{5,9})\.r(?:32|8)"),
          "docs": re.compile(r"shard-(\d{5,9})\.jsonl"),
          "offsets": re.compile(r"shard-(\d{5,9})\.offsets"), "faiss": re.compile(r"ivf-(\d{5,9})\.faiss")}
# Leftovers of an interrupted append: temporaries of any of the writers below.
_STALE = (f".{INDEX_FILE}.tmp-*", ".shard-*.tmp-*", ".ivf-*.tmp-*")


def version_of(meta: dict) -> int:
    """The format version an index with this index.json content is written as (see VERSION_TURNED)."""
    turned = (meta.get("calibration") or {}).get("rotation", "none") != "none"
    return VERSION_TURNED if turned or meta.get("refine") else VERSION


def read_meta(path: Path) -> dict:
    """index.json, checked: a clear error for anything that is not a bertkit index, and for any file name in it that
    is not one of bertkit's own names inside the index directory (a hostile or corrupt index)."""
    file = Path(path) / INDEX_FILE
    if not Path(path).is_dir():
        raise BertkitError(f"{path}: no such index (a directory made by `bertkit index build`)")
    if not file.is_file():
        raise BertkitError(f"{path}: not a bertkit index (no {INDEX_FILE})")
    try:
        meta = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BertkitError(f"{file}: corrupt ({exc})") from None
    except OSError as exc:
        raise BertkitError(f"{file}: cannot be read ({exc.strerror})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise BertkitError(f"{file}: not a bertkit index")
    if meta.get("version") not in READABLE:
        raise BertkitError(f"{file}: index format version {meta.get('version')} (this bertkit reads "
                           f"{', '.join(map(str, READABLE))}): written by a newer bertkit?")
    for key in ("dim", "count", "shards", "model", "backend"):
        if key not in meta:
            raise BertkitError(f"{file}: corrupt (no '{key}')")
    shards_ok = isinstance(meta["shards"], list) and all(
        isinstance(s, dict) and all(k in s for k in _SHARD_KEYS) and _counts(s["count"], s["docs_bytes"])
        for s in meta["shards"])
    faiss = meta.get("faiss")
    faiss_ok = meta["backend"] != "faiss" or (isinstance(faiss, dict) and all(k in faiss for k in ("file", "nlist",
                                                                                                  "nprobe"))
                                              and _counts(faiss["nlist"], faiss["nprobe"], least=1))
    model_ok = isinstance(meta["model"], dict) and isinstance(meta["model"].get("identity"), str) \
        and isinstance(meta["model"].get("path", ""), str)
    sizes_ok = _counts(meta["dim"], least=1) and _counts(meta["count"])
    vectors, refine = meta.get("vectors", "float32"), meta.get("refine")
    calibrated = "int8" in (vectors, refine)
    vectors_ok = vectors in PRECISIONS and refine in REFINES.get(vectors, ()) + (None,) and \
        (not calibrated or (sizes_ok and check_calibration(meta.get("calibration"), meta["dim"])))
    shards_ok = shards_ok and all(bool(s.get("refine")) == bool(refine) for s in meta["shards"])
    if not (shards_ok and faiss_ok and model_ok and sizes_ok and vectors_ok) or meta["backend"] not in ("exact",
                                                                                                      "faiss"):
        what = "shards" if not shards_ok else "faiss" if not faiss_ok else "model" if not model_ok else \
            "dim' / 'count" if not sizes_ok else "vectors' / 'calibration" if not vectors_ok else "backend"
        raise BertkitError(f"{file}: corrupt (malformed '{what}' entry)")
    names = [(key, shard[key]) for shard in meta["shards"] for key in shard_files(shard)]
    names += [("faiss", meta["faiss"]["file"])] if meta["backend"] == "faiss" else []
    for key, name in names:
        _own_name(Path(path), key, name)
    if len({name for _, name in names}) != len(names):
        raise BertkitError(f"{file}: corrupt (a file is named twice)")
    return meta


def _counts(*values: object, least: int = 0) -> bool:
    """Every value is an integer >= `least` (JSON true/false and floats are not)."""
    return all(isinstance(v, int) and not isinstance(v, bool) and v >= least for v in values)


def _own_name(root: Path, key: str, name: object) -> Path:
    """`root / name` for a name index.json gives: a plain name inside `root` (run.files.confined), of the form
    bertkit writes for this kind of file, and not a link leading out of the directory."""
    file = confined(root, name, f"{INDEX_FILE} names a file")
    if not _NAMES[key].fullmatch(name):
        raise BertkitError(f"{root}: {INDEX_FILE} names {key} file {name!r}, not a name bertkit writes (refused: a "
                           "hostile or corrupt index)")
    if file.is_symlink() and file.resolve().parent != root.resolve():
        raise BertkitError(f"{file}: a link to a file outside the index (refused)")
    return file


def shard_files(shard: dict) -> tuple[str, ...]:
    """The keys of a shard's entry that name its files: vectors, docs, offsets, and refine where it has one."""
    return ("vectors", "docs", "offsets") + (("refine",) if shard.get("refine") else ())


def file_number(name: str) -> int:
    """The number in a shard or FAISS file name (shard-00003.f32 -> 3); names are checked by read_meta."""
    for pattern in _NAMES.values():
        match = pattern.fullmatch(name)
        if match:
            return int(match.group(1))
    raise BertkitError(f"{name!r}: not an index file name")


def next_number(meta: dict) -> int:
    """A number above every file index.json names: the new files of an append never replace a committed one."""
    names = [shard[key] for shard in meta["shards"] for key in shard_files(shard)]
    names += [meta["faiss"]["file"]] if meta.get("faiss") else []
    return 1 + max((file_number(name) for name in names), default=-1)


def remove_leftovers(path: Path, meta: dict) -> int:
    """Delete what interrupted appends left in an index directory: temporaries, and shard / FAISS files index.json
    does not name (written, but never committed). Only under `index_lock`; returns how many went."""
    path = Path(path)
    gone = sum(remove_stale(path, pattern) for pattern in _STALE)
    named = {shard[key] for shard in meta["shards"] for key in shard_files(shard)}
    named |= {meta["faiss"]["file"]} if meta.get("faiss") else set()
    for entry in path.iterdir():
        if entry.name not in named and any(p.fullmatch(entry.name) for p in _NAMES.values()) and \
                (entry.is_symlink() or entry.is_file()):
            entry.unlink(missing_ok=True)
            gone += 1
    if gone:
        fsync_dir(path)
    return gone


def write_meta(path: Path, meta: dict) -> None:
    """Replace index.json in one rename (the commit point of a build or an append): temp, fsync, rename, fsync."""
    write_atomic(Path(path) / INDEX_FILE, json.dumps(meta, indent=2) + "\n")
