"""`bertkit finetune sentence`, `evaluate-sts` and `similarity` end to end on a tiny model: each loss learns, the
validation numbers are the ones `evaluate-sts` gives, runs resume exactly, and bad input is one clear line."""

import json
import random
from pathlib import Path

import pytest
from safetensors.torch import load_file

from bertkit.paths import find_dataset
from bertkit.text.tasks import read_pairs
from bertkit.tasks.sentence import SentenceObjective
from conftest import cli_error, cli_invoke, cli_ok, merged, torchrun_process

TOPICS = {"animals": ["cat", "dog", "horse", "bird"], "weather": ["rain", "snow", "wind", "storm"],
          "food": ["bread", "soup", "rice", "cheese"]}
FAST = ["--no-progress", "--set", "batch_size=16", "--set", "learning_rate=2e-3", "--set", "eval_every=10",
        "--set", "log_every=5", "--set", "warmup_ratio=0.0"]


def _pairs(path: Path, n: int, seed: int = 0, kind: str = "score") -> Path:
    """Pairs about the same topic score 5 (label 'same'), about different topics 0 ('different')."""
    rng = random.Random(seed)
    topics = list(TOPICS)
    rows = []
    for i in range(n):
        t1 = rng.choice(topics)
        t2 = t1 if i % 2 else rng.choice([t for t in topics if t != t1])
        a, b = f"the {rng.choice(TOPICS[t1])} is here", f"a {rng.choice(TOPICS[t2])} was there"
        negative = f"the {rng.choice(TOPICS[rng.choice([t for t in topics if t != t1])])} today"
        rows.append({"sentence1": a, "sentence2": b, "score": 5.0 if t1 == t2 else 0.0,
                     "label": "same" if t1 == t2 else "different", "negative": negative})
    if kind == "mnrl":
        rows = [r for r in rows if r["label"] == "same"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cosine_training_learns_and_evaluate_sts_agrees(tmp_path, base):
    train, valid = _pairs(tmp_path / "train.jsonl", 240), _pairs(tmp_path / "valid.jsonl", 60, seed=1)
    before = cli_ok("evaluate-sts", "--model", base, "--data", valid, "--out", tmp_path / "before.json")
    out = tmp_path / "sbert"
    cli_ok("finetune", "sentence", "--model", base, "--train", train, "--validation", valid, "--out", out,
           "--max-steps", "60", *FAST)
    results = json.loads((out / "results.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert config["sentence"] == {"pooling": "mean", "normalize": True, "max_seq_length": None}
    assert config["heads"]["names"] == []
    cli_ok("evaluate-sts", "--model", out, "--data", valid, "--out", tmp_path / "after.json")
    after = json.loads((tmp_path / "after.json").read_text())
    assert after["spearman"] == pytest.approx(results["validation"]["spearman"], abs=1e-6)  # one code path
    # gold scores are 0 or 5, so a perfect ranking has Spearman ~0.87 (ties)
    assert after["spearman"] > 0.7 and after["spearman"] > json.loads((tmp_path / "before.json").read_text())[
        "spearman"] + 0.3
    assert "Spearman" in before.output
    same = float(cli_ok("similarity", out, "the cat is here", "a dog was there").output)
    different = float(cli_ok("similarity", out, "the cat is here", "a storm was there").output)
    assert same > different


@pytest.mark.slow
def test_mnrl_with_hard_negatives_and_softmax_learn(tmp_path, base):
    train = _pairs(tmp_path / "train.jsonl", 400, kind="mnrl")
    out = tmp_path / "mnrl"
    cli_ok("finetune", "sentence", "--model", base, "--train", train, "--loss", "mnrl", "--negative-column",
           "negative", "--out", out, "--max-steps", "40", *FAST, "--set", "validation_split=0.2")
    validation = json.loads((out / "results.json").read_text())["validation"]
    assert set(validation) == {"val_loss", "accuracy", "mrr"} and validation["mrr"] > 0

    labelled = _pairs(tmp_path / "nli.jsonl", 200)
    out = tmp_path / "softmax"
    cli_ok("finetune", "sentence", "--model", base, "--train", labelled, "--loss", "softmax", "--label-column",
           "label", "--out", out, "--max-steps", "120", *FAST, "--set", "validation_split=0.2")
    assert json.loads((out / "labels.json").read_text())["labels"] == ["different", "same"]
    assert json.loads((out / "results.json").read_text())["validation"]["accuracy"] >= 0.8
    # not a classifier for predict: said, with the command that scores it (it said "finetune it first")
    assert "a sentence-embedding run (finetune sentence): score it with `bertkit evaluate-sts`" in cli_error(
        "predict", "--model", out, labelled)


@pytest.mark.slow
def test_two_processes_rank_against_every_process_negatives_like_one(tmp_path, base):
    """mnrl's in-batch negatives span processes (sentence_loss.cross_process_negatives, on by default): 2 processes
    of 4 rows log the losses of 1 process of 8 — without the gather each would rank against its own 4 only."""
    train = _pairs(tmp_path / "train.jsonl", 120, kind="mnrl")
    args = ["finetune", "sentence", "--model", str(base), "--train", str(train), "--loss", "mnrl",
            "--negative-column", "negative", "--max-steps", "6", "--no-progress", "--set", "learning_rate=2e-3",
            "--set", "log_every=1", "--set", "eval_every=100", "--set", "finetune_dropout=0",
            "--set", "validation_split=0.2", "--set", "schedule=constant", "--set", "warmup_ratio=0",
            "--set", "save_every=3"]
    cli_ok(*args, "--set", "batch_size=8", "--out", tmp_path / "one")
    two = torchrun_process(*args, "--set", "batch_size=4", "--out", tmp_path / "two")
    # the opening line gives the pool an anchor ranks against: both processes' rows, not its own batch_size
    assert "loss mnrl (in-batch negatives: each micro-step's 8 rows over 2 processes)" in " ".join(
        (two.stdout + two.stderr).split())

    def losses(run):
        return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert len(one) == len(two) == 6
    assert two == pytest.approx(one, rel=1e-4)

    # elastic resume keeps the pool: 3 steps on 2 processes of 4, then 1 process (batch_size 8) to the end
    part = [a if a != "6" else "3" for a in args]
    torchrun_process(*part, "--set", "batch_size=4", "--out", tmp_path / "e")
    resumed = cli_ok(*args, "--set", "batch_size=4", "--out", tmp_path / "e", "--resume")
    assert "batch_size 4 -> 8 per process" in " ".join(resumed.output.split())
    assert losses(tmp_path / "e") == pytest.approx(one, rel=1e-4)


@pytest.mark.slow
def test_sentence_training_resumes_exactly(tmp_path, base, monkeypatch):
    train = _pairs(tmp_path / "train.jsonl", 80)
    args = merged(["finetune", "sentence", "--model", base, "--train", train, "--max-steps", "8", *FAST,
                   "--set", "log_every=1", "--set", "eval_every=2", "--set", "save_every=2",
                   "--set", "task.finetune_dropout=0.1"])
    cli_ok(*args, "--out", tmp_path / "straight")
    original = SentenceObjective.batch

    def crash_at_step_5(self, step):
        if step == 5:
            raise KeyboardInterrupt
        return original(self, step)

    monkeypatch.setattr(SentenceObjective, "batch", crash_at_step_5)
    assert cli_invoke(*args, "--out", tmp_path / "resumed").exit_code != 0
    monkeypatch.setattr(SentenceObjective, "batch", original)
    cli_ok(*args, "--out", tmp_path / "resumed", "--resume")

    def curve(run):
        keep = ("step", "kind", "loss", "val_loss", "spearman", "lr", "grad_norm")
        return [{k: r[k] for k in keep if k in r} for r in
                map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]

    assert curve(tmp_path / "resumed") == curve(tmp_path / "straight")
    key = "backbone.blocks.1.ffn.w_out.weight"
    assert load_file(tmp_path / "resumed" / "model.safetensors")[key].equal(
        load_file(tmp_path / "straight" / "model.safetensors")[key])


def test_headerless_files_by_column_position(tmp_path):
    path = tmp_path / "sts.csv"  # the STS benchmark's layout: tab-separated, no header, 7 or 9 fields
    path.write_text('main-news\tx\t2012\t0001\t3.5\tA "quoted" man, walking.\tA man walks.\n'
                    "main-news\tx\t2012\t0002\t0.0\tRain.\tA cat.\textra\tfields\n")
    pairs = read_pairs(path, "5", "6", "score", "4", max_score=5.0)
    assert [(p.text, p.pair, p.score) for p in pairs] == [('A "quoted" man, walking.', "A man walks.", 3.5),
                                                          ("Rain.", "A cat.", 0.0)]


def test_scores_far_below_max_score_are_warned(tmp_path):
    """A 0..1 file (the Hub's stsb layout) read against the default max_score 5 trained cosines of 0..0.2 without
    a word (a review, 2026-11-28): warned, naming the --set that fixes it; STS-B's own 0..5 scores are not."""
    from bertkit.config import Config, SentenceLossConfig, TaskConfig
    from bertkit.tasks.registry import finetune_task

    said = []
    config = Config(task=TaskConfig(kind="sentence", text_column="sentence1", text_pair_column="sentence2",
                                    label_column="score"))
    scaled = tmp_path / "scaled.jsonl"
    scaled.write_text("".join(json.dumps({**row, "score": row["score"] / 5}) + "\n" for row in
                              map(json.loads, _pairs(tmp_path / "p.jsonl", 8).read_text().splitlines())))
    finetune_task("sentence").read(config, scaled, None, said.append)
    assert said == [f"{scaled}: its scores reach at most 1 of sentence_loss.max_score 5 (the targets are score / 5); "
                    "if its scale ends at 1, pass --max-score 1"]
    said.clear()
    finetune_task("sentence").read(config, tmp_path / "p.jsonl", None, said.append)
    ones = Config(task=config.task, sentence_loss=SentenceLossConfig(max_score=1.0))
    finetune_task("sentence").read(ones, scaled, None, said.append)
    assert said == []
    # mnrl reads no score: a scored file's dissimilar pairs were trained as positives without a word
    mnrl = Config(task=config.task, sentence_loss=SentenceLossConfig(loss="mnrl"))
    finetune_task("sentence").read(mnrl, scaled, None, said.append)
    assert said == [f"{scaled}: its 'score' column is not read by the mnrl loss, which trains every pair as a "
                    "positive (keep only the similar pairs, e.g. a score of 4 or more of 5, or train with the cosine "
                    "loss)"]
    # a headerless file's score column given by position (finetune-stsb's 4): warned too (it was not)
    said.clear()
    sts = tmp_path / "sts.tsv"
    sts.write_text("main-news\tx\t2012\t0001\t0.0\tRain.\tA cat.\n")
    positions = TaskConfig(kind="sentence", text_column="5", text_pair_column="6", label_column="4")
    finetune_task("sentence").read(Config(task=positions, sentence_loss=mnrl.sentence_loss), sts, None, said.append)
    assert said and said[0].startswith(f"{sts}: its column 4 is not read by the mnrl loss")
    said.clear()
    default = TaskConfig(kind="sentence", text_column="5", text_pair_column="6")  # label_column "label": no column
    finetune_task("sentence").read(Config(task=default, sentence_loss=mnrl.sentence_loss), sts, None, said.append)
    assert said == []


@pytest.mark.data
def test_real_stsb_splits_read():
    try:
        folder = find_dataset("stsb")
    except Exception:
        pytest.skip("STS-B not found in the data root (../shared/data)")
    counts = {split: len(read_pairs(folder / f"sts-{split}.csv", "5", "6", "score", "4", max_score=5.0))
              for split in ("train", "dev", "test")}
    assert counts == {"train": 5749, "dev": 1500, "test": 1379}


def test_bad_inputs_are_one_line_and_damage_nothing(tmp_path, base):
    train = _pairs(tmp_path / "train.jsonl", 40)
    common = ["finetune", "sentence", "--model", base, "--max-steps", "2", "--no-progress"]
    line = cli_error(*common, "--train", train, "--label-column", "stars", "--out", tmp_path / "a")
    assert "no score column 'stars'" in line and "columns found: sentence1, sentence2, score" in line
    assert not (tmp_path / "a").exists()

    headed = tmp_path / "headed.tsv"
    headed.write_text("s1\ts2\tscore\nA man.\tA woman.\t2.5\n")
    line = cli_error(*common, "--train", headed, "--text-column", "0", "--text-pair-column", "1",
                     "--label-column", "2", "--out", tmp_path / "b")
    assert f"{headed}:1: score 'score' is not a number (a header row?" in line
    line = cli_error(*common, "--train", headed, "--text-column", "s1", "--text-pair-column", "1",
                     "--label-column", "score", "--out", tmp_path / "b")
    assert "not a mix" in line
    bad_score = tmp_path / "bad.tsv"
    bad_score.write_text("sentence1\tsentence2\tscore\nA man.\tA woman.\t7\n")
    assert "score 7.0 is outside [0, 5.0]" in cli_error(*common, "--train", bad_score, "--out", tmp_path / "b")
    empty_side = tmp_path / "empty_side.tsv"
    empty_side.write_text("sentence1\tsentence2\tscore\nA man.\t\t2\n")
    assert (f"{empty_side}:2: 1 of the file's 1 row has an empty or missing sentence, this one first; fill them in "
            "or remove them, or pass --skip-bad-lines") in cli_error(*common, "--train", empty_side, "--out",
                                                                     tmp_path / "b")
    # a gold score of NaN (or none) is refused with the count, or skipped and counted with --skip-bad-lines
    nan_scores = tmp_path / "nan.jsonl"
    nan_scores.write_text("".join(line.replace('"score": 5.0', '"score": NaN', 1) if i % 4 == 1 else line
                                  for i, line in enumerate(train.read_text().splitlines(keepends=True))))
    assert f"{nan_scores}:2: 10 of the file's 40 rows have no score, this one first" in cli_error(
        *common, "--train", nan_scores, "--out", tmp_path / "b")
    skipped = cli_ok(*common, "--train", nan_scores, "--skip-bad-lines", "--set", "batch_size=8", "--out",
                     tmp_path / "skipped")
    # whitespace dropped: the console folds a path longer than its width mid-word (long temporary folders)
    assert "".join(f"warning: skipped 10 of 40 rows with no score ({nan_scores}:2 first)".split()) in "".join(
        skipped.output.split())
    assert "loss" in cli_error(*common, "--train", train, "--loss", "triplet", "--out", tmp_path / "b")
    assert not (tmp_path / "b").exists()
    assert "cannot tell its columns" in cli_error("evaluate-sts", "--model", base, "--data", headed)
    assert "task.pooling is now heads.classifier_pooling" in cli_error(*common, "--train", train, "--set",
                                                                      "task.pooling=mean", "--out", tmp_path / "b")
    assert "heads.classifier_pooling is not read by finetune sentence" in cli_error(
        *common, "--train", train, "--set", "classifier_pooling=mean", "--out", tmp_path / "b")
    assert "sentence training cuts sentences at sentence.max_seq_length" in cli_error(
        *common, "--train", train, "--set", "max_length=32", "--out", tmp_path / "b")
    # a hard-negative column for a loss that reads none was ignored without a word
    assert "sentence_loss.negative_column: the cosine loss reads no hard negatives (mnrl does)" in cli_error(
        *common, "--train", train, "--loss", "cosine", "--negative-column", "sentence2", "--out", tmp_path / "b")
    # mnrl with one row a micro-batch has no candidate but its positive: loss and gradient 0 at every step, and a
    # "best checkpoint" of the base's weights (a review); accumulation adds rows to a step, not candidates
    positives = _pairs(tmp_path / "positives.jsonl", 40, kind="mnrl")
    mnrl = [*common, "--train", positives, "--loss", "mnrl", "--out", tmp_path / "b"]
    assert ("train.batch_size: the mnrl loss ranks each anchor's positive among the other rows of its micro-batch, "
            "and 1 row has none") in cli_error(*mnrl, "--set", "batch_size=1", "--set", "accumulation_steps=8")
    # a step of 2 micro-batches says where the negatives come from
    said = " ".join(cli_ok(*mnrl[:-1], tmp_path / "acc", "--set", "batch_size=4", "--set",
                           "accumulation_steps=2").output.split())
    assert "loss mnrl (in-batch negatives: each micro-batch's 4 rows)" in said
    # validation with one row lacking its hard negative ranked every row without them: an easier, other metric
    gap = tmp_path / "gap.jsonl"
    rows = [json.loads(line) for line in positives.read_text().splitlines()]
    gap.write_text("".join(json.dumps({**row, "negative": row["negative"] if i else ""}) + "\n"
                           for i, row in enumerate(rows)))
    assert ("sentence_loss.negative_column: 1 validation rows have no hard negative in 'negative'"
            in cli_error(*mnrl, "--negative-column", "negative", "--validation", gap))
    assert not (tmp_path / "b").exists()
    # a headerless file read by column names: its first row was the header, and a later row "overfull" was the error
    stsb = tmp_path / "sts-train.csv"
    stsb.write_text("main-news\tx\t2012\t0001\t3.5\tA man walks.\tA man walks.\n"
                    "main-news\tx\t2012\t0002\t0.0\tRain.\tA cat.\textra\tfields\n")
    line = cli_error(*common, "--train", stsb, "--out", tmp_path / "b")
    assert "no first sentence column 'sentence1'" in line and "its first row looks like data, not a header" in line
    # a resumed run must pool as it began
    args = [*common, "--train", train, "--out", tmp_path / "r", "--set", "save_every=1", "--pooling", "cls"]
    cli_ok(*args)
    assert "holds a different run ([sentence]" in cli_error(*args[:-2], "--resume", "--max-steps", "3")
    assert "similarity needs two non-empty texts" in cli_error("similarity", base, "a", " ")
    # a text longer than the model's window is cut, and said (as embed says it; it was cut without a word)
    long = cli_ok("similarity", base, "word " * 300, "a word")
    assert "warning: 1 text is longer than 64 tokens and was truncated" in " ".join(long.output.split())
    assert -1 <= float(long.stdout) <= 1
