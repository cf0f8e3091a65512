"""Vector indexes: exact search equals brute force across shards and chunks, FAISS agrees with it when it probes
every list, appends commit atomically, and corrupt or foreign indexes are refused."""

import json
import shutil

import numpy as np
import pytest

import bertkit.index as index_module
from bertkit.errors import BertkitError
from bertkit.index import ShardWriter, VectorIndex, build_faiss, exact_search, write_meta
from bertkit.jobs import search as job
from conftest import cli_error, cli_ok


def _unit(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_exact_search_is_brute_force_over_shards_and_chunks(monkeypatch):
    monkeypatch.setattr(index_module, "_EXACT_CHUNK", 7)
    shards = [_unit(30, 8, 0), _unit(11, 8, 1), _unit(5, 8, 2)]
    queries = _unit(4, 8, 3)
    scores, rows = exact_search(shards, queries, k=6)
    everything = np.concatenate(shards)
    brute = np.argsort(-(queries @ everything.T), axis=1)[:, :6]
    assert (rows == brute).all()
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ everything.T, brute, 1), atol=1e-6)


def test_equal_scores_come_in_row_order_whatever_the_layout(monkeypatch):
    """Duplicate texts score alike; their order was argpartition's, so it changed with the shards and chunks
    (review, 2026-11-28). Equal scores now come by row."""
    vectors = _unit(12, 8, 4)
    queries = vectors[[3, 7]]
    for chunk, shards in ((7, [vectors, vectors, vectors]), (5, [np.concatenate([vectors, vectors]), vectors]),
                          (1 << 17, [vectors, vectors, vectors])):
        monkeypatch.setattr(index_module, "_EXACT_CHUNK", chunk)
        scores, rows = exact_search(shards, queries, k=3)
        assert rows.tolist() == [[3, 15, 27], [7, 19, 31]] and np.ptp(scores, axis=1).max() < 1e-6
    # more equal scores than k, split over shards and chunks: the lowest rows, not argpartition's pick among them
    # (300 copies of one vector, k=5: rows 280-284 from one shard, 0-4 from two; review, 2026-11-28)
    same = np.repeat(_unit(1, 8, 5), 300, axis=0)
    for chunk, shards in ((1 << 17, [same]), (1 << 17, [same[:150], same[150:]]), (7, [same[:100], same[100:]])):
        monkeypatch.setattr(index_module, "_EXACT_CHUNK", chunk)
        for k in (5, 10):
            assert exact_search(shards, same[:1], k=k)[1].tolist() == [list(range(k))]
    # copies in shards of other widths, other queries beside: a matrix product scores one vector 1.0 in one shard
    # and 1.0000001 in the other, so the copies were no tie and the wider shard's came first (a second review)
    first, second = _unit(46, 384, 11), _unit(266, 384, 12)
    first[:5] = second[:5] = first[0]
    queries = np.vstack([first[:1], _unit(5, 384, 13)])
    for shards, batch in (([np.vstack([first, second])], queries), ([first, second], queries),
                          ([first, second], queries[:1])):
        assert exact_search(shards, batch, k=5)[1][0].tolist() == [0, 1, 2, 3, 4]


def test_faiss_probing_every_list_equals_exact(tmp_path):
    vectors = _unit(600, 16, 0)
    index = build_faiss([vectors[:400], vectors[400:]], 16, nlist=8)
    index.nprobe = 8
    queries = _unit(5, 16, 1)
    _, rows = index.search(queries, 10)
    _, exact_rows = exact_search([vectors], queries, 10)
    assert (rows == exact_rows).all()


def _corpus(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


SENTENCES = [f"sentence number {i} talks about {topic}" for i, topic in
             enumerate(["films", "actors", "music", "rain", "bread", "trains", "cats", "rivers"] * 3)]


def test_the_table_shows_a_hit_on_one_line_cut_and_json_keeps_it_whole():
    """A 3,000-word document filled the terminal in `search`'s table; --json has the text as stored."""
    from bertkit.cli.sentence import SHOWN, _shown

    shown = _shown("word " * 3000 + "\nend")
    assert len(shown) == SHOWN and shown.endswith("…") and "\n" not in shown
    assert _shown("a  short\ttext\n") == "a short text"


def test_build_search_append_and_refuse_other_models(tmp_path, base, sample_tokenizer):
    # every other line with edge spaces: the index embeds and stores its stripped text, so a document's own text
    # finds it at cosine 1
    corpus = _corpus(tmp_path, "a.txt", [f"  {s} " if i % 2 else s for i, s in enumerate(SENTENCES[:12])] + [""])
    idx = tmp_path / "idx"
    result = cli_ok("index", "build", "--model", base, corpus, "-o", idx, "--no-progress")
    assert "skipped 1 empty line\n" in result.output
    hits = job.search(job.SearchJob(idx, (SENTENCES[3], SENTENCES[7]), k=3)).hits
    assert [h[0].text for h in hits] == [SENTENCES[3], SENTENCES[7]]  # a document is its own nearest neighbour
    assert hits[0][0].id == f"{corpus}:4" and hits[0][0].score == pytest.approx(1.0, abs=1e-5)
    out = cli_ok("search", idx, SENTENCES[5], "-k", "2", "--json").output
    assert json.loads(out.splitlines()[0])["hits"][0]["text"] == SENTENCES[5]

    # queries from a file (blank lines skipped, and said) answer as the same queries given as arguments
    queries = _corpus(tmp_path, "queries.txt", [SENTENCES[5], "", SENTENCES[2]])
    from_file = cli_ok("search", idx, "--input", queries, "-k", "2", "--json").stdout
    assert from_file == cli_ok("search", idx, SENTENCES[5], SENTENCES[2], "-k", "2", "--json").stdout
    assert "skipped 1 blank line" in cli_ok("search", idx, "-i", queries).output
    assert "no query: give one as an argument or a file with --input" in cli_error("search", idx)
    assert "give queries as arguments or with --input, not both" in cli_error("search", idx, "films", "-i", queries)
    described = cli_ok("index", "info", idx).stdout  # for a reader; --json is the machine's
    assert f"{idx}: 12 × 32 float32 vectors (128 bytes each, 1 shard)" in described
    assert "search: exact (every vector scored)" in described and "mean pooling" in described

    more = _corpus(tmp_path, "b.txt", SENTENCES[12:])
    cli_ok("index", "add", idx, more, "--no-progress")
    assert VectorIndex(idx).count == len(SENTENCES)
    assert job.search(job.SearchJob(idx, (SENTENCES[20],), k=1)).hits[0][0].id == f"{more}:9"
    assert "already in the index" in cli_error("index", "add", idx, more)

    # another model (same architecture, other weights) may not add to or query this index
    from bertkit.config import Config
    from bertkit.nn.model import Model
    from bertkit.run.directory import save_run
    from conftest import tiny

    other = save_run(tmp_path / "other", Model(tiny(vocab_size=400)), Config(model=tiny(vocab_size=400)),
                     base / "tokenizer.json")
    assert "not the model" in cli_error("search", idx, "films", "--model", other)
    assert "not the model" in cli_error("index", "add", idx, more, "--model", other)
    assert "--overwrite" in cli_error("index", "build", "--model", base, corpus, "-o", idx)


def test_adds_and_queries_embed_in_the_precision_the_index_was_built_in(tmp_path, base, monkeypatch):
    """index.json records the precision the index embedded in, and `index add` and `search` use it unless told
    otherwise: an index built with --precision fp32 got bf16 vectors from every add where auto picks bf16 (its
    float32 refine copy's scores drifted from the true cosines by 8e-4; a review, 2026-11-28)."""
    used = []
    real = job.SentenceEncoder

    def spy(*args, **kwargs):
        used.append(kwargs.get("precision"))
        return real(*args, **kwargs)

    idx = tmp_path / "idx"
    cli_ok("index", "build", "--model", base, _corpus(tmp_path, "a.txt", SENTENCES[:8]), "-o", idx,
           "--precision", "bf16", "--no-progress")
    assert json.loads((idx / "index.json").read_text())["model"]["precision"] == "bf16"
    monkeypatch.setattr(job, "SentenceEncoder", spy)
    cli_ok("index", "add", idx, _corpus(tmp_path, "b.txt", SENTENCES[8:12]), "--no-progress")
    cli_ok("search", idx, SENTENCES[9])
    cli_ok("index", "add", idx, _corpus(tmp_path, "c.txt", SENTENCES[12:14]), "--no-progress", "--precision", "fp32")
    cli_ok("search", idx, SENTENCES[9], "--precision", "auto")
    assert used == ["bf16", "bf16", "fp32", "auto"]


def test_auto_backend_switches_to_faiss_and_appends_keep_it(tmp_path, base, monkeypatch):
    monkeypatch.setattr(index_module, "FAISS_MIN", 20)
    small = _corpus(tmp_path, "a.txt", SENTENCES[:12])
    idx = tmp_path / "idx"
    cli_ok("index", "build", "--model", base, small, "-o", idx, "--no-progress")
    assert VectorIndex(idx).backend == "exact"
    cli_ok("index", "add", idx, _corpus(tmp_path, "b.txt", SENTENCES[12:]), "--no-progress")
    index = VectorIndex(idx)
    assert index.backend == "faiss" and index.faiss_index().ntotal == len(SENTENCES)
    nlist = index.meta["faiss"]["nlist"]
    exact = job.search(job.SearchJob(idx, tuple(SENTENCES[:4]), k=5, exact=True)).hits
    probed = job.search(job.SearchJob(idx, tuple(SENTENCES[:4]), k=5, nprobe=nlist)).hits
    assert [[h.row for h in q] for q in probed] == [[h.row for h in q] for q in exact]
    described = cli_ok("index", "info", idx).stdout
    assert f"search: FAISS IVF, {nlist} lists, {index.meta['faiss']['nprobe']} probed per query" in described
    first = index.meta["faiss"]["file"]
    cli_ok("index", "add", idx, _corpus(tmp_path, "c.txt", ["one more sentence"]), "--no-progress")
    assert VectorIndex(idx).faiss_index().ntotal == len(SENTENCES) + 1
    assert not (idx / first).exists()  # the replaced FAISS file is gone


def test_a_failed_append_leaves_the_index_whole(tmp_path, base, monkeypatch):
    idx = tmp_path / "idx"
    cli_ok("index", "build", "--model", base, _corpus(tmp_path, "a.txt", SENTENCES[:6]), "-o", idx, "--no-progress")
    before = {p.name: p.read_bytes() for p in idx.iterdir()}

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(index_module, "write_meta", fail)
    monkeypatch.setattr(job, "write_meta", fail)
    with pytest.raises(OSError):
        job.add(job.IndexAddJob(idx, (str(_corpus(tmp_path, "b.txt", SENTENCES[6:])),), progress=False))
    assert {p.name: p.read_bytes() for p in idx.iterdir() if p.name != ".lock"} == before
    assert VectorIndex(idx).count == 6


def test_corrupt_truncated_and_foreign_indexes_are_refused(tmp_path, base):
    idx = tmp_path / "idx"
    cli_ok("index", "build", "--model", base, _corpus(tmp_path, "a.txt", SENTENCES), "-o", idx, "--no-progress")
    broken = shutil.copytree(idx, tmp_path / "truncated")
    vectors = broken / "shard-00000.f32"
    vectors.write_bytes(vectors.read_bytes()[:-100])
    assert "truncated or corrupt" in cli_error("search", broken, "films")
    meta = shutil.copytree(idx, tmp_path / "meta")
    (meta / "index.json").write_text("{not json")
    assert "index.json: corrupt" in cli_error("search", meta, "films")
    assert "not a bertkit index" in cli_error("search", tmp_path, "films")
    docs = shutil.copytree(idx, tmp_path / "docs")
    (docs / "shard-00000.jsonl").write_text("garbage\n")
    assert "shard-00000.jsonl: missing, truncated or corrupt" in cli_error("search", docs, "films")
    with pytest.raises(BertkitError, match="do not fit an index of dimension"):
        VectorIndex(idx).search(np.zeros((1, 5), np.float32))
    # a query embedding that is not finite (a diverged model) is refused: it scored NaN, found nothing or called
    # the index corrupt, by the index's precision
    queries = np.ones((3, VectorIndex(idx).dim), np.float32)
    queries[1:, 0] = np.nan, np.inf
    with pytest.raises(BertkitError, match=r"2 of 3 query embedding\(s\) are not finite .*query 2 first"):
        VectorIndex(idx).search(queries)
    malformed = shutil.copytree(idx, tmp_path / "malformed")
    meta = json.loads((malformed / "index.json").read_text())
    del meta["shards"][0]["offsets"]
    (malformed / "index.json").write_text(json.dumps(meta))
    assert "corrupt (malformed 'shards' entry)" in cli_error("index", "info", malformed)


def test_queries_longer_than_the_model_and_empty_ones(tmp_path, base):
    idx = tmp_path / "idx"
    cli_ok("index", "build", "--model", base, _corpus(tmp_path, "a.txt", SENTENCES), "-o", idx, "--no-progress")
    line = cli_error("search", idx, "word " * 100)
    assert "longer than the model's 64" in line and "--truncate" in line
    assert len(job.search(job.SearchJob(idx, ("word " * 100,), k=2, truncate=True)).hits[0]) == 2
    assert "an empty query" in cli_error("search", idx, "  ")
    assert "-k: must be >= 1" in cli_error("search", idx, "films", "-k", "0")


def test_same_file_names_in_two_folders_are_different_documents(tmp_path, base):
    for folder in ("2023", "2024"):
        (tmp_path / "corpus" / folder).mkdir(parents=True)
        _corpus(tmp_path / "corpus" / folder, "part-0.txt", SENTENCES[:3])
    cli_ok("index", "build", "--model", base, tmp_path / "corpus", "-o", tmp_path / "idx", "--no-progress")
    assert len(set(VectorIndex(tmp_path / "idx").ids())) == 6


def test_shard_writer_offsets_locate_every_document(tmp_path):
    writer = ShardWriter(tmp_path, 0, 4)
    texts = ["ascii", "ünïcödé ✓", "tab\tinside", 'quote " and \\ backslash']
    writer.add(_unit(4, 4, 0), [f"id{i}" for i in range(4)], texts)
    shard = writer.close()
    write_meta(tmp_path, {"format": "bertkit-index", "version": 1, "model": {"identity": "x"}, "dim": 4, "count": 4,
                          "shards": [shard], "backend": "exact"})
    assert [d["text"] for d in VectorIndex(tmp_path).docs([3, 0, 1, 2])] == [texts[3], texts[0], texts[1], texts[2]]
    assert list(VectorIndex(tmp_path).ids()) == ["id0", "id1", "id2", "id3"]


def test_the_same_file_under_another_path_is_not_added_twice(tmp_path, base, monkeypatch):
    """Issue 38: default ids are `path:line` as the path was given, so `index add` of the file the index was built
    from, spelled another way, gave every document a second vector without a word."""
    monkeypatch.chdir(tmp_path)
    _corpus(tmp_path, "a.txt", SENTENCES[:6])
    cli_ok("index", "build", "--model", base, "a.txt", "-o", "idx", "--no-progress")
    assert "id 'a.txt:1' is already in the index" in cli_error("index", "add", "idx", "./a.txt")
    for spelling in (str(tmp_path / "a.txt"), f"../{tmp_path.name}/a.txt"):
        assert cli_error("index", "add", "idx", spelling, "--no-progress") == (
            f"error: {spelling}:1: already in the index as 'a.txt:1' (all 6 document(s) with the same file name, lines "
            "and texts: the same file under another path); nothing added: add only what the index lacks (to index "
            "these texts again, give them ids with --id-field)")
    assert VectorIndex("idx").count == 6
    # the file grew since (review, 2026-11-28: its 6 indexed lines were indexed a second time, each search then
    # finding a document twice): refused too, saying so
    _corpus(tmp_path, "a.txt", SENTENCES[:8])
    assert cli_error("index", "add", "idx", str(tmp_path / "a.txt"), "--no-progress") == (
        f"error: {tmp_path / 'a.txt'}:1: already in the index as 'a.txt:1' (6 of its 8 document(s) (the file grew "
        "since) with the same file name, lines and texts: the same file under another path); nothing added: add "
        "only what the index lacks (to index these texts again, give them ids with --id-field)")
    assert VectorIndex("idx").count == 6
    # the same name elsewhere: another file, though two of its lines are the same (a shared title, say)
    (tmp_path / "b").mkdir()
    _corpus(tmp_path / "b", "a.txt", SENTENCES[:2] + SENTENCES[12:16])
    cli_ok("index", "add", "idx", "b/a.txt", "--no-progress")
    assert VectorIndex("idx").count == 12
    # a one-line file and a longer one of its name opening with that line: a shared title, not a file that grew
    # (a review found it refused, 2026-11-28)
    (tmp_path / "r1").mkdir()
    (tmp_path / "r2").mkdir()
    _corpus(tmp_path / "r1", "README.txt", SENTENCES[16:17])
    _corpus(tmp_path / "r2", "README.txt", SENTENCES[16:17] + SENTENCES[17:19])
    cli_ok("index", "add", "idx", "r1/README.txt", "--no-progress")
    cli_ok("index", "add", "idx", "r2/README.txt", "--no-progress")
    assert VectorIndex("idx").count == 16
    # and in the other order: the longer one indexed, then a one-line file opening alike (a second review found it
    # refused as "all 1 document(s)")
    (tmp_path / "s1").mkdir()
    (tmp_path / "s2").mkdir()
    _corpus(tmp_path / "s1", "NOTES.txt", SENTENCES[19:22])
    _corpus(tmp_path / "s2", "NOTES.txt", SENTENCES[19:20])
    cli_ok("index", "add", "idx", "s1/NOTES.txt", "--no-progress")
    cli_ok("index", "add", "idx", "s2/NOTES.txt", "--no-progress")
    assert VectorIndex("idx").count == 20
    # a file of three lines or more, shrunk since, is still the same file
    _corpus(tmp_path, "shrunk.txt", SENTENCES[20:24])
    cli_ok("index", "add", "idx", "shrunk.txt", "--no-progress")
    _corpus(tmp_path, "shrunk.txt", SENTENCES[20:23])
    assert "all 3 document(s)" in cli_error("index", "add", "idx", str(tmp_path / "shrunk.txt"), "--no-progress")


def test_options_that_do_nothing_here_are_warned(tmp_path, base):
    """--nprobe / --nlist on an index that comes out exact, and --nprobe on an exact search, were taken without a
    word (issue 38): each is one yellow line, and the result is the exact one."""
    corpus = _corpus(tmp_path, "c.txt", SENTENCES[:8])
    built = cli_ok("index", "build", "--model", base, corpus, "-o", tmp_path / "idx", "--nprobe", "2",
                   "--no-progress")
    assert "--nlist / --nprobe do nothing here: 8 vectors get exact search" in " ".join(built.output.split())
    found = cli_ok("search", tmp_path / "idx", "films", "--nprobe", "3", "--json")
    assert "warning: --nprobe 3 does nothing here" in " ".join(found.output.split())
    assert "nprobe" not in " ".join(cli_ok("search", tmp_path / "idx", "films").output.split())
