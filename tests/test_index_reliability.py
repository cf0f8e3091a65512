"""Indexes you can trust: a hostile index.json cannot make bertkit read, write or delete outside the index, a
missing shard is one line, every write is temp → fsync → rename → fsync directory, an interrupted append's leftovers
are cleaned by the next one, and a full disk during `index add` is one line with the previous index intact."""

import json
import os

import pytest

import bertkit.index as index_module
from bertkit.errors import BertkitError
from bertkit.index import VectorIndex
from bertkit.jobs import search as job
from conftest import bertkit_capped as _limited
from conftest import cli_error, cli_ok

SENTENCES = [f"sentence number {i} talks about {topic}" for i, topic in
             enumerate(["films", "actors", "music", "rain", "bread", "trains", "cats", "rivers"] * 3)]


def _corpus(folder, name, lines):
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _index(tmp_path, base, name="idx", lines=SENTENCES[:12], *options):
    idx = tmp_path / name
    cli_ok("index", "build", "--model", base, _corpus(tmp_path, f"{name}.txt", lines), "-o", idx, "--no-progress",
           *options)
    return idx


def _edit(idx, change):
    meta = json.loads((idx / "index.json").read_text())
    change(meta)
    (idx / "index.json").write_text(json.dumps(meta))


def _all_three_refuse(idx, more, match=None):
    """`index add`, `index info` and `search` each fail with exactly one `error:` line (exit 2)."""
    for args in (("index", "add", idx, more, "--no-progress"), ("index", "info", idx), ("search", idx, "films")):
        line = cli_error(*args)
        if match:
            assert match in line, (args, line)


def _tree(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_hostile_file_names_are_refused_and_touch_nothing_outside(tmp_path, base):
    (tmp_path / "shared").mkdir()
    idx = _index(tmp_path / "shared", base)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.faiss"
    victim.write_bytes(b"precious bytes, not an index file")
    (idx / "sub").mkdir()
    more = _corpus(tmp_path, "more.txt", SENTENCES[12:])
    pristine = (idx / "index.json").read_text()
    bad_names = [f"../../outside/{victim.name}", str(victim), f"sub/{victim.name}", "..", "", "index.json",
                 "shard-00000.f32/../../outside/victim.faiss", "notes.txt", 7]

    def faiss_at(name):
        return lambda meta: meta.update(backend="faiss", faiss={"file": name, "nlist": 1, "nprobe": 1})

    def shard_at(key, name):
        return lambda meta: meta["shards"][0].update({key: name})

    cases = [faiss_at(name) for name in bad_names]
    cases += [shard_at(key, name) for key in ("vectors", "docs", "offsets") for name in bad_names[:4]]
    for change in cases:
        (idx / "index.json").write_text(pristine)
        _edit(idx, change)
        before = _tree(tmp_path / "shared")
        _all_three_refuse(idx, more)
        assert victim.read_bytes() == b"precious bytes, not an index file"
        assert sorted(outside.iterdir()) == [victim]
        assert _tree(tmp_path / "shared") == before  # not even the index itself was written (no .lock, no shard)

    # a link in the index leading outside it is refused too; one to a file inside is followed as usual
    (idx / "index.json").write_text(pristine)
    (idx / "shard-00000.jsonl").rename(outside / "docs.jsonl")
    (idx / "shard-00000.jsonl").symlink_to(outside / "docs.jsonl")
    _all_three_refuse(idx, more, "a link to a file outside the index")
    (idx / "shard-00000.jsonl").unlink()
    (outside / "docs.jsonl").rename(idx / "docs.keep")
    (idx / "shard-00000.jsonl").symlink_to("docs.keep")
    cli_ok("index", "info", idx)

    # a .lock that is a link cannot make `index add` create or open a file elsewhere
    (idx / ".lock").unlink(missing_ok=True)
    (idx / ".lock").symlink_to(outside / "planted")
    assert "a link (refused)" in cli_error("index", "add", idx, more)
    assert not (outside / "planted").exists() and VectorIndex(idx).count == 12


def test_malformed_counts_and_duplicate_names_are_one_line(tmp_path, base):
    idx = _index(tmp_path, base)
    more = _corpus(tmp_path, "more.txt", SENTENCES[12:])
    pristine = (idx / "index.json").read_text()
    changes = [lambda m: m["shards"][0].update(count="12"), lambda m: m["shards"][0].update(docs_bytes=-1),
               lambda m: m.update(dim=0), lambda m: m.update(count=True), lambda m: m.update(model={"path": 1}),
               lambda m: m["shards"].append(dict(m["shards"][0])),
               lambda m: m.update(backend="faiss", faiss={"file": "ivf-00000.faiss", "nlist": 0, "nprobe": 1})]
    for change in changes:
        (idx / "index.json").write_text(pristine)
        _edit(idx, change)
        _all_three_refuse(idx, more, "corrupt")


def test_a_missing_or_renamed_shard_is_one_line(tmp_path, base):
    idx = _index(tmp_path, base)
    more = _corpus(tmp_path, "more.txt", SENTENCES[12:])
    for suffix in ("f32", "jsonl", "offsets"):
        (idx / f"shard-00000.{suffix}").rename(tmp_path / "moved")
        _all_three_refuse(idx, more, f"shard-00000.{suffix}: missing")
        (tmp_path / "moved").rename(idx / f"shard-00000.{suffix}")
    # renamed by hand, index.json edited to match: not a name bertkit writes (a traceback before)
    (idx / "shard-00000.f32").rename(idx / "mine.f32")
    _edit(idx, lambda meta: meta["shards"][0].update(vectors="mine.f32"))
    _all_three_refuse(idx, more, "not a name bertkit writes")


def test_a_file_removed_after_opening_is_one_line(tmp_path, base):
    idx = _index(tmp_path, base)
    index = VectorIndex(idx)
    (idx / "shard-00000.jsonl").unlink()
    with pytest.raises(index_module.BertkitError, match="shard-00000.jsonl: cannot be read"):
        index.docs([0])


def test_every_index_write_is_fsynced_before_its_rename_and_the_directory_after(tmp_path, base, monkeypatch):
    monkeypatch.setattr(index_module, "FAISS_MIN", 20)  # the append switches to FAISS: write_faiss is covered too
    idx = _index(tmp_path, base)
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.realpath(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("rename", os.path.realpath(src), os.path.realpath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    job.add(job.IndexAddJob(idx, (str(_corpus(tmp_path, "b.txt", SENTENCES[12:])),), progress=False))
    renames = [(i, e) for i, e in enumerate(events) if e[0] == "rename"]
    assert sorted(os.path.basename(e[2]) for _, e in renames) == [
        "index.json", "ivf-00001.faiss", "shard-00001.f32", "shard-00001.jsonl", "shard-00001.offsets"]
    for i, (_, src, dst) in renames:
        assert ("fsync", src) in events[:i], f"{dst} renamed before its data was fsynced"
        assert ("fsync", str(idx.resolve())) in events[i + 1:], f"the directory not fsynced after {dst}"
    assert renames[-1][1][2].endswith("index.json")  # the commit comes last
    assert VectorIndex(idx).backend == "faiss" and VectorIndex(idx).count == len(SENTENCES)


def test_an_interrupted_append_is_cleaned_by_the_next_one(tmp_path, base):
    idx = _index(tmp_path, base)
    leftovers = [".index.json.tmp-4242", ".shard-00001.f32.tmp-4242", ".ivf-00001.faiss.tmp-4242",
                 "shard-00001.f32", "shard-00001.jsonl", "ivf-00002.faiss"]  # renamed, never committed
    for name in leftovers:
        (idx / name).write_bytes(b"half written")
    # planted links where this very process will write its temporaries: removed before anything is written
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    planted = [f".index.json.tmp-{os.getpid()}", f".shard-00001.f32.tmp-{os.getpid()}"]
    for name in planted:
        (idx / name).symlink_to(victim)
    (idx / "NOTES.txt").write_text("mine")  # not bertkit's: kept
    result = cli_ok("index", "add", idx, _corpus(tmp_path, "b.txt", SENTENCES[12:]), "--no-progress")
    assert f"removed {len(leftovers) + len(planted)} file(s) an interrupted `index add` left" in result.output
    assert victim.read_bytes() == b"precious"
    names = {p.name for p in idx.iterdir()}
    assert names == {".lock", "index.json", "NOTES.txt"} | {f"shard-0000{n}.{s}" for n in (0, 1)
                                                           for s in ("f32", "jsonl", "offsets")}
    assert job.search(job.SearchJob(idx, (SENTENCES[20],), k=1)).hits[0][0].text == SENTENCES[20]




def _one_error_line(result):
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "no space left" in lines[0], result.stderr
    return lines[0]


@pytest.mark.parametrize("backend", ["exact", "faiss"])
def test_a_full_disk_during_index_add_is_one_line_and_keeps_the_index(tmp_path, base, backend):
    lines = [f"{i} {s}" for i in range(5) for s in SENTENCES]  # 120: enough to train a small IVF index
    idx = _index(tmp_path, base, "idx", lines, "--backend", backend, "--nlist", "4") if backend == "faiss" else \
        _index(tmp_path, base, "idx", lines)
    before = _tree(idx)
    # exact: the new shard's vectors (300 x 32 floats) outgrow 12 kB; faiss: a 10-row shard fits, the FAISS file
    # of all 130 rows (~18 kB) does not
    more = [f"another text {i} about {SENTENCES[i % 24]}" for i in range(300 if backend == "exact" else 10)]
    result = _limited(["index", "add", idx, _corpus(tmp_path, "more.txt", more), "--no-progress"], 12_288, tmp_path)
    _one_error_line(result)
    assert {k: v for k, v in _tree(idx).items() if k.name != ".lock"} == before
    assert not [p for p in idx.iterdir() if ".tmp" in p.name]
    assert VectorIndex(idx).count == len(lines)
    assert job.search(job.SearchJob(idx, (lines[7],), k=1)).hits[0][0].text == lines[7]


COMPRESSED = [("int8", None), ("binary", "int8"), ("int8", "float32")]


def _options(vectors, refine):
    return ["--vectors", vectors] + (["--refine", refine] if refine else [])


@pytest.mark.parametrize("vectors, refine", COMPRESSED)
def test_an_append_that_fails_after_its_commit_keeps_the_files_it_committed(tmp_path, base, monkeypatch, vectors,
                                                                            refine):
    """The failure handler asks whether index.json already names the new shard: by its documents file, which
    compression never renames (by its float file it never found one, and deleted committed .i8 / .b1 files)."""
    idx = _index(tmp_path, base, "idx", SENTENCES[:12], *_options(vectors, refine))
    real = job.write_meta

    def commit_then_fail(path, meta):  # the rename done, the directory's fsync after it failing
        real(path, meta)
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(job, "write_meta", commit_then_fail)
    with pytest.raises(OSError):
        job.add(job.IndexAddJob(idx, (str(_corpus(tmp_path, "more.txt", SENTENCES[12:])),), progress=False))
    assert VectorIndex(idx).count == 24  # index.json names the new shard, and its files are all there


@pytest.mark.parametrize("vectors, refine", COMPRESSED)
def test_an_append_that_fails_while_compressing_leaves_no_file_behind(tmp_path, base, monkeypatch, vectors, refine):
    import bertkit.index_codec as codec

    idx = _index(tmp_path, base, "idx", SENTENCES[:12], *_options(vectors, refine))
    before = _tree(idx)

    def no_space(path):  # late in compress_shard: its codes (and a float32 copy, renamed) are written
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(codec, "content_digest", no_space)
    with pytest.raises((OSError, BertkitError)):  # (a full disk: one line, through disk_errors)
        job.add(job.IndexAddJob(idx, (str(_corpus(tmp_path, "more.txt", SENTENCES[12:])),), progress=False))
    assert {k: v for k, v in _tree(idx).items() if k.name != ".lock"} == before  # the largest, .r32, too


def test_a_turned_or_refined_index_is_format_2_which_older_bertkits_refuse(tmp_path, base):
    versions = {}
    for name, options in (("plain", []), ("binary", ["--vectors", "binary"]), ("int8", ["--vectors", "int8"]),
                          ("refined", ["--vectors", "binary", "--refine", "float32"])):
        versions[name] = json.loads((_index(tmp_path, base, name, SENTENCES[:12], *options) / "index.json")
                                    .read_text())["version"]
    # an older bertkit reads only 1: the int8 turn and the refine copy would be misread or half-appended there
    assert versions == {"plain": 1, "binary": 1, "int8": 2, "refined": 2}
    meta = json.loads((tmp_path / "int8" / "index.json").read_text())
    (tmp_path / "int8" / "index.json").write_text(json.dumps({**meta, "version": 3}))
    assert "index format version 3 (this bertkit reads 1, 2)" in cli_error("index", "info", tmp_path / "int8")
