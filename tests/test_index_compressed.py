"""Compressed indexes (`index build --vectors int8|binary`): the codecs' round trips, recall against exact float
search on a planted-neighbour set, build / add / search / info through the commands (the calibration kept by an
append), and the bad inputs."""

import json

import numpy as np
import pytest

from bertkit.errors import BertkitError
from bertkit.index import (ShardWriter, VectorIndex, build_faiss, exact_search, read_meta, shard_vectors,
                           write_faiss, write_meta)
from bertkit.index import _faiss
from bertkit.index_codec import (MAX_CLIPPED, NORMAL_BELOW, QUANTILE, calibrate, check_calibration, clipped_share,
                                 compress_shard, dct_matrix, decode, encode, int8_flat, rotate, row_bytes, unrotate)
from bertkit.jobs import search as job
from conftest import cli_error, cli_ok


def _unit(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_int8_round_trip_is_within_half_a_step_and_scores_equal_the_dequantized_product():
    vectors = _unit(1500, 24, 0)  # enough for their own quantiles (below NORMAL_BELOW the ranges are widened)
    calibration = calibrate(vectors)
    assert calibration["rotation"] == "dct" and check_calibration(calibration, 24) and calibration["sample"] == 1500
    codes = encode(vectors, "int8", calibration)
    assert codes.dtype == np.int8 and codes.min() == -128 and codes.max() == 127  # the range is used end to end
    step = (np.asarray(calibration["high"]) - np.asarray(calibration["low"])) / 255
    # each turned coordinate is off by at most half its step, so (the turn being orthonormal) is the whole vector
    error = np.linalg.norm(decode(codes, "int8", 24, calibration) - vectors, axis=1)
    assert (error <= np.linalg.norm(step / 2) + 1e-6).all()
    far = unrotate(np.full((1, 24), 5.0, np.float32), calibration)  # beyond every range once turned: clipped
    assert (encode(far, "int8", calibration) == 127).all()


def test_a_small_sample_is_calibrated_wide_enough_for_the_vectors_added_after_it():
    """A sample of n spans about its 1/(n + 1) .. n/(n + 1) quantiles: ranges from 20 vectors clipped ~10% of the
    next ones' coordinates (review, 2026-11-28: recall@10 0.43 after `index add`). Below NORMAL_BELOW they are
    widened to the normal fit's, so the vectors that come after fit."""
    vectors = _unit(4000, 24, 1)
    for n in (5, 20, 100):
        calibration = calibrate(vectors[:n])
        turned = rotate(vectors[:n], calibration).astype(np.float64)
        plain = np.quantile(turned, [QUANTILE, 1 - QUANTILE], axis=0)  # the sample's own ranges: too narrow
        assert clipped_share(vectors[n:], {**calibration, "low": list(plain[0]), "high": list(plain[1])}) > 0.01
        assert clipped_share(vectors[n:], calibration) < 0.01, n
        assert calibration["sample"] == n and np.all(np.asarray(calibration["low"]) <= plain[0])
    # from NORMAL_BELOW on, the sample's own quantiles, as before
    big = calibrate(vectors[:NORMAL_BELOW])
    own = np.quantile(rotate(vectors[:NORMAL_BELOW], big).astype(np.float64), [QUANTILE, 1 - QUANTILE], axis=0)
    np.testing.assert_allclose(big["low"], own[0]) and np.testing.assert_allclose(big["high"], own[1])
    # clipped_share counts what encode clips: a vector beyond every range, all of its coordinates
    assert clipped_share(unrotate(np.full((1, 24), 5.0, np.float32), big), big) == 1.0


def test_an_append_the_int8_ranges_would_clip_is_refused_and_adds_nothing(tmp_path, base):
    """`index add` clips new vectors into the ranges calibrated at build; where that would clip more than
    MAX_CLIPPED of their coordinates (vectors unlike the first build's), they can lose their place in the ranking,
    a float32 copy's too: one line, nothing added."""
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("\n".join(SENTENCES[:16]) + "\n")
    second.write_text("\n".join(SENTENCES[16:]) + "\n")
    idx = tmp_path / "idx"
    cli_ok("index", "build", "--model", base, first, "-o", idx, "--vectors", "int8", "--refine", "float32",
           "--no-progress")
    meta = json.loads((idx / "index.json").read_text())
    # ranges a tenth as wide about their middle: what a build on unlike vectors would have left
    low, high = np.asarray(meta["calibration"]["low"]), np.asarray(meta["calibration"]["high"])
    middle, half = (low + high) / 2, (high - low) / 20
    meta["calibration"].update(low=list(middle - half), high=list(middle + half))
    (idx / "index.json").write_text(json.dumps(meta))
    files = sorted(p.name for p in idx.iterdir() if p.name != ".lock")  # the lock file stays: that is all
    line = cli_error("index", "add", idx, second, "--no-progress")
    assert line.startswith(f"error: {idx}: ") and "% of the new vectors' coordinates fall outside the int8 ranges " \
        "calibrated from 16 of its vectors (at most 1%): clipped into them, their codes lose precision and can " \
        "lose their place in the ranking" in line
    assert "nothing added; build the index again over every file (`bertkit index build --overwrite`)" in line
    meta["calibration"]["sample"] = "16,000"  # index.json is untrusted: a traceback formatting it
    (idx / "index.json").write_text(json.dumps(meta))
    assert "calibrated when it was built" in cli_error("index", "add", idx, second, "--no-progress")
    assert VectorIndex(idx).count == 16 and sorted(p.name for p in idx.iterdir() if p.name != ".lock") == files
    assert MAX_CLIPPED == 0.01


def test_an_ivf_search_whose_probed_lists_hold_fewer_than_k_probes_more(tmp_path):
    """FAISS pads a query's results with row -1 when the lists it probes hold fewer than k vectors; they were
    dropped, so `search -k 50` gave 37 hits on a 200-vector index (review, 2026-11-28). Now every query gets
    min(k, count), as `VectorIndex.search` says, and the index's nprobe is left as it was."""
    vectors, queries, _ = _planted(n=400, d=32)
    for precision in ("float32", "int8", "binary"):
        index = _synthetic_index(tmp_path / precision, vectors, precision, nlist=50)
        ivf = index.faiss_index()
        ivf.nprobe = 1
        assert (ivf.search(queries if precision == "float32" else (
            np.packbits(queries > 0, axis=1) if precision == "binary" else rotate(queries, index.calibration)),
            50)[1] < 0).any()  # one list of ~8 vectors: FAISS alone pads
        scores, rows = index.search(queries, 50, nprobe=1)
        assert rows.shape == (len(queries), 50) and (rows >= 0).all(), precision
        assert all(len(set(r)) == 50 for r in rows)
        assert len(index.hits(scores, rows)[0]) == 50 and index.faiss_index().nprobe == 1


def test_the_int8_turn_keeps_inner_products_and_narrows_the_error_where_a_few_values_are_extreme():
    c = dct_matrix(24)
    np.testing.assert_allclose(c @ c.T, np.eye(24), atol=1e-6)  # orthonormal
    turned = {"rotation": "dct"}
    x, q = _unit(50, 24, 1), _unit(3, 24, 2)
    np.testing.assert_allclose(rotate(q, turned) @ rotate(x, turned).T, q @ x.T, atol=1e-6)
    np.testing.assert_allclose(unrotate(rotate(x, turned), turned), x, atol=1e-6)
    # rare large values (1% of them, ±6σ) widen each dimension's range, so its steps, for the many small values
    rng = np.random.default_rng(3)
    raw = rng.standard_normal((4000, 24)) + (rng.random((4000, 24)) < 0.01) * rng.choice([-6, 6], (4000, 24))
    vectors = (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)
    queries = _unit(20, 24, 4)
    plain = {"low": vectors.min(0).tolist(), "high": vectors.max(0).tolist()}  # an index from before the turn
    assert check_calibration(plain, 24) and not check_calibration({**plain, "rotation": "random"}, 24)
    errors = {}
    for name, calibration in (("plain", plain), ("turned", calibrate(vectors))):
        decoded = decode(encode(vectors, "int8", calibration), "int8", 24, calibration)
        errors[name] = np.abs(queries @ decoded.T - queries @ vectors.T).mean()
    assert errors["turned"] < 0.85 * errors["plain"]  # measured 0.74
    # the plain calibration still decodes coordinate by coordinate, as such an index was written
    step = (vectors.max(0) - vectors.min(0)) / 255
    assert (np.abs(decode(encode(vectors, "int8", plain), "int8", 24, plain) - vectors) <= step / 2 + 1e-6).all()


def test_faiss_scores_int8_codes_as_they_are_decoded():
    vectors = _unit(300, 24, 4)
    calibration = calibrate(vectors)
    codes = encode(vectors, "int8", calibration)
    queries = _unit(5, 24, 5)
    flat = int8_flat([codes[:200], codes[200:]], calibration, 24, _faiss())
    scores, rows = flat.search(np.ascontiguousarray(rotate(queries, calibration)), 7)  # the codes' basis
    reference = queries @ decode(codes, "int8", 24, calibration).T  # the float query · the dequantized codes
    assert (rows == np.argsort(-reference, axis=1, kind="stable")[:, :7]).all()
    np.testing.assert_allclose(scores, np.take_along_axis(reference, rows, 1), atol=1e-5)


def test_binary_packs_signs_and_decodes_to_unit_sign_vectors():
    vectors = _unit(10, 20, 2)  # 20 dimensions: 3 bytes, the last half used
    codes = encode(vectors, "binary")
    assert codes.shape == (10, 3) and codes.dtype == np.uint8 and row_bytes("binary", 20) == 3
    signs = decode(codes, "binary", 20)
    assert (np.sign(signs) == np.where(vectors > 0, 1, -1)).all()
    np.testing.assert_allclose(np.linalg.norm(signs, axis=1), 1, atol=1e-6)


def _synthetic_index(path, vectors, precision, nlist=None, refine=None):
    """An index directory over `vectors` (ids 0..n-1) written the way `index build` writes one (with `nlist`: a
    FAISS IVF index too; with `refine`: a finer copy on disk for rescoring)."""
    path.mkdir()
    writer = ShardWriter(path, 0, vectors.shape[1])
    writer.add(vectors, [str(i) for i in range(len(vectors))], [f"text {i}" for i in range(len(vectors))])
    shard = writer.close()
    meta = {"format": "bertkit-index", "version": 1, "model": {"path": "", "identity": "x"}, "dim": vectors.shape[1],
            "count": len(vectors), "shards": [shard], "backend": "exact", "backend_choice": "auto"}
    if precision != "float32":
        meta["vectors"] = precision
        if refine:
            meta["refine"] = refine
        if "int8" in (precision, refine):
            meta["calibration"] = calibrate(vectors)
        meta["shards"] = [compress_shard(path, shard, vectors.shape[1], precision, meta.get("calibration"), refine)]
    if nlist:
        stored = [shard_vectors(path, s, vectors.shape[1], precision) for s in meta["shards"]]
        ivf = build_faiss(stored, vectors.shape[1], nlist, precision=precision, calibration=meta.get("calibration"))
        meta["backend"] = "faiss"
        meta["faiss"] = {"file": write_faiss(ivf, path, 1), "nlist": int(ivf.nlist), "nprobe": 4}
    write_meta(path, meta)
    return VectorIndex(path)


@pytest.mark.parametrize("precision, refine", [("int8", None), ("int8", "float32"), ("binary", "int8")])
def test_equal_scores_come_in_row_order_from_compressed_vectors_too(tmp_path, precision, refine):
    """Twelve copies of one vector among others: whatever the codes, hits of equal score come back in row order, as
    exact float search returns them (FAISS's int8 search returned them in any order: d99, d63, d42 for the float
    index's d42, d63, d99; a review, 2026-11-28)."""
    vectors = _unit(300, 32, seed=5)
    copies = [7, 40, 41, 90, 120, 121, 150, 200, 230, 260, 280, 299]
    vectors[copies] = vectors[7]
    index = _synthetic_index(tmp_path / "idx", vectors, precision, refine=refine)
    scores, rows = index.search(vectors[7:8], 5, exact=True)
    assert np.all(np.diff(scores[0]) <= 1e-6)
    tied = rows[0][np.isclose(scores[0], scores[0][0], atol=1e-6)]
    assert len(tied) == 5 and list(tied) == sorted(tied) and set(tied) <= set(copies)


def _planted(n=4000, d=128, queries=50, seed=3):
    """Clustered unit vectors (as sentence embeddings are: 200 topics of 20), and queries each a noisy copy of one
    of them (its planted nearest neighbour)."""
    rng = np.random.default_rng(seed)
    centres = _unit(200, d, seed)
    vectors = centres[np.arange(n) % 200] + 0.6 * rng.standard_normal((n, d)).astype(np.float32) / np.sqrt(d)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    targets = rng.choice(n, queries, replace=False)
    noisy = vectors[targets] + 0.2 * rng.standard_normal((queries, d)).astype(np.float32) / np.sqrt(d)
    return vectors, noisy / np.linalg.norm(noisy, axis=1, keepdims=True), targets


@pytest.mark.parametrize("precision, least_recall", [("int8", 0.97), ("binary", 0.65)])
def test_recall_at_10_against_exact_float_search_and_the_planted_neighbour(tmp_path, precision, least_recall):
    vectors, queries, targets = _planted()
    _, truth = exact_search([vectors], queries, 10)
    index = _synthetic_index(tmp_path / precision, vectors, precision)
    assert (tmp_path / precision / index.shards[0]["vectors"]).stat().st_size == len(vectors) * row_bytes(
        precision, 128)
    _, rows = index.search(queries, 10)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows, truth)])
    assert recall >= least_recall, recall
    assert (rows[:, 0] == targets).mean() >= 0.95  # the planted neighbour comes first
    if precision == "binary":  # more candidates rescored: recall does not fall
        _, wider = index.search(queries, 10, rescore=16)
        assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(wider, truth)]) >= recall


@pytest.mark.parametrize("precision, refine, least_recall", [("int8", "float32", 0.999), ("binary", "int8", 0.97),
                                                          ("binary", "float32", 0.97)])
def test_a_refine_copy_on_disk_rescores_the_candidates_to_near_float_recall(tmp_path, precision, refine,
                                                                            least_recall):
    vectors, queries, _ = _planted()
    _, truth = exact_search([vectors], queries, 10)
    plain = _synthetic_index(tmp_path / "plain", vectors, precision)
    index = _synthetic_index(tmp_path / "refined", vectors, precision, refine=refine)
    shard = index.shards[0]
    assert (tmp_path / "refined" / shard["refine"]).stat().st_size == len(vectors) * row_bytes(refine, 128)
    assert not list((tmp_path / "refined").glob("*.f32"))  # a float32 copy is the float shard renamed
    # the codes in memory are the plain index's, byte for byte: the copy only adds a file on disk
    assert np.array_equal(np.asarray(index.vectors()[0]), np.asarray(plain.vectors()[0]))

    def recall(rows):
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows, truth)])
    scores, rows = index.search(queries, 10, rescore=8)
    assert recall(rows) >= least_recall and recall(rows) >= recall(plain.search(queries, 10, rescore=8)[1])
    if refine == "float32":  # the scores are the exact cosines of the rows returned
        np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", queries, vectors[rows]), atol=1e-5)
    ivf = _synthetic_index(tmp_path / "ivf", vectors, precision, nlist=16, refine=refine)
    assert recall(ivf.search(queries, 10, nprobe=16, rescore=8)[1]) >= least_recall  # every list: the same
    if refine == "float32":  # --exact with the full vectors on disk: exact float search over the copy
        assert (index.search(queries, 10, exact=True)[1] == truth).all()
    # a same-size change inside the copy (which a digest of a large file may not sample): refused, never ranked
    meta = json.loads((tmp_path / "refined" / "index.json").read_text())
    meta["shards"][0]["digests"].pop("refine")
    (tmp_path / "refined" / "index.json").write_text(json.dumps(meta))
    copy = np.memmap(tmp_path / "refined" / shard["refine"], dtype=np.float32 if refine == "float32" else np.int8,
                     mode="r+", shape=(len(vectors), 128))
    if refine == "float32":  # the first query's best row, no longer a unit vector: scored above 1
        copy[rows[0, 0]] = 3 * vectors[rows[0, 0]]
    else:  # each code at the end of its range that the (turned) query favours
        copy[rows[0, 0]] = np.where(rotate(queries[:1], index.calibration)[0] > 0, 127, -128)
    copy.flush()
    del copy
    with pytest.raises(BertkitError, match="not finite or not of unit length"):
        VectorIndex(tmp_path / "refined").search(queries[:1], 10, rescore=8)
    (tmp_path / "refined" / shard["refine"]).write_bytes(b"")  # a truncated copy is refused on opening
    with pytest.raises(BertkitError, match="truncated or corrupt"):
        VectorIndex(tmp_path / "refined")


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_faiss_ivf_over_codes_probing_every_list_finds_what_the_flat_index_finds(tmp_path, precision):
    vectors, queries, _ = _planted(n=2000, d=64)
    flat = _synthetic_index(tmp_path / "flat", vectors, precision)
    ivf = _synthetic_index(tmp_path / "ivf", vectors, precision, nlist=16)
    assert ivf.backend == "faiss" and ivf.faiss_index().ntotal == 2000
    _, truth = flat.search(queries, 10)
    _, every = ivf.search(queries, 10, nprobe=16)  # all lists: the IVF's candidates are the flat index's
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(every, truth)]) >= 0.97
    _, some = ivf.search(queries, 10)  # its default nprobe 4 of 16: approximate, still mostly the same
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(some, truth)]) >= 0.6
    _, forced = ivf.search(queries, 10, exact=True)  # --exact: the flat index over the codes
    assert (forced == truth).all()


SENTENCES = [f"sentence number {i} talks about {topic}" for i, topic in
             enumerate(["films", "actors", "music", "rain", "bread", "trains", "cats", "rivers"] * 3)]


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_build_add_search_and_info_through_the_commands(tmp_path, base, precision):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("\n".join(SENTENCES[:16]) + "\n")
    second.write_text("\n".join(SENTENCES[16:]) + "\n")
    idx = tmp_path / "idx"
    cli_ok("index", "build", "--model", base, first, "-o", idx, "--vectors", precision, "--no-progress")
    calibration = read_meta(idx).get("calibration")
    cli_ok("index", "add", idx, second, "--no-progress")
    meta = read_meta(idx)
    assert meta["vectors"] == precision and meta.get("calibration") == calibration  # the append keeps it
    assert all(s["vectors"].endswith(".i8" if precision == "int8" else ".b1") for s in meta["shards"])
    assert not list(idx.glob("*.f32"))  # the float shards were replaced, not kept beside
    info = json.loads(cli_ok("index", "info", idx, "--json").stdout)
    assert info["vectors"] == precision and info["bytes_per_vector"] == (32 if precision == "int8" else 4)
    for sentence in (SENTENCES[3], SENTENCES[20]):
        hits = job.search(job.SearchJob(idx, (sentence,), k=5)).hits[0]
        assert len(hits) == 5 and all(-1 <= h.score <= 1 for h in hits)  # cosines, shown within [-1, 1] (1.0008)
        if precision == "int8":  # a document is its own nearest neighbour, at ~1
            assert hits[0].text == sentence and hits[0].score > 0.95
        else:  # 32 dimensions are 4 bytes of signs: near-identical sentences tie; it is among the candidates
            assert sentence in [h.text for h in job.search(job.SearchJob(idx, (sentence,), k=10,
                                                                          rescore=8)).hits[0]]
    assert json.loads(cli_ok("search", idx, SENTENCES[3], "--rescore", "8", "--json").stdout)["hits"]


def test_a_refine_copy_is_built_kept_by_add_shown_by_info_and_swept_when_left_over(tmp_path, base):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("\n".join(SENTENCES[:16]) + "\n")
    second.write_text("\n".join(SENTENCES[16:]) + "\n")
    idx = tmp_path / "idx"
    built = cli_ok("index", "build", "--model", base, first, "-o", idx, "--vectors", "binary", "--refine", "int8",
                   "--no-progress")
    assert "(4 bytes each; an int8 copy of 32 bytes each on disk, for rescoring)" in " ".join(built.output.split())
    (idx / "shard-00007.r8").write_bytes(b"left by an interrupted append")
    added = cli_ok("index", "add", idx, second, "--no-progress")
    assert "removed 1 file(s)" in added.output and not (idx / "shard-00007.r8").exists()
    meta = read_meta(idx)
    assert meta["refine"] == "int8" and check_calibration(meta["calibration"], 32)
    assert [s["refine"].rsplit(".", 1)[1] for s in meta["shards"]] == ["r8", "r8"]  # the append keeps a copy
    info = json.loads(cli_ok("index", "info", idx, "--json").stdout)
    assert (info["vectors"], info["bytes_per_vector"], info["refine"], info["refine_bytes_per_vector"]) == \
        ("binary", 4, "int8", 32)
    assert "refine" not in json.loads(cli_ok("index", "info", _plain_index(tmp_path, base, first), "--json").stdout)
    assert "rescored by an int8 copy on disk (32 bytes each)" in cli_ok("index", "info", idx).stdout
    for sentence in (SENTENCES[3], SENTENCES[20]):  # ranked by the int8 copy: a document is its own best match
        hits = job.search(job.SearchJob(idx, (sentence,), k=10, rescore=8)).hits[0]
        assert hits[0].text == sentence and hits[0].score > 0.95


def _plain_index(tmp_path, base, corpus):
    out = tmp_path / "plain"
    cli_ok("index", "build", "--model", base, corpus, "-o", out, "--no-progress")
    return out


@pytest.mark.parametrize("precision", ["int8", "binary"])
def test_a_faiss_index_over_codes_is_built_appended_to_and_searched_by_the_commands(tmp_path, base, precision):
    words = ["films", "actors", "music", "rain", "bread", "trains", "cats", "rivers", "maps", "tea"]
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("\n".join(f"{a} and {b} number {i}" for i, (a, b) in enumerate(
        (a, b) for a in words for b in words)) + "\n")  # 100 texts: enough to train 4 lists
    second.write_text("\n".join(f"{w} and {w} number {i}" for i, w in enumerate(words, 100)) + "\n")
    idx = tmp_path / "idx"
    cli_ok("index", "build", "--model", base, first, "-o", idx, "--vectors", precision, "--backend", "faiss",
           "--nlist", "4", "--nprobe", "4", "--no-progress")
    cli_ok("index", "add", idx, second, "--no-progress")
    index = VectorIndex(idx)
    assert index.backend == "faiss" and index.faiss_index().ntotal == 110 and len(index.shards) == 2
    assert len(list(idx.glob("ivf-*.faiss"))) == 1  # the appended IVF file replaced the first
    hits = job.search(job.SearchJob(idx, ("tea and tea number 109",), k=10, rescore=8)).hits[0]
    assert "tea and tea number 109" in [h.text for h in hits]


def test_bad_inputs(tmp_path, base):
    corpus = tmp_path / "a.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    assert "--vectors 'int4'" in cli_error("index", "build", "--model", base, corpus, "-o", tmp_path / "i",
                                           "--vectors", "int4")
    for vectors, refine, allowed in (("float32", "float32", "none"), ("int8", "int8", "float32"),
                                     ("binary", "int4", "int8|float32")):
        line = cli_error("index", "build", "--model", base, corpus, "-o", tmp_path / "i", "--vectors", vectors,
                         "--refine", refine)
        assert f"--refine '{refine}': not for --vectors {vectors} (allowed: {allowed}" in line
    assert not (tmp_path / "i").exists()
    idx = tmp_path / "k"
    cli_ok("index", "build", "--model", base, corpus, "-o", idx, "--vectors", "int8", "--no-progress")
    assert "--rescore: must be >= 1" in cli_error("search", idx, "films", "--rescore", "0")
    meta = json.loads((idx / "index.json").read_text())
    meta["calibration"]["low"] = meta["calibration"]["low"][:-1]  # a damaged calibration
    (idx / "index.json").write_text(json.dumps(meta))
    with pytest.raises(BertkitError, match="calibration"):
        VectorIndex(idx)
