"""No command destroys what it does not own (issue 38): `--overwrite` replaces only an output of its own kind that
bertkit wrote, outputs never nest in runs, a target in use is refused with the holder's pid, no lock file is left
behind, a run killed before its first checkpoint restarts from the same base model, a resume on changed inputs is
refused, index contents are verified, and a model that cannot fit is refused before its run directory exists."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.torch import load_file, save_file

from bertkit.errors import BertkitError
from bertkit.index import index_lock
from bertkit.run.lock import lock_path, locked
from bertkit.run.outputs import INDEX, PREDICTIONS, ROWS_NPY, TEXT, TOKENIZER, claim, describe
from bertkit.tasks.classify import ClassifyObjective
from conftest import cli_error, cli_ok, interrupted, repeated_corpus

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "samples" / "corpus.txt"
DOCS = [f"document {i} is about {topic}" for i, topic in enumerate(["films", "rain", "bread", "cats"] * 3)]


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _docs(folder: Path, name: str = "docs.txt") -> Path:
    path = folder / name
    path.write_text("\n".join(DOCS) + "\n")
    return path


def _index(tmp_path, base, name="idx") -> Path:
    cli_ok("index", "build", "--model", base, _docs(tmp_path), "-o", tmp_path / name, "--no-progress")
    return tmp_path / name


def test_index_build_overwrite_replaces_only_an_index(tmp_path, base):
    docs = _docs(tmp_path)
    thesis = tmp_path / "mine"
    thesis.mkdir()
    (thesis / "thesis.tex").write_text("\\section{mine}")
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    _docs(corpus_dir)
    run = tmp_path / "finished"
    shutil.copytree(base, run)
    before = {p: _tree(p) for p in (base, run, thesis, corpus_dir)}
    build = ("index", "build", "--model", base, "--no-progress", "--overwrite")
    assert "is a bertkit run" in cli_error(*build, docs, "-o", run)
    assert "this command's own input" in cli_error(*build, docs, "-o", base)  # its own model
    assert "files bertkit did not write (thesis.tex)" in cli_error(*build, docs, "-o", thesis)
    assert "this command's own input" in cli_error(*build, corpus_dir, "-o", corpus_dir)
    assert {p: _tree(p) for p in before} == before  # every refusal left its target byte-identical
    idx = _index(tmp_path, base)
    cli_ok(*build, docs, "-o", idx)  # an index over an index: replaced
    assert json.loads((idx / "index.json").read_text())["count"] == len(DOCS)


def test_tokenizer_and_predict_overwrite_refuse_other_kinds(tmp_path, base):
    corpus = repeated_corpus(tmp_path / "c.txt", 3)
    before = _tree(base)
    train = ("tokenizer", "train", corpus, "--vocab-size", "300", "--overwrite")
    assert "is a bertkit run" in cli_error(*train, "-o", base)
    cli_ok(*train, "-o", tmp_path / "tok")  # the fixture's tokenizer folder: replaced by a new tokenizer
    assert json.loads((tmp_path / "tok" / "tokenizer.json").read_text())["model"]["type"] == "BPE"

    inputs = tmp_path / "in.txt"
    inputs.write_text("a film\n")
    user = tmp_path / "notes.txt"
    user.write_text("my own notes, not predictions\n")
    predict = ("predict", "--model", base, inputs, "--overwrite", "-o")
    assert "inside the run" in cli_error(*predict, base / "config.json")
    assert "a text file, not a predictions file" in cli_error(*predict, user)
    assert "this command's own input" in cli_error(*predict, inputs)
    assert _tree(base) == before and user.read_text() == "my own notes, not predictions\n"


def test_the_kinds_recognise_what_bertkit_wrote(tmp_path, base):
    idx = _index(tmp_path, base)
    assert INDEX.matches(idx) and not INDEX.matches(base) and TOKENIZER.matches(tmp_path / "tok")
    (idx / "extra.txt").write_text("a file the user put there")
    assert not INDEX.matches(idx) and "did not write (extra.txt)" in describe(idx)
    records = tmp_path / "p.jsonl"
    records.write_text('{"text": "a", "label": "positive", "score": 0.9, "scores": {"positive": 0.9}}\n')
    assert PREDICTIONS.matches(records) and not TEXT.matches(records) and describe(records) == "a predictions file"
    task_file = tmp_path / "train.jsonl"
    task_file.write_text('{"text": "a film", "label": "positive"}\n')
    assert not PREDICTIONS.matches(task_file)  # a labelled task file is never taken for predictions
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"text": "word " * 20000, "entities": []}) + "\n")  # a first line past the peek
    assert PREDICTIONS.matches(long)
    plain = tmp_path / "t.txt"
    plain.write_text("ein Satz\n")
    assert TEXT.matches(plain) and not PREDICTIONS.matches(plain)
    blob = tmp_path / "b.bin"
    blob.write_bytes(b"\0\1\2")
    assert describe(blob) == "a file bertkit did not write"
    # a 1-D int64 array is a row map only under a row map's name (a user's np.arange was refused as "a row map")
    import numpy as np
    np.save(tmp_path / "mine.npy", np.arange(3))
    np.save(tmp_path / "out.rows.npy", np.arange(3))
    assert describe(tmp_path / "mine.npy") == "a file bertkit did not write"
    assert ROWS_NPY.matches(tmp_path / "out.rows.npy")
    claim(tmp_path / "new.jsonl", PREDICTIONS, overwrite=False)  # a new path is always fine


@pytest.mark.parametrize("inside", ["checkpoints/step-40/sub", "checkpoints/step-99", "sub"])
def test_outputs_never_nest_in_a_run(tmp_path, base, inside):
    (base / "checkpoints" / "step-40").mkdir(parents=True)
    before = _tree(base)
    line = cli_error("pretrain", "--recipe", "tiny", "--corpus", repeated_corpus(tmp_path / "c.txt", 3),
                     "--out", base / inside, "--no-progress")
    assert f"inside the run {base}" in line
    assert "inside the run" in cli_error("tokenizer", "train", tmp_path / "c.txt", "-o", base / inside)
    assert "inside the run" in cli_error("embed", "--model", base, tmp_path / "c.txt", "-o", base / "x.npy")
    assert _tree(base) == before


def test_nesting_sees_through_links_and_dot_dots_and_creates_nothing(tmp_path, base):
    (base / "checkpoints").mkdir()
    (tmp_path / "ck").symlink_to(base / "checkpoints")
    before = sorted(p.relative_to(base) for p in base.rglob("*"))  # folders too
    assert f"inside the run {base}" in cli_error("tokenizer", "train", SAMPLE, "-o", tmp_path / "ck" / "step-99")
    assert "inside the run" in cli_error("tokenizer", "train", SAMPLE, "-o", base / "new" / "deeper" / "tok")
    assert sorted(p.relative_to(base) for p in base.rglob("*")) == before  # not even an empty folder or a lock
    cli_ok("tokenizer", "train", SAMPLE, "-o", base / ".." / "beside" / "tok", "--vocab-size", "300")


def test_an_input_named_from_the_data_root_is_an_input(tmp_path, monkeypatch):
    root = tmp_path / "data"
    (root / "mt").mkdir(parents=True)
    (root / "mt" / "test.de").write_text("Ein Satz.\n")
    monkeypatch.setenv("BERTKIT_DATA", str(root))
    with pytest.raises(BertkitError, match="this command's own input"):
        claim(root / "mt" / "test.de", TEXT, overwrite=True, inputs=("mt/test.de",))


def test_a_target_in_use_is_refused_with_the_holders_pid(tmp_path, base):
    docs = _docs(tmp_path)
    training = tmp_path / "runs" / "ft"
    with locked(training):  # a finetune writing there (before its config.json exists)
        line = cli_error("index", "build", "--model", base, docs, "-o", training, "--no-progress")
    assert "in use by another bertkit process (pid" in line and not training.exists()
    idx = _index(tmp_path, base)
    with index_lock(idx):  # an `index add` committing
        line = cli_error("index", "build", "--model", base, docs, "-o", idx, "--overwrite", "--no-progress")
    assert "the index is in use by another bertkit process (pid" in line


def test_a_run_reached_through_a_link_has_the_runs_own_lock(tmp_path):
    """The lock sat beside the path as given, so `--out runs/link` (a link to runs/run) took its own lock and a
    second writer trained beside the first, metrics.jsonl getting every step twice (review, 2026-11-28)."""
    (tmp_path / "runs" / "run").mkdir(parents=True)
    (tmp_path / "runs" / "link").symlink_to("run")
    assert lock_path(tmp_path / "runs" / "link") == lock_path(tmp_path / "runs" / "run")
    with locked(tmp_path / "runs" / "run"):
        with pytest.raises(BertkitError, match="in use by another bertkit process"):
            with locked(tmp_path / "runs" / "link"):
                pass


def test_a_new_run_into_a_link_is_one_line_before_any_work(tmp_path):
    """--out a dangling link ran the whole job and ended in a traceback at the rename; a link to an empty folder was
    replaced by a real folder without a word (review, 2026-11-28)."""
    corpus = repeated_corpus(tmp_path / "c.txt", 3)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "deeper" / "run")
    (tmp_path / "empty").mkdir()
    (tmp_path / "to-empty").symlink_to(tmp_path / "empty")
    (tmp_path / "under-a-file").symlink_to(corpus / "run")
    for link, said in (("dangling", ", which is not there; "), ("to-empty", "; "),
                       ("under-a-file", ", which is not there; ")):
        line = cli_error("pretrain", "--recipe", "tiny", "--corpus", corpus, "--out", tmp_path / link,
                         "--no-progress")
        assert line == (f"error: {tmp_path / link}: a link to {os.readlink(tmp_path / link)}{said}a new run "
                        "replaces what is at its path: give --out the folder itself")
        assert (tmp_path / link).is_symlink()
    # the lock was taken at the link's resolved target: its folders were created first (then a traceback where a
    # file stood in the way)
    assert not (tmp_path / "nowhere").exists()
    line = cli_error("pretrain", "--recipe", "tiny", "--corpus", corpus, "--out", corpus / "run", "--no-progress")
    assert line == f"error: {corpus}: cannot create the folder for the run (File exists)"


def test_cleaning_a_run_never_takes_another_runs_files_for_its_own(tmp_path):
    """`clean_stale` globbed the run's name: resuming `exp[1]` removed `exp1`'s temporary folder (a run being
    created) and its moved-aside previous version (review, 2026-11-28)."""
    from bertkit.run.checkpoints import clean_stale

    (tmp_path / "exp[1]").mkdir()
    others = [tmp_path / ".exp1.tmp-inprogress", tmp_path / ".exp1.old-abcd"]
    mine = tmp_path / ".exp[1].tmp-killed"
    for folder in (*others, mine):
        folder.mkdir()
    assert clean_stale(tmp_path / "exp[1]") == 1
    assert all(folder.is_dir() for folder in others) and not mine.exists()


def test_no_lock_file_is_left_behind(tmp_path, base):
    corpus = repeated_corpus(tmp_path / "c.txt", 3)
    cli_ok("tokenizer", "train", corpus, "-o", tmp_path / "t2", "--vocab-size", "300")
    cli_error("tokenizer", "train", corpus, "-o", tmp_path / "t2", "--vocab-size", "300")  # refused: exists
    cli_error("pretrain", "--recipe", "tiny", "--corpus", corpus, "--out", base, "--no-progress")  # a run there
    assert not lock_path(tmp_path / "t2").exists() and not lock_path(base).exists()
    assert not list(tmp_path.glob(".*.lock"))


def _reviews(path: Path, n: int) -> Path:
    words = {"positive": "great", "negative": "awful", "neutral": "okay"}
    path.write_text("review,stars\n" + "".join(f"the film was {w} number {i},{lab}\n" for i, (lab, w) in
                                              enumerate(list(words.items()) * (n // 3))))
    return path


def _curve(run: Path) -> list:
    keep = ("step", "kind", "loss", "val_loss", "accuracy", "lr")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: r[k] for k in keep if k in r} for r in map(json.loads, lines)]


def test_a_finetune_killed_before_its_first_checkpoint_restarts_from_its_base(tmp_path, base):
    train = _reviews(tmp_path / "train.csv", 60)
    args = ["finetune", "classify", "--train", train, "--text-column", "review", "--label-column", "stars",
            "--max-steps", "6", "--no-progress", "--set", "batch_size=8", "--set", "learning_rate=3e-3",
            "--set", "log_every=1", "--set", "eval_every=3", "--set", "save_every=100", "--set", "warmup_ratio=0"]
    cli_ok(*args, "--model", base, "--out", tmp_path / "straight")
    for resumed, model in (("with-model", ("--model", base)), ("without", ())):
        interrupted(ClassifyObjective, 2, *args, "--model", base, "--out", tmp_path / resumed)  # save_every=100
        assert not (tmp_path / resumed / "checkpoints" / "latest").exists()
        result = cli_ok(*args, *model, "--out", tmp_path / resumed, "--resume")
        assert "no checkpoint yet" in " ".join(result.output.split())
        assert _curve(tmp_path / resumed) == _curve(tmp_path / "straight")  # the base, not a random backbone
    other = tmp_path / "other-base"
    shutil.copytree(base, other)
    weights = load_file(other / "model.safetensors")
    save_file({k: v + 1 for k, v in weights.items()}, other / "model.safetensors")  # another model
    moved = tmp_path / "moved-base"
    shutil.copytree(base, moved)  # the same weights elsewhere: accepted
    interrupted(ClassifyObjective, 2, *args, "--model", base, "--out", tmp_path / "third")
    line = cli_error(*args, "--model", other, "--out", tmp_path / "third", "--resume")
    assert f"began from {base.resolve()}, not {other} (other weights)" in line
    cli_ok(*args, "--model", moved, "--out", tmp_path / "third", "--resume")
    assert _curve(tmp_path / "third") == _curve(tmp_path / "straight")


def test_a_resume_on_changed_content_is_refused_or_recorded(tmp_path, base):
    corpus = repeated_corpus(tmp_path / "c.txt", 6)
    args = ["pretrain", "--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set",
            "batch_size=4", "--set", "min_frequency=1", "--set", "save_every=2", "--set", "eval_every=2",
            "--corpus", corpus, "--out", tmp_path / "run", "--no-progress"]
    cli_ok(*args, "--max-steps", "2")
    recorded = json.loads((tmp_path / "run" / "inputs.json").read_text())
    assert recorded["files"]["data.corpus"][0]["path"] == str(corpus.resolve())
    text = corpus.read_text()
    corpus.write_text(text.replace("the", "a"))  # other text, a different size
    before = _tree(tmp_path / "run")
    line = cli_error(*args, "--max-steps", "4", "--resume")
    assert "data.corpus changed since the run began" in line and "--accept-changed-data" in line
    assert _tree(tmp_path / "run") == before
    corpus.write_text(text[::-1])  # same size, other bytes
    assert "same size, other bytes" in cli_error(*args, "--max-steps", "4", "--resume")
    result = cli_ok(*args, "--max-steps", "4", "--resume", "--accept-changed-data")
    assert "warning: data.corpus changed" in " ".join(result.output.split())
    assert json.loads((tmp_path / "run" / "inputs.json").read_text())["changes"][0]["role"] == "data.corpus"


def test_an_accepted_change_is_recorded_only_once_the_resume_passes_its_every_check(tmp_path):
    """--accept-changed-data on a resume refused later (a limit below the checkpoint's step): inputs.json kept the
    change, so the next resume without the option took the new content unasked (review, 2026-11-28)."""
    from bertkit.tasks.mlm import MLMObjective

    corpus = repeated_corpus(tmp_path / "c.txt", 6)
    args = ["pretrain", "--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set",
            "batch_size=4", "--set", "min_frequency=1", "--set", "save_every=2", "--set", "eval_every=2",
            "--corpus", corpus, "--out", tmp_path / "run", "--no-progress"]
    interrupted(MLMObjective, 3, *args, "--max-steps", "6")  # the checkpoint at step 2
    corpus.write_text(corpus.read_text().replace("the", "a"))
    before = _tree(tmp_path / "run")
    line = cli_error(*args, "--max-steps", "1", "--resume", "--accept-changed-data")
    assert "at step 2 already" in line and _tree(tmp_path / "run") == before
    assert "data.corpus changed since the run began" in cli_error(*args, "--resume")
    cli_ok(*args, "--resume", "--accept-changed-data")
    assert json.loads((tmp_path / "run" / "inputs.json").read_text())["changes"][0]["role"] == "data.corpus"


def test_a_run_stored_with_a_key_its_command_never_reads_resumes(tmp_path, base):
    """A run written before such keys were refused (`--set objective=clm` on a finetune) stored one: the plain
    resume said "holds a different run", and the --set that would match it was refused, a dead end (review,
    2026-11-28). Keys the command never reads are not compared."""
    train = _reviews(tmp_path / "train.csv", 30)
    args = ["finetune", "classify", "--model", base, "--train", train, "--text-column", "review", "--label-column",
            "stars", "--no-progress", "--set", "save_every=1", "--out", tmp_path / "ft"]
    interrupted(ClassifyObjective, 2, *args, "--max-steps", "3")
    stored = json.loads((tmp_path / "ft" / "config.json").read_text())
    stored["train"]["objective"] = "clm"  # as that bertkit wrote it
    (tmp_path / "ft" / "config.json").write_text(json.dumps(stored))
    cli_ok(*args, "--max-steps", "3", "--resume")
    assert json.loads((tmp_path / "ft" / "results.json").read_text())["steps"] == 3
    # a key the command reads is still compared
    (tmp_path / "ft" / "results.json").unlink()
    line = cli_error(*args, "--max-steps", "3", "--resume", "--set", "weight_decay=0.5")
    assert "holds a different run (train.weight_decay" in line


def test_a_run_that_stored_fractions_as_python_printed_them_resumes_on_its_own_file(tmp_path, base):
    """Before 2026-11-28 a label "0.50" was stored as "0.5" (through a float); the same file now reads "0.50", and
    the resume was refused: "labels 0.50 are not in labels.json; resume with the training file the run began
    with", which it was (a review). The file's labels are taken as the run spelled them, before the split."""
    train = tmp_path / "fractions.csv"
    train.write_text("review,stars\n" + "".join(f"the film was {w} number {i},{lab}\n" for i, (w, lab) in
                                              enumerate([("great", "1.50"), ("awful", "0.50")] * 15)))
    args = ["finetune", "classify", "--model", base, "--train", train, "--text-column", "review", "--label-column",
            "stars", "--no-progress", "--set", "save_every=1", "--out", tmp_path / "ft"]
    cli_ok(*args, "--max-steps", "3", "--out", tmp_path / "straight")
    interrupted(ClassifyObjective, 2, *args, "--max-steps", "3")
    labels = json.loads((tmp_path / "ft" / "labels.json").read_text())
    assert labels["labels"] == ["0.50", "1.50"]
    (tmp_path / "ft" / "labels.json").write_text(json.dumps({**labels, "labels": ["0.5", "1.5"]}))  # as then
    cli_ok(*args, "--max-steps", "3", "--resume")
    assert _curve(tmp_path / "ft") == _curve(tmp_path / "straight")


def test_a_finetune_resume_on_a_changed_training_file_is_refused(tmp_path, base):
    train = _reviews(tmp_path / "train.csv", 30)
    args = ["finetune", "classify", "--model", base, "--train", train, "--text-column", "review", "--label-column",
            "stars", "--max-steps", "2", "--no-progress", "--set", "save_every=1", "--out", tmp_path / "ft"]
    cli_ok(*args)
    _reviews(train, 33)
    line = cli_error(*args[:-4], "--max-steps", "3", "--out", tmp_path / "ft", "--resume")
    assert "task.train_file changed since the run began" in line


def test_index_contents_are_verified_and_non_finite_vectors_refused(tmp_path, base, monkeypatch):
    idx = _index(tmp_path, base)
    shard = idx / "shard-00000.f32"
    good = shard.read_bytes()
    for bad in (np.full(len(good) // 4, np.nan, dtype=np.float32).tobytes(),
                np.ones(len(good) // 4, dtype=np.float32).tobytes()):
        shard.write_bytes(bad)  # the same size: only the digest tells
        for args in (("search", idx, "films"), ("index", "info", idx)):
            assert "its content is not what index.json recorded" in cli_error(*args)
    shard.write_bytes(good)
    cli_ok("search", idx, "films")

    import bertkit.embedding as embedding

    real = embedding.SentenceEncoder.encode

    def nan_rows(self, texts, *a, **k):
        vectors = real(self, texts, *a, **k)
        vectors[0, 0] = np.nan
        return vectors

    monkeypatch.setattr(embedding.SentenceEncoder, "encode", nan_rows)
    line = cli_error("index", "build", "--model", base, _docs(tmp_path), "-o", tmp_path / "nan", "--no-progress")
    assert "non-finite embedding" in line and not (tmp_path / "nan").exists()


def test_a_model_that_cannot_fit_is_refused_before_its_run_exists(tmp_path):
    corpus = repeated_corpus(tmp_path / "c.txt", 3)
    line = cli_error("pretrain", "--recipe", "tiny", "--set", "positions=learned", "--set", "max_len=1000000000",
                     "--set", "vocab_size=400", "--set", "min_frequency=1", "--corpus", corpus,
                     "--out", tmp_path / "huge", "--no-progress")
    assert "cannot be trained here" in line and "GiB" in line
    assert not (tmp_path / "huge").exists()


def test_probe_findings_dot_dot_sidecars_plot_and_import_hints(tmp_path, base):
    """A hostile probe of the first version: `DIR/../DIR --overwrite` moved the old output aside and died with a
    traceback; a user's file beside an absent embeddings output was removed as a stale sidecar; the refusals of
    `plot` and `import-hf` named options those commands do not have."""
    corpus = repeated_corpus(tmp_path / "c.txt", 3)
    tok = tmp_path / "tok"
    cli_ok("tokenizer", "train", corpus, "-o", f"{tok}/../tok", "--vocab-size", "300", "--overwrite")
    assert TOKENIZER.matches(tok) and not list(tmp_path.glob(".tok.*"))

    mine = tmp_path / "emb.rows.npy"
    np.save(mine, np.arange(5))
    line = cli_error("embed", "--model", base, corpus, "-o", tmp_path / "emb.npy", "--overwrite")
    assert "emb.rows.npy: already exists beside" in line and np.load(mine).tolist() == [0, 1, 2, 3, 4]

    notes = tmp_path / "notes.png"  # named .png, but not a plot
    notes.write_text("mine")
    (base / "metrics.jsonl").write_text('{"step": 1, "kind": "train", "loss": 1.0}\n')
    line = cli_error("plot", base, "-o", notes)
    assert "`plot` replaces only a PNG plot" in line and "--overwrite" not in line and notes.read_text() == "mine"
    text = tmp_path / "notes.txt"  # another suffix: refused by it (plot writes PNG bytes only)
    text.write_text("mine")
    assert "plot writes a PNG" in cli_error("plot", base, "-o", text) and text.read_text() == "mine"
    # a trained run is not import-hf's to replace: --overwrite, which would be refused too, is not offered (it was,
    # as for an output --overwrite does replace; a review, 2026-11-28), nor for a text file given as a tokenizer -o
    line = cli_error("import-hf", tmp_path / "tok", base)
    assert "which --overwrite does not replace: choose another path" in line and "pass --overwrite" not in line
    line = cli_error("tokenizer", "train", corpus, "-o", text, "--vocab-size", "300")
    assert "it is a text file, which --overwrite does not replace" in line and text.read_text() == "mine"


def test_a_shard_changed_where_its_digest_does_not_look_is_caught_by_search(tmp_path, base):
    idx = _index(tmp_path, base)
    shard = idx / "shard-00000.f32"
    vectors = np.fromfile(shard, dtype=np.float32)
    vectors[5] = 1e30  # one value of one row
    vectors.tofile(shard)
    meta = json.loads((idx / "index.json").read_text())
    from bertkit.run.files import content_digest

    meta["shards"][0]["digests"]["vectors"] = content_digest(shard)  # as if the digest's samples missed the change
    (idx / "index.json").write_text(json.dumps(meta))
    assert "holds vectors that are not finite or not of unit length" in cli_error("search", idx, "films")


def test_a_resume_given_another_base_model_is_refused(tmp_path, base):
    train = _reviews(tmp_path / "train.csv", 30)
    args = ["finetune", "classify", "--train", train, "--text-column", "review", "--label-column", "stars",
            "--no-progress", "--set", "save_every=1", "--out", tmp_path / "ft"]
    cli_ok(*args, "--model", base, "--max-steps", "2")
    other = tmp_path / "other"
    shutil.copytree(base, other)
    weights = load_file(other / "model.safetensors")
    save_file({k: v * 2 for k, v in weights.items()}, other / "model.safetensors")
    line = cli_error(*args, "--model", other, "--max-steps", "3", "--resume")
    assert "(other weights)" in line
    cli_ok(*args, "--max-steps", "3", "--resume")  # without --model: its own checkpoint
