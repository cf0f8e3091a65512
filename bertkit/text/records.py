"""The input records of `embed` and `index build|add`, streamed: each text's input position and id, the counting
pass that fixes an output's size and refuses duplicate ids (keeping only an 8-byte hash per id), and chunks of
records to embed."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from bertkit.errors import BertkitError
from bertkit.text.corpus import Record, iter_records


@dataclass
class InputScan:
    """What a counting pass over the inputs found."""

    files: list[Path]
    rows: int = 0  # texts that get an embedding
    empty: int = 0  # empty texts (skipped unless keep_empty)
    empty_rows: list[int] = field(default_factory=list)  # their input positions (the first 1,000)


def input_records(files: list[Path], text_field: str, id_field: str | None) -> Iterator[tuple[int, Path, Record]]:
    """(input position, file, record) over every file in order; the position counts empty texts too."""
    position = 0
    for path in files:
        for record in iter_records(path, text_field, id_field=id_field):
            yield position, path, record
            position += 1


def record_id(path: Path, record: Record) -> str:
    """A document's id: its id field, else `path:line` (the path as the corpus was given, so files of the same
    name in different folders stay distinct)."""
    return record.id if record.id is not None else f"{path}:{record.number}"


def id_hash(key: str) -> int:
    """A 64-bit hash of an id: duplicate detection keeps these, not the ids."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def hash_all(keys: Iterable[str]) -> np.ndarray:
    """Sorted int64 hashes of `keys`, built in blocks (8 bytes per id)."""
    blocks, block = [], []
    for key in keys:
        block.append(id_hash(key))
        if len(block) == 65536:
            blocks.append(np.array(block, dtype=np.int64))
            block = []
    blocks.append(np.array(block, dtype=np.int64))
    return np.sort(np.concatenate(blocks))


def kept_records(files: list[Path], text_field: str, id_field: str | None, keep_empty: bool,
                 ) -> Iterator[tuple[int, Path, Record]]:
    """The records that get an embedding: every non-empty one (every one with `keep_empty`)."""
    for item in input_records(files, text_field, id_field):
        if keep_empty or item[2].text.strip():
            yield item


def scan(files: list[Path], text_field: str, id_field: str | None, keep_empty: bool, check_ids: bool = False,
         existing: Callable[[], Iterable[str]] | None = None,
         existing_texts: Callable[[list[int]], list[str]] | None = None) -> InputScan:
    """Count what will be embedded. With an id field (or `check_ids`: default `path:line` ids too), refuse a
    duplicate id, naming it and both places, and an id `existing()` (an index being appended to) already has; with
    default ids and `existing_texts` (the texts of its rows), also a file it holds under another spelling
    (`refuse_respelled`)."""
    result = InputScan(files)
    checking = id_field is not None or check_ids

    def counted_ids() -> Iterator[str]:  # the counting pass; yields the ids to check
        for position, path, record in input_records(files, text_field, id_field):
            if not record.text.strip():
                result.empty += 1
                if len(result.empty_rows) < 1000:
                    result.empty_rows.append(position)
                if not keep_empty:
                    continue
            result.rows += 1
            if checking:
                yield record_id(path, record)

    hashes = hash_all(counted_ids())
    if not checking:
        return result
    repeated = hashes[1:][hashes[1:] == hashes[:-1]]
    if len(repeated):  # a repeated hash: find the real duplicate (if it is not a 64-bit collision)
        suspects, first = set(repeated.tolist()), {}
        for _, path, record in kept_records(files, text_field, id_field, keep_empty):
            key = record_id(path, record)
            if id_hash(key) in suspects:
                if key in first:
                    raise BertkitError(f"{path}:{record.number}: duplicate id {key!r} (first at {first[key]}); ids "
                                       "must be unique")
                first[key] = f"{path}:{record.number}"
    if existing is not None and len(hashes):
        clash = set(hashes[np.isin(hashes, hash_all(existing()))].tolist())
        if clash:
            old_keys = {key for key in existing() if id_hash(key) in clash}
            for _, path, record in kept_records(files, text_field, id_field, keep_empty):
                key = record_id(path, record)
                if key in old_keys:
                    raise BertkitError(f"{path}:{record.number}: id {key!r} is already in the index")
    if existing is not None and existing_texts is not None and id_field is None and len(hashes):
        refuse_respelled(files, text_field, keep_empty, existing, existing_texts)
    return result


GREW_MIN = 3  # lines a file must share with an indexed one of its name (and no line differ) to be it, grown


def refuse_respelled(files: list[Path], text_field: str, keep_empty: bool, existing: Callable[[], Iterable[str]],
                     existing_texts: Callable[[list[int]], list[str]]) -> None:
    """A default id is the path as given, so the same file spelled another way (`./a.txt`, its absolute path, from
    another folder) would get new ids and every document a second vector. Refuse records whose file name, line and
    text equal an indexed document's (a file of the same name elsewhere, with other text, is not refused). Memory:
    8 bytes per new record, plus the indexed documents that share a file name and line with one."""
    def place(name: str, line: int | str) -> int:
        return id_hash(f"{name}:{line}")

    wanted = hash_all(f"{path.name}:{record.number}" for _, path, record in
                      kept_records(files, text_field, None, keep_empty))
    candidates: dict[int, list[tuple[int, str]]] = {}  # place -> (row, indexed id)
    names = {path.name for path in files}
    indexed: dict[str, int] = {}  # an indexed file of one of these names -> its documents
    for row, key in enumerate(existing()):
        old_path, _, line = key.rpartition(":")
        if old_path and line.isdigit():
            name = Path(old_path).name
            if name in names:
                indexed[old_path] = indexed.get(old_path, 0) + 1
            where = place(name, int(line))
            found = np.searchsorted(wanted, where)
            if found < len(wanted) and wanted[found] == where:
                candidates.setdefault(where, []).append((row, key))
    if not candidates:
        return
    rows = [row for entries in candidates.values() for row, _ in entries]
    texts = dict(zip(rows, existing_texts(rows)))
    # a file is the same file when each of its records that has an indexed one at its file name and line has the
    # same text: every record (the file as it was), or its indexed lines and then new ones (a file that grew since).
    # Two README.txt files sharing a title line, whose next lines differ, are two files.
    seen: dict[Path, list] = {}  # path -> [records, records with an indexed counterpart, matched, first match]
    for _, path, record in kept_records(files, text_field, None, keep_empty):
        tally = seen.setdefault(path, [0, 0, 0, None])
        tally[0] += 1
        entries = candidates.get(place(path.name, record.number), ())
        tally[1] += bool(entries)
        for row, key in entries:
            if texts[row] == record.text.strip():  # the index keeps texts stripped
                tally[2] += 1
                tally[3] = tally[3] or (record.number, key)
                break
    for path, (total, placed, matched, example) in seen.items():
        # the same file: every line as indexed (as many), or grown or shrunk with GREW_MIN lines or more in common;
        # fewer is a shared title (a one-line README.txt and a longer one opening with it: two files, in either
        # order). A file of one or two lines that grew is therefore not recognised
        same = total == indexed.get(example[1].rpartition(":")[0], 0) if example else False
        if matched and matched == placed and (matched >= GREW_MIN or (matched == total and same)):
            number, key = example
            what = (f"all {total:,} document(s)" if matched == total else
                    f"{matched:,} of its {total:,} document(s) (the file grew since)")
            raise BertkitError(f"{path}:{number}: already in the index as {key!r} ({what} with the same file name, "
                               "lines and texts: the same file under another path); nothing added: add only what "
                               "the index lacks (to index these texts again, give them ids with --id-field)")


def chunks(files: list[Path], text_field: str, id_field: str | None, keep_empty: bool, size: int,
           ) -> Iterator[list[tuple[int, Path, Record]]]:
    """The records to embed, `size` at a time, their texts stripped: what every other reader gives the model (a
    line's edge spaces are tokens of their own, and the index stores, and queries are, stripped texts)."""
    chunk = []
    for position, path, record in kept_records(files, text_field, id_field, keep_empty):
        chunk.append((position, path, replace(record, text=record.text.strip())))
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
