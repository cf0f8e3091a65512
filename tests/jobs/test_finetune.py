"""`bertkit finetune classify|ner`, `predict` and `evaluate` end to end on tiny models: they learn, they predict
in order with offsets, they resume exactly, and every bad input is one line that damages nothing."""

import dataclasses
import json
import random
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file
from typer.testing import CliRunner

from bertkit.cli import app
from bertkit.cli.common import with_max_time
from bertkit.config import BUDGET_STEPS
from bertkit.hardware import resolve_precision
from bertkit.jobs.plot import curve_metric, pretraining_titles
from bertkit.recipes import load_recipe, with_values
from bertkit.run.directory import keep_run_limits, load_config
from bertkit.run.metrics import read_metrics
from bertkit.tasks.classify import ClassifyObjective
from conftest import cli_error, cli_invoke, cli_ok, merged, repeated_corpus

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
FAST = ["--no-progress", "--set", "batch_size=8", "--set", "learning_rate=3e-3", "--set", "eval_every=10",
        "--set", "log_every=5", "--set", "warmup_ratio=0.0"]
WORDS = {"positive": ["great", "wonderful", "loved"], "negative": ["awful", "boring", "hated"],
         "neutral": ["okay", "average", "fine"]}
_invoke, _ok, _error = cli_invoke, cli_ok, cli_error


def _reviews(path: Path, n: int, seed: int = 0, fmt: str = "csv") -> Path:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = ["positive", "negative", "neutral"][i % 3]
        rows.append((f"the film was {rng.choice(WORDS[label])} and the {rng.choice(['cast', 'plot'])} too", label))
    if fmt == "jsonl":
        path.write_text("".join(json.dumps({"review": t, "stars": lab}) + "\n" for t, lab in rows))
    else:
        path.write_text("review,stars\n" + "".join(f"{t},{lab}\n" for t, lab in rows))
    return path


def test_classify_learns_predicts_and_evaluates(tmp_path, base):
    train = _reviews(tmp_path / "train.csv", 90)
    valid = _reviews(tmp_path / "valid.jsonl", 30, seed=1, fmt="jsonl")
    out = tmp_path / "clf"
    _ok("finetune", "classify", "--model", base, "--train", train, "--validation", valid, "--text-column", "review",
        "--label-column", "stars", "--out", out, "--max-steps", "60", *FAST)
    labels = json.loads((out / "labels.json").read_text())
    assert labels == {"task": "classify", "labels": ["negative", "neutral", "positive"]}
    results = json.loads((out / "results.json").read_text())
    assert results["validation"]["accuracy"] >= 0.9, results
    assert results["validation"]["confusion"]["labels"] == ["negative", "neutral", "positive"]
    best = json.loads((out / "checkpoints" / "best" / "state.json").read_text())
    assert best["step"] == results["best_step"] and best["metric"] == "accuracy"
    assert load_file(out / "model.safetensors").keys() == load_file(
        out / "checkpoints" / "best" / "model.safetensors").keys()
    config = json.loads((out / "config.json").read_text())
    assert config["heads"]["names"] == ["classifier"] and config["heads"]["num_labels"] == 3

    # predict: a file in, JSONL out in input order (batches run sorted by length)
    inputs = tmp_path / "inputs.txt"
    texts = ["the film was great and the plot too", "awful", "the film was okay and the cast too",
             "the film was hated and the cast too and the plot too and the cast too"]
    inputs.write_text("\n".join(texts) + "\n")
    predictions = tmp_path / "predictions.jsonl"
    _ok("predict", "--model", out, inputs, "--out", predictions, "--batch-size", "2")
    records = [json.loads(line) for line in predictions.read_text().splitlines()]
    assert [r["text"] for r in records] == texts
    assert [r["label"] for r in records][0::2] == ["positive", "neutral"]
    assert all(0 < r["score"] <= 1 and abs(sum(r["scores"].values()) - 1) < 1e-3 for r in records)
    assert results["precision"] == resolve_precision("auto", "cpu").precision  # what the run trained at
    # --precision bf16 (what auto picks on a bf16-native machine): the same labels, probabilities within 0.02
    in_bf16 = tmp_path / "bf16.jsonl"
    _ok("predict", "--model", out, inputs, "--out", in_bf16, "--precision", "bf16")
    low = [json.loads(line) for line in in_bf16.read_text().splitlines()]
    assert [r["label"] for r in low] == [r["label"] for r in records]
    assert all(abs(a["scores"][k] - b["scores"][k]) < 0.02 for a, b in zip(low, records) for k in a["scores"])

    # inputs predict once answered or lost without a word (inference review, 2026-11-28): JSON lines with a blank
    # line (said) and rows without their text (kept in place, no answer: they got a confident label); a headerless
    # file read by column position (its first row was a header: "no text column '1'"); a lone \r inside a .txt line
    # (text mode made it a line break, stdin did not)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"review": "the film was great"}\n\n{"review": null}\n{"other": "x"}\n{"review": "awful"}\n')
    result = _ok("predict", "--model", out, rows)
    said = " ".join(result.output.split())
    assert "skipped 1 blank line" in said and "2 of 4 inputs have no text (the first: input 2)" in said
    got = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert [r["label"] for r in got][1:3] == [None, None] and got[0]["label"] and got[3]["label"]
    headerless = tmp_path / "headerless.tsv"
    headerless.write_text("7\tthe film was great\n8\tawful\n")
    got = [json.loads(line) for line in _ok("predict", "--model", out, headerless, "--text-column", "1")
           .stdout.splitlines() if line.startswith("{")]
    assert [r["text"] for r in got] == ["the film was great", "awful"]
    lone = tmp_path / "lone.txt"
    lone.write_bytes(b"the film was great\rand long\nawful\n")
    assert len([line for line in _ok("predict", "--model", out, lone).stdout.splitlines() if line.startswith("{")]) == 2
    lone.write_bytes(b"the film was great\rawful\rokay\r")  # old Mac line endings: one text, and said so
    assert "1 input holds a carriage return inside the text (the first: input 1), each read as one text" in \
        " ".join(_ok("predict", "--model", out, lone).output.split())
    assert "was finetuned on single texts" in _error("predict", "--model", out, rows, "--text-pair-column", "x")
    # rows piped in were each one text, JSON and all, and --text-column went unheard (a review, 2026-11-28): refused
    # on lines of text, read as rows with --input-format (a file too, whatever its suffix)
    piped = '{"review": "the film was great"}\n{"review": "awful"}\n'
    refused = runner.invoke(app, ["predict", "--model", str(out), "--text-column", "review"], input=piped)
    assert refused.exit_code == 2 and "--text-column: stdin is read as lines of text" in refused.output
    as_rows = runner.invoke(app, ["predict", "--model", str(out), "--input-format", "jsonl"], input=piped)
    assert [json.loads(line)["text"] for line in as_rows.stdout.splitlines() if line.startswith("{")] == \
        ["the film was great", "awful"]
    dat = tmp_path / "rows.dat"
    dat.write_text("review,stars\nthe film was great,5\n")
    assert "rows.dat is read as lines of text" in _error("predict", "--model", out, dat, "--text-column", "review")
    got = [json.loads(line) for line in _ok("predict", "--model", out, dat, "--input-format", "csv")
           .stdout.splitlines() if line.startswith("{")]
    assert [r["text"] for r in got] == ["the film was great"]
    named = runner.invoke(app, ["predict", "--model", str(out), "--input-format", "jsonl"], input='{"other": 1}\n')
    assert named.exit_code == 2 and "error: stdin: no text column 'review'" in " ".join(named.output.split())
    # --keep-column: an id (as written: a JSON number stays one) copied into each record, from a file or piped rows;
    # a column the input lacks, a record's own field and lines of text are refused
    with_ids = '{"id": 7, "review": "the film was great"}\n{"id": "b-9", "review": "awful"}\n'
    kept = runner.invoke(app, ["predict", "--model", str(out), "--input-format", "jsonl", "--keep-column", "id"],
                         input=with_ids)
    got = [json.loads(line) for line in kept.stdout.splitlines() if line.startswith("{")]
    assert [(r["id"], r["text"]) for r in got] == [(7, "the film was great"), ("b-9", "awful")] and got[0]["label"]
    assert list(got[0])[:2] == ["id", "text"]
    assert "no column 'id' to keep (columns found: review, stars)" in _error("predict", "--model", out, dat,
                                                                            "--input-format", "csv",
                                                                            "--keep-column", "id")
    labelled = tmp_path / "kept.csv"
    labelled.write_text("review,label\nthe film was great,x\n")
    assert "--keep-column label: the output's own field" in _error("predict", "--model", out, labelled,
                                                                   "--keep-column", "label")
    assert "inputs.txt is read as lines of text" in _error("predict", "--model", out, inputs,
                                                                          "--keep-column", "id")

    # evaluate: metrics, confusion matrix, and an unseen label reported and counted, not a crash
    test = tmp_path / "test.csv"
    test.write_text(_reviews(tmp_path / "t.csv", 12, seed=2).read_text() + "the film was great,ecstatic\n")
    report = tmp_path / "report.json"
    result = _ok("evaluate", "--model", out, "--data", test, "--out", report)
    assert "confusion matrix" in result.output and "never saw (ecstatic)" in result.output
    assert "warning: 1 example carries labels the model never saw" in " ".join(result.output.split())
    metrics = json.loads(report.read_text())
    assert metrics["unseen_labels"] == ["ecstatic"] and metrics["examples"] == 13
    assert metrics["confusion"]["labels"][-1] == "ecstatic" and metrics["accuracy"] <= 12 / 13
    # the batch size is a speed setting: one example a batch scores the file alike
    confusions = []
    for batch_size in ("1", "64"):
        scored = tmp_path / f"batch-{batch_size}.json"
        _ok("evaluate", "--model", out, "--data", test, "--out", scored, "--batch-size", batch_size,
            "--precision", "fp32")
        confusions.append(json.loads(scored.read_text())["confusion"])
    assert confusions[0] == confusions[1]
    # a row without its label: one line offering --skip-bad-lines (evaluate had no such option: a dev file with one
    # label-less row could not be scored); with it, skipped and counted
    holed = tmp_path / "holed.csv"
    holed.write_text(_reviews(tmp_path / "h.csv", 6, seed=3).read_text() + "the film was fine,\n")
    assert "--skip-bad-lines" in _error("evaluate", "--model", out, "--data", holed)
    assert "--tag-column: " in _error("evaluate", "--model", out, "--data", holed, "--tag-column", "2")
    skipped = _ok("evaluate", "--model", out, "--data", holed, "--skip-bad-lines", "--out", tmp_path / "holed.json")
    assert "skipped 1" in " ".join(skipped.output.split())
    holed_report = json.loads((tmp_path / "holed.json").read_text())
    assert holed_report["examples"] == 6 and holed_report["skipped_rows"] == 1  # the report says what it leaves out
    # and what it was computed in, on what (bf16 where auto picks it could flip a near-tie; a review, 2026-11-28)
    assert (holed_report["model"], holed_report["data"]) == (str(out), str(holed))
    assert holed_report["inference_precision"] == resolve_precision("auto", "cpu").precision

    # plot: loss and the metric that picked the best checkpoint (a pretraining's val_accuracy is not there)
    _ok("plot", out)
    assert (out / "curves.png").stat().st_size > 10_000
    assert curve_metric(out, [r for r in read_metrics(out) if r["kind"] == "eval"]) == "accuracy"
    assert "plot writes a PNG" in _error("plot", out, "-o", tmp_path / "curves.jpg")
    assert not (tmp_path / "curves.jpg").exists()


def _conll(path: Path, n: int, seed: int = 0, scheme: str = "iob1") -> Path:
    rng = random.Random(seed)
    people, places = ["Anna", "Peter", "Maria", "John"], ["Paris", "Berlin", "Tokyo", "Lima"]
    lines = ["-DOCSTART- -X- O", ""]
    for _ in range(n):
        first, last, place = rng.choice(people), rng.choice(["Smith", "Lee"]), rng.choice(places)
        person_tags = {"iob1": ["I-PER", "I-PER"], "bioes": ["B-PER", "E-PER"]}[scheme]
        words = [(first, "NNP", person_tags[0]), (last, "NNP", person_tags[1]), ("lives", "VBZ", "O"),
                 ("in", "IN", "O"), (place, "NNP", "I-LOC" if scheme == "iob1" else "S-LOC"), (".", ".", "O")]
        lines += [" ".join(w) for w in words] + [""]
    path.write_text("\n".join(lines))
    return path


def test_ner_learns_and_predicts_character_spans(tmp_path, base):
    train = _conll(tmp_path / "train.conll", 80)
    valid = _conll(tmp_path / "valid.conll", 20, seed=1, scheme="bioes")
    out = tmp_path / "ner"
    _ok("finetune", "ner", "--model", base, "--train", train, "--validation", valid, "--out", out,
        "--max-steps", "60", *FAST)
    labels = json.loads((out / "labels.json").read_text())["labels"]
    assert labels == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]  # IOB1 / BIOES read as IOB2
    results = json.loads((out / "results.json").read_text())
    assert results["validation"]["f1"] >= 0.8, results
    assert set(results["validation"]["per_type"]) == {"LOC", "PER"}

    text = "Maria Lee lives in Tokyo."
    result = runner.invoke(app, ["predict", "--model", str(out)], input=text + "\n")
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout.strip().splitlines()[-1])
    assert record["text"] == text
    found = {(e["label"], text[e["start"]:e["end"]]) for e in record["entities"]}
    assert found == {("PER", "Maria Lee"), ("LOC", "Tokyo")}

    test = _conll(tmp_path / "test.conll", 10, seed=3)
    report = _ok("evaluate", "--model", out, "--data", test)
    assert "per entity type" in report.output and "PER" in report.output
    assert "is a tagger (CoNLL files: --tag-column); it reads no such column" in _error(
        "evaluate", "--model", out, "--data", test, "--label-column", "2")  # it was ignored without a word
    _ok("plot", out, "-o", tmp_path / "ner.png")
    assert curve_metric(out, [r for r in read_metrics(out) if r["kind"] == "eval"]) == "f1"


def test_finetune_resumes_exactly(tmp_path, base, monkeypatch):
    train = _reviews(tmp_path / "train.csv", 60)
    args = merged(["finetune", "classify", "--model", base, "--train", train, "--text-column", "review",
                   "--label-column", "stars", "--max-steps", "8", *FAST, "--set", "log_every=1", "--set",
                   "eval_every=2", "--set", "save_every=2", "--set", "task.finetune_dropout=0.1"])
    _ok(*args, "--out", tmp_path / "straight")

    original = ClassifyObjective.batch

    def crash_at_step_5(self, step):
        if step == 5:
            raise KeyboardInterrupt
        return original(self, step)

    monkeypatch.setattr(ClassifyObjective, "batch", crash_at_step_5)
    assert _invoke(*args, "--out", tmp_path / "resumed").exit_code != 0
    monkeypatch.setattr(ClassifyObjective, "batch", original)
    _ok(*args, "--out", tmp_path / "resumed", "--resume")

    def curve(run):
        keep = ("step", "kind", "loss", "val_loss", "accuracy", "lr", "grad_norm")
        return [{k: r[k] for k in keep if k in r} for r in
                map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]

    assert curve(tmp_path / "resumed") == curve(tmp_path / "straight")
    assert load_file(tmp_path / "resumed" / "model.safetensors")["heads.classifier.out.weight"].equal(
        load_file(tmp_path / "straight" / "model.safetensors")["heads.classifier.out.weight"])


def test_a_small_training_file_is_evaluated_once_an_epoch(tmp_path, base):
    """48 examples in batches of 8 are 6 steps an epoch: the recipe's eval_every 200 evaluated the 3-epoch run once,
    at its end, so its "best checkpoint" was the last step's. Now every epoch is evaluated (and said), the best of
    them kept, and config.json records the interval used; an interval shorter than the run is left as given (a
    review: patience counts its evaluations, a time budget pays for them)."""
    from bertkit.jobs.finetune import evaluated_each_epoch

    train = _reviews(tmp_path / "train.csv", 48)
    valid = _reviews(tmp_path / "valid.csv", 12, seed=1)
    out = tmp_path / "clf"
    result = _ok("finetune", "classify", "--model", base, "--train", train, "--validation", valid, "--text-column",
                 "review", "--label-column", "stars", "--out", out, "--epochs", "3", "--no-progress", "--set",
                 "batch_size=8")
    assert "evaluated once an epoch (every 6 steps)" in " ".join(result.output.split())
    assert [r["step"] for r in read_metrics(out) if r["kind"] == "eval"] == [6, 12, 18]
    assert load_config(out).train.eval_every == 6
    assert json.loads((out / "results.json").read_text())["best_step"] in (6, 12, 18)
    cfg = load_recipe("finetune-classify").train
    for eval_every, max_steps, per_epoch, expected in [(200, 18, 6.0, 6), (200, 18, 5.5, 6), (18, 18, 6.0, 6),
                                                        (4, 18, 6.0, 4), (10, 18, 6.0, 10), (200, 6, 6.0, 200),
                                                        (200, 5, 6.0, 200)]:
        got = evaluated_each_epoch(dataclasses.replace(cfg, eval_every=eval_every, max_steps=max_steps), per_epoch)
        assert got.eval_every == expected, (eval_every, max_steps, per_epoch)


def test_pretrained_weights_are_used_and_random_init_is_not(tmp_path, base):
    train = _reviews(tmp_path / "train.csv", 30)
    common = ["finetune", "classify", "--model", base, "--train", train, "--text-column", "review",
              "--label-column", "stars", "--max-steps", "1", "--no-progress", "--set", "learning_rate=1e-9"]
    _ok(*common, "--out", tmp_path / "pre")
    _ok(*common, "--out", tmp_path / "rand", "--init", "random")
    base_weights = load_file(base / "model.safetensors")
    key = next(k for k, v in base_weights.items() if k.startswith("backbone.blocks.0.") and v.ndim == 2)
    assert (load_file(tmp_path / "pre" / "model.safetensors")[key] - base_weights[key]).abs().max() < 1e-6
    assert (load_file(tmp_path / "rand" / "model.safetensors")[key] - base_weights[key]).abs().max() > 1e-3


def test_max_time_none_drops_a_recipes_clock(tmp_path, base):
    """`--max-time none` trains without a wall-clock budget although the recipe has one (it was "'none' is not a
    duration" while `glue --budget none` took it), in finetune and in pretrain, and in a resumed run."""
    train = _reviews(tmp_path / "train.csv", 30)
    common = ["finetune", "classify", "--model", base, "--train", train, "--text-column", "review",
              "--label-column", "stars", "--no-progress", "--max-steps", "1"]
    _ok(*common, "--max-time", "10m", "--out", tmp_path / "clocked")
    assert load_config(tmp_path / "clocked").train.max_time == "10m"
    clocked = tmp_path / "clocked.toml"  # a recipe with a clock (the option and --set together are refused)
    clocked.write_text('[task]\nkind = "classify"\n[train]\nmax_time = "20m"\n')
    _ok(*common, "--recipe", clocked, "--max-time", "none", "--out", tmp_path / "free")
    assert load_config(tmp_path / "free").train.max_time is None
    # a resume keeps the run's own budget unless the command drops it: the raw "none" counts as given
    recipe = with_max_time(load_recipe("finetune-classify"), "none")
    kept = keep_run_limits(recipe, tmp_path / "clocked", {"max_time": None, "max_steps": None}, [])
    dropped = keep_run_limits(recipe, tmp_path / "clocked", {"max_time": "none", "max_steps": None}, [])
    assert (kept.train.max_time, dropped.train.max_time) == ("10m", None)
    assert dropped.train.max_steps == 1  # the run's own step limit stays
    # --max-steps alone replaces the time budget, the recipe's too (a demo or budget recipe sets one: it was kept,
    # and an extension to 113 steps ended at the old budget's 74; review, 2026-11-28)
    clocked_recipe = with_max_time(load_recipe("finetune-classify"), "7m")
    steps = keep_run_limits(clocked_recipe, tmp_path / "clocked", {"max_time": None, "max_steps": 9}, [])
    assert (steps.train.max_time, steps.train.epochs) == (None, None)
    both = keep_run_limits(clocked_recipe, tmp_path / "clocked", {"max_time": "8m", "max_steps": 9}, [])
    assert both.train.max_time == "7m"  # given beside --max-steps: the command's own (with_max_time applied it)
    tiny = tmp_path / "tiny-clocked.toml"  # tiny with a clock of its own
    tiny.write_text((ROOT / "recipes" / "tiny.toml").read_text() + '\n[train]\nmax_time = "5m"\n')
    assert load_recipe(tiny).train.max_time == "5m"
    pretrain = ["pretrain", "--recipe", tiny, "--set", "vocab_size=400", "--set", "block_size=32", "--set",
                "batch_size=4", "--set", "min_frequency=1", "--corpus",
                repeated_corpus(tmp_path / "c.txt", 6), "--no-progress", "--max-steps", "1"]
    _ok(*pretrain, "--max-time", "None", "--out", tmp_path / "pre")  # (as --set's "none" is, any case)
    assert load_config(tmp_path / "pre").train.max_time is None
    assert "train.max_time: 'never' is not a duration" in _error(*pretrain, "--max-time", "never",
                                                                 "--out", tmp_path / "bad")


def test_a_run_whose_metric_was_never_finite_keeps_and_names_its_last_step(tmp_path, base):
    """Every validation score equal: Spearman is undefined at every evaluation, so no checkpoint was best and the
    last weights were kept, but results.json said best step 0, a step never trained (a review, 2026-11-28)."""
    train, valid = tmp_path / "train.csv", tmp_path / "valid.csv"
    train.write_text("review,score\n" + "".join(f"the film was {w},{s}\n" for w, s in
                                               [("great", 5), ("awful", 1), ("fine", 3)] * 10))
    valid.write_text("review,score\n" + "".join(f"the film was {w},2\n" for w in ("great", "awful", "fine")))
    out = tmp_path / "flat"
    result = _ok("finetune", "classify", "--regression", "--model", base, "--train", train, "--validation", valid,
                 "--text-column", "review", "--label-column", "score", "--max-steps", "4", "--out", out,
                 *[item.replace("eval_every=10", "eval_every=2") for item in FAST])
    results = json.loads((out / "results.json").read_text())
    assert results["best_step"] == results["steps"] == 4 and results["no_best"] is True
    assert results["validation"]["spearman"] is None
    assert "no evaluation gave a finite spearman: the last step's weights, step 4 of 4" in " ".join(
        result.output.split())


def test_a_time_budget_with_no_length_given_is_the_runs_limit(tmp_path):
    """`pretrain --recipe mini --max-time 30m` ended at TrainConfig's default cap of 1,000 steps, ~17 minutes into
    its 30 (a review, 2026-11-28): a budget with no step count or epochs given anywhere runs to the budget."""
    # the rule lives in with_values (with_max_time is --max-time through it), from the keys load_recipe recorded
    mini = load_recipe("mini")
    assert with_max_time(mini, "30m").train.max_steps == BUDGET_STEPS
    assert mini.train.max_steps == 1000  # no budget: the default cap
    assert with_max_time(with_max_time(mini, "30m"), "none").train.max_steps == 1000  # the lifted cap comes back
    # --max-steps given (with_values sets it), --set max_steps (load_recipe): the step count stays
    assert with_max_time(with_values(mini, {"train.max_steps": 50}), "30m").train.max_steps == 50
    assert with_max_time(load_recipe("mini", ["max_steps=70"]), "30m").train.max_steps == 70
    assert with_max_time(load_recipe("demo"), "1m").train.max_steps == 100_000
    capped = tmp_path / "capped.toml"  # a recipe's own cap stays, even at the default's value
    capped.write_text((ROOT / "recipes" / "tiny.toml").read_text() + "\n[train]\nmax_steps = 1000\n")
    assert with_max_time(load_recipe(capped), "1m").train.max_steps == 1000
    epochs = load_recipe("finetune-classify")  # epochs give the length
    assert with_max_time(epochs, "5m").train == dataclasses.replace(epochs.train, max_time="5m")
    # through the CLI: the stored config, and the run trains past where a cap of 3 steps would stop it
    corpus = repeated_corpus(tmp_path / "c.txt", 6)
    pretrain = ["pretrain", "--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set",
                "batch_size=4", "--set", "min_frequency=1", "--corpus", corpus, "--no-progress"]
    _ok(*pretrain, "--max-time", "2s", "--out", tmp_path / "budget")
    assert load_config(tmp_path / "budget").train.max_steps == BUDGET_STEPS
    _ok(*pretrain, "--max-time", "2s", "--max-steps", "3", "--out", tmp_path / "capped")
    assert load_config(tmp_path / "capped").train.max_steps == 3
    steps = [json.loads((tmp_path / run / "results.json").read_text())["step"] for run in ("budget", "capped")]
    assert steps[1] == 3 < steps[0]
    # resumed without its clock and with no step count: it re-planned to a million steps (a review): refused
    before = (tmp_path / "budget" / "results.json").read_bytes()
    assert "its time budget was its only limit; with --max-time none give --max-steps N" in _error(
        *pretrain, "--out", tmp_path / "budget", "--resume", "--max-time", "none")
    assert (tmp_path / "budget" / "results.json").read_bytes() == before
    assert "already finished" in " ".join(_ok(*pretrain, "--out", tmp_path / "budget", "--resume", "--max-time",
                                              "none", "--max-steps", str(steps[0])).output.split())
    # a budget the run has spent already, given on a resume: it trained one step and stopped without a word
    stopped = shutil.copytree(tmp_path / "budget", tmp_path / "stopped")
    (stopped / "results.json").unlink()  # as if killed after its last checkpoint
    config = (stopped / "config.json").read_bytes()
    line = _error(*pretrain, "--out", stopped, "--resume", "--max-time", "1s", "--max-steps", "100000")
    assert "the run has trained" in line and "past train.max_time = 1s (a budget counts the run's whole " \
        "training time); resume with a --max-time above" in line
    assert not (stopped / "results.json").exists() and (stopped / "config.json").read_bytes() == config


def test_bad_inputs_are_one_line_and_damage_nothing(tmp_path, base, monkeypatch):
    train = _reviews(tmp_path / "train.csv", 30)
    common = ["finetune", "classify", "--model", base, "--train", train, "--max-steps", "2", "--no-progress"]
    line = _error(*common, "--text-column", "review", "--out", tmp_path / "a")
    assert "no label column 'label'" in line and "columns found: review, stars" in line
    assert not (tmp_path / "a").exists()

    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert "empty file" in _error("finetune", "classify", "--model", base, "--train", empty, "--out", tmp_path / "b")

    bad = tmp_path / "bad.conll"
    bad.write_text("EU NNP B-ORG\nrejects VBZ\n")
    assert "bad.conll:2: 2 columns, expected 3" in _error("finetune", "ner", "--model", base, "--train", bad,
                                                           "--out", tmp_path / "c")

    # an existing run is refused and left byte-identical
    done = tmp_path / "done"
    ok = [*common, "--text-column", "review", "--label-column", "stars", "--out", done]
    _ok(*ok)
    before = {p: p.read_bytes() for p in done.rglob("*") if p.is_file()}
    assert "already holds a run" in _error(*ok)
    assert {p: p.read_bytes() for p in done.rglob("*") if p.is_file()} == before

    # predict reads a data-root name as evaluate does (it said "no such file" for a file the data root has)
    monkeypatch.setenv("BERTKIT_DATA", str(tmp_path / "root"))
    (tmp_path / "root" / "mine").mkdir(parents=True)
    (tmp_path / "root" / "mine" / "t.txt").write_text("the film was great\n")
    assert len([line for line in _ok("predict", "--model", done, "mine/t.txt").stdout.splitlines()
                if line.startswith("{")]) == 1
    # a model without a task head given to predict / evaluate
    assert "has no task head" in _error("predict", "--model", base, train)
    assert "has no task head" in _error("evaluate", "--model", base, "--data", train)

    # texts longer than the model: truncated, counted, one warning
    long_inputs = tmp_path / "long.txt"
    long_inputs.write_text(("very " * 200 + "\n") * 3 + "short\n")
    result = _ok("predict", "--model", done, long_inputs)
    assert result.output.count("3 of 4 inputs are longer than 64 tokens") == 1
    assert len([line for line in result.stdout.splitlines() if line.startswith("{")]) == 4

    assert "empty file" in _error("predict", "--model", done, empty)
    # predictions never replace a file: not the input, not an existing output without --overwrite
    assert "is this command's own input" in _error("predict", "--model", done, long_inputs, "--out", long_inputs,
                                                   "--overwrite")
    kept = tmp_path / "kept.jsonl"
    kept.write_text("mine\n")
    assert "already exists" in _error("predict", "--model", done, long_inputs, "--out", kept)
    # --overwrite replaces only predictions: the user's own file stays
    assert "is a text file, not a predictions file" in _error("predict", "--model", done, long_inputs, "--out", kept,
                                                              "--overwrite")
    assert kept.read_text() == "mine\n"
    _ok("predict", "--model", done, long_inputs, "--out", kept.with_name("p.jsonl"))
    _ok("predict", "--model", done, long_inputs, "--out", kept.with_name("p.jsonl"), "--overwrite")
    assert kept.with_name("p.jsonl").read_text().count("\n") == 4
    assert "not a validation metric of classify (allowed: val_loss|accuracy|macro_f1|mcc)" in _error(
        *common, "--text-column", "review", "--label-column", "stars", "--out", tmp_path / "e", "--set",
        "metric=f1")
    assert not (tmp_path / "e").exists()
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n")
    assert "no input texts" in _error("predict", "--model", done, blank)
    # predict strips a CSV's text cells as finetuning and evaluate read them: the same text, the same scores
    spaced = tmp_path / "spaced.csv"
    spaced.write_text('review,stars\n"the film was great  ",positive\nthe film was great,positive\n')
    records = [json.loads(line) for line in _ok("predict", "--model", done, spaced).stdout.splitlines()
               if line.startswith("{")]
    assert [r["text"] for r in records] == ["the film was great"] * 2 and records[0]["scores"] == records[1]["scores"]
    # blank lines between texts are skipped, and said (the outputs no longer line up with the input lines)
    gaps = tmp_path / "gaps.txt"
    gaps.write_text("the film was great\n\n  \nawful\n\n")
    result = _ok("predict", "--model", done, gaps)
    assert "skipped 2 blank lines before or between the texts" in result.output
    assert len([line for line in result.stdout.splitlines() if line.startswith("{")]) == 2
    # a row with more fields than the header (an unquoted comma) is refused with its line, not cut and mislabelled
    commas = tmp_path / "commas.csv"
    commas.write_text("review,stars\nthe film was great,positive\nbad, very bad film,negative\n")
    for args, end in (([*common[:5], commas, "--text-column", "review", "--label-column", "stars", "--out",
                        tmp_path / "g"], "; or pass --skip-bad-lines to skip and count such rows)"),
                      (["predict", "--model", done, commas], ")")):
        assert ("commas.csv:3: 3 fields, the header has 2 (a comma inside a text? put the text in double quotes; "
                "or a column the header does not name? name it" + end) in _error(*args)
    assert f"{tmp_path}: is a directory; give a file" in _error(*common[:5], tmp_path, "--out", tmp_path / "g")
    # --max-steps beside epochs given in the same command: refused (it used to win over --set epochs without a
    # word, and lose to --epochs without one); `none` clears the recipe's epochs, which --max-steps does anyway
    named = [*common, "--text-column", "review", "--label-column", "stars", "--out", tmp_path / "g"]
    assert "--max-steps and --epochs both set the run's length; give one" in _error(*named, "--epochs", "1")
    assert "--max-steps and --set train.epochs=1 both" in _error(*named, "--set", "train.epochs=1")
    assert "--set max_steps=3 and --epochs both" in _error(*named[:6], *named[8:], "--set", "max_steps=3",
                                                            "--epochs", "1")
    assert not (tmp_path / "g").exists()
    # --set max_steps replaces the recipe's epochs as --max-steps does (the epochs won without a word)
    _ok(*named[:6], *named[8:], "--set", "max_steps=3")
    stored = json.loads((tmp_path / "g" / "config.json").read_text())["train"]
    assert stored["max_steps"] == 3 and stored["epochs"] is None
    assert json.loads((tmp_path / "g" / "results.json").read_text())["steps"] == 3
    assert "not a bertkit run directory" in _error("finetune", "classify", "--model", tmp_path, "--train", train,
                                                   "--out", tmp_path / "d")
    # settings finetuning does not read, or sets itself, are refused rather than ignored
    assert "finetuning sets them from the task and its labels" in _error(*common, "--out", tmp_path / "f", "--set",
                                                                           "num_labels=7")
    assert "(did you mean task.finetune_dropout?)" in _error(*common, "--out", tmp_path / "f", "--set", "dropout=0.3")
    assert "--set model.pooling: model.pooling is now heads.classifier_pooling" in _error(
        *common, "--out", tmp_path / "f", "--set", "model.pooling=mean")
    assert not (tmp_path / "f").exists()


def test_auto_learning_rate_is_recorded_and_resumes(tmp_path, base):
    from bertkit.config import ModelConfig
    from bertkit.train.defaults import finetune_learning_rate

    train = _reviews(tmp_path / "train.csv", 30)
    out = tmp_path / "auto"
    args = ["finetune", "classify", "--model", base, "--train", train, "--text-column", "review", "--label-column",
            "stars", "--max-steps", "2", "--no-progress", "--set", "batch_size=8", "--out", out]
    result = _ok(*args)
    rate = json.loads((out / "config.json").read_text())["train"]["learning_rate"]
    width = json.loads((base / "config.json").read_text())["model"]["d_model"]
    assert rate == finetune_learning_rate("classify", ModelConfig(d_model=width, n_heads=4))
    assert f"learning rate {rate:g}" in " ".join(result.output.split())
    again = _ok(*args, "--resume")  # the run's chosen rate, not a "different run"
    assert "already finished" in " ".join(again.output.split())


def test_labels_are_normalised_bad_rows_counted_and_unseen_validation_labels_warned(tmp_path, base):
    # labels 1, "1", 1.0, true (and 0, "0", 0.0, false) in one file; 3 rows with no label, 3 with an empty text
    spellings = {"1": [1, "1", 1.0, True], "0": [0, "0", 0.0, False]}
    rows = []
    for i in range(32):
        label = "1" if i % 2 else "0"
        words = WORDS["positive" if label == "1" else "negative"]
        rows.append({"review": f"the film was {words[i % 3]}", "stars": spellings[label][i // 2 % 4]})
    for i in (4, 9, 14):
        rows[i]["stars"] = None if i == 4 else float("nan") if i == 9 else ""
    for i in (20, 25, 30):
        rows[i]["review"] = "  "
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))  # NaN as JSON's NaN
    valid = tmp_path / "valid.jsonl"
    valid.write_text("".join(json.dumps({"review": r["review"] or "x", "stars": s}) + "\n"
                             for r, s in zip(rows, [1, 0, "2", 1, 0, 2.0, 1, 0])))
    common = ["finetune", "classify", "--model", base, "--train", train, "--validation", valid, "--text-column",
              "review", "--label-column", "stars", "--max-steps", "2", "--no-progress", "--set", "batch_size=8"]
    line = _error(*common, "--out", tmp_path / "refused")
    assert line == (f"error: {train}:5: 3 of the file's 32 rows have no label, this one first; 3 have an empty text "
                    "(line 21 first); fill them in or remove them, or pass --skip-bad-lines to skip and count them")
    assert not (tmp_path / "refused").exists()

    out = tmp_path / "clf"
    # whitespace dropped: the console folds a path longer than its width mid-word (long temporary folders)
    output = "".join(_ok(*common, "--skip-bad-lines", "--out", out).output.split())
    assert "".join((f"warning: skipped 6 of 32 rows: 3 with no label ({train}:5 first), 3 with an empty text "
                    f"({train}:21 first)").split()) in output
    assert "".join((f"warning: validation ({valid}): 2 of 8 examples carry labels the training file lacks (2): "
                    "counted as errors").split()) in output
    assert "26training/8validationexamples,2labels" in output
    assert json.loads((out / "labels.json").read_text())["labels"] == ["0", "1"]  # one class per meaning

    # a validation file none of whose labels the training file has: refused before anything is written
    names = tmp_path / "names.jsonl"
    names.write_text("".join(json.dumps({"review": "fine", "stars": s}) + "\n" for s in ("good", "bad", "good")))
    line = _error(*common[:7], names, *common[8:], "--skip-bad-lines", "--out", tmp_path / "unseen")
    assert line == (f"error: {names}: none of its 3 validation examples has a label the training file has "
                    "(validation: bad, good; training: 0, 1): validation would measure nothing; check --validation "
                    "and --label-column, or leave --validation out to hold out part of --train")
    assert not (tmp_path / "unseen").exists()


def test_plot_titles_a_pretraining_by_its_objective(tmp_path):
    """A decoder's curves are next-token loss and accuracy (they were titled masked-LM); an encoder's stay MLM."""
    from bertkit.jobs.ablate_report import loss_name, markdown_table

    for objective, titles, kind in (("clm", ("LM loss (nats / token)", "next-token accuracy"), "LM"),
                                    ("mlm", ("MLM loss (nats / masked token)", "masked-token accuracy"), "MLM")):
        (tmp_path / "config.json").write_text(json.dumps({"train": {"objective": objective}}))
        assert pretraining_titles(tmp_path) == titles
        (tmp_path / "plan.json").write_text(json.dumps({"base": {"train": {"objective": objective}}}))
        assert loss_name(tmp_path) == kind
        assert f"| val {kind} loss |" in markdown_table([], "pretrain", None, [], kind)


def test_an_id_column_given_as_the_label_is_warned_by_finetune(tmp_path, base):
    ids = tmp_path / "ids.csv"
    ids.write_text("id,review,stars\n" + "".join(f"{i},the film was fine number {i},pos\n" for i in range(30)))
    result = _ok("finetune", "classify", "--model", base, "--train", ids, "--text-column", "review", "--label-column",
                 "id", "--max-steps", "1", "--no-progress", "--out", tmp_path / "run")
    assert "30 of its 30 labels label one row each" in " ".join(result.output.split())


def test_an_id_column_given_as_the_label_is_warned():
    """Most of ten or more classes labelling one example each: most often an ID column named as the label."""
    from bertkit.jobs.finetune import _check_singletons
    from bertkit.tasks.registry import finetune_task
    from bertkit.text.tasks import LabelledText, TaggedSentence

    classify, warnings = finetune_task("classify"), []
    by_id = [LabelledText(f"review {i}", None, str(i)) for i in range(12)]
    _check_singletons(classify, by_id, [str(i) for i in range(12)], "train.csv", warnings.append)
    assert warnings == ["train.csv: 12 of its 12 labels label one row each (a classifier cannot learn a class from "
                        "one example): is that the label column? (--label-column picks it)"]
    # a real label set, and few classes each seen once (a tiny file), are not judged
    stars = [LabelledText(f"review {i}", None, str(i % 12)) for i in range(48)]
    _check_singletons(classify, stars, [str(i) for i in range(12)], "train.csv", warnings.append)
    _check_singletons(classify, by_id[:9], [str(i) for i in range(9)], "train.csv", warnings.append)
    # NER counts tags over tokens: rare entity types on many tokens are not singletons
    tags = ["O"] + [f"{p}-T{i}" for i in range(6) for p in "BI"]
    sentences = [TaggedSentence(("a", "b", "c"), (f"B-T{i % 6}", f"I-T{i % 6}", "O")) for i in range(12)]
    _check_singletons(finetune_task("ner"), sentences, tags, "train.conll", warnings.append)
    assert len(warnings) == 1


def test_unseen_validation_tags_are_warned_and_counted():
    from bertkit.errors import BertkitError
    from bertkit.jobs.finetune import _check_unseen
    from bertkit.tasks.registry import finetune_task
    from bertkit.text.tasks import TaggedSentence

    ner, labels = finetune_task("ner"), ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    validation = [TaggedSentence(("Anna", "Lee", "in", "Lima"), ("B-PER", "I-PER", "O", "B-LOC")),
                  TaggedSentence(("EU", "says"), ("B-ORG", "O")), TaggedSentence(("UN", "IMF"), ("B-ORG", "B-MISC"))]
    warnings = []
    _check_unseen(ner, validation, labels, "dev.conll", warnings.append)
    assert warnings == ["validation (dev.conll): 3 of 6 entity tags carry labels the training file lacks (B-MISC, "
                        "B-ORG): counted as errors"]
    with pytest.raises(BertkitError, match=r"dev.conll: none of its 3 validation entity tags has a label the training "
                                           r"file has .*check --validation and --tag-column"):
        _check_unseen(ner, validation[1:], labels, "dev.conll", warnings.append)
    _check_unseen(ner, validation[:1], labels, "dev.conll", warnings.append)  # all known: nothing to say
    assert len(warnings) == 1
