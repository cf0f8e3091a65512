"""What a finetuning's validation set can make of the checkpoint it picks: a NER validation set without an entity
picks by the loss (entity F1 is 0 whatever the model tags), and validation examples cut at the maximum length are
said, as training's are; `evaluate --predictions` writes the answers its scores are made of."""

import json

from conftest import cli_error, cli_ok, merged
from test_finetune import FAST, _conll, _reviews


def test_a_ner_validation_set_without_an_entity_picks_the_checkpoint_by_its_loss(tmp_path, base):
    # every evaluation scored F1 0, so the first was kept as "best" while the validation loss still fell
    train = _conll(tmp_path / "train.conll", 40)
    plain = tmp_path / "plain.conll"
    plain.write_text("the DT O\ncat NN O\nsat VBD O\n\nit PRP O\nrained VBD O\n")
    out = tmp_path / "ner"
    args = merged(["finetune", "ner", "--model", base, "--train", train, "--validation", plain, "--max-steps", "8",
                   *FAST], ["--set", "eval_every=2"])
    said = "".join(cli_ok(*args, "--out", out).output.split())  # the console folds a long path mid-word
    assert "".join(f"warning: validation ({plain}) has no entity: entity f1 is 0 whatever the model tags, so the "
                   "best checkpoint is picked by validation val_loss".split()) in said
    assert "bestcheckpointbyvalidationval_loss" in said
    evaluations = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = {r["step"]: r["val_loss"] for r in evaluations if r.get("kind") == "eval"}
    assert len(losses) == 4 and json.loads((out / "results.json").read_text())["best_step"] == min(losses,
                                                                                                   key=losses.get)
    # a CoNLL file given to predict: each "word POS tag" line was tagged as a sentence, without a word
    said = "".join(cli_ok("predict", "--model", out, train).output.split())
    assert "".join(f"warning: {train} looks like a CoNLL file (a word and its tags per line): predict tags raw "
                   "text".split()) in said
    raw = tmp_path / "raw.txt"
    raw.write_text("Maria Lee lives in Tokyo.\nPeter Smith is in Lima.\nAnna Lee O\n")  # one line of three alike
    assert "looks like a CoNLL" not in cli_ok("predict", "--model", out, raw).output
    # asked for by name, it cannot pick anything: refused before anything is written
    line = cli_error(*args, "--set", "train.metric=f1", "--out", tmp_path / "asked")
    assert "train.metric: validation" in line and "has no entity" in line and "train.metric=val_loss" in line
    assert not (tmp_path / "asked").exists()


def test_validation_examples_cut_at_the_maximum_length_are_said(tmp_path, base):
    # training's were counted in a warning; validation's were not, though their words past the cut count as misses
    train = _conll(tmp_path / "train.conll", 40)
    valid = _conll(tmp_path / "valid.conll", 10, seed=1)
    with valid.open("a") as fh:
        fh.write("\n\n" + "\n".join(f"word{i} NN O" for i in range(40)) + "\nParis NNP I-LOC\n")
    said = "".join(cli_ok("finetune", "ner", "--model", base, "--train", train, "--validation", valid, "--out",
                          tmp_path / "ner", "--max-steps", "2", *FAST, "--set", "task.max_length=32").output.split())
    assert "".join("warning: 1 of 11 validation examples are longer than 32 tokens and were truncated "
                   "(task.max_length): what they lose counts against the validation metric".split()) in said


def test_evaluate_writes_the_answers_its_scores_are_made_of(tmp_path, base):
    # an evaluation wrote its scores only: nobody could check them or look at what the model got wrong
    from seqeval.metrics import f1_score
    from sklearn.metrics import accuracy_score

    ner, clf = tmp_path / "ner", tmp_path / "clf"
    cli_ok("finetune", "ner", "--model", base, "--train", _conll(tmp_path / "train.conll", 40), "--out", ner,
           "--max-steps", "20", *FAST)
    cli_ok("finetune", "classify", "--model", base, "--train", _reviews(tmp_path / "train.csv", 60), "--text-column",
           "review", "--label-column", "stars", "--out", clf, "--max-steps", "20", *FAST)
    test = _conll(tmp_path / "test.conll", 12, seed=3)
    report, answers = tmp_path / "ner.json", tmp_path / "ner.jsonl"
    cli_ok("evaluate", "--model", ner, "--data", test, "-o", report, "--predictions", answers)
    records = [json.loads(line) for line in answers.read_text().splitlines()]
    assert len(records) == 12 and [len(r["tokens"]) for r in records] == [6] * 12
    assert all(len(r["gold"]) == len(r["tags"]) == len(r["tokens"]) for r in records)
    assert json.loads(report.read_text())["f1"] == f1_score([r["gold"] for r in records],
                                                            [r["tags"] for r in records], mode="strict")
    for record in records:  # predict's entities, into the sentence as its tokens joined by spaces
        assert record["text"] == " ".join(record["tokens"])
        assert all(record["text"][e["start"]:e["end"]] == e["text"] for e in record["entities"])
    # a rerun is refused without --overwrite, and a file that is not bertkit's answers even with it
    assert "--overwrite" in cli_error("evaluate", "--model", ner, "--data", test, "--predictions", answers)
    cli_ok("evaluate", "--model", ner, "--data", test, "--predictions", answers, "--overwrite")
    line = cli_error("evaluate", "--model", ner, "--data", test, "--predictions", tmp_path / "train.conll",
                     "--overwrite")
    assert "--overwrite replaces only a predictions file" in line
    assert "the same file as --out" in cli_error("evaluate", "--model", ner, "--data", test, "-o", report,
                                                 "--predictions", report, "--overwrite")

    data = _reviews(tmp_path / "test.csv", 15, seed=4)
    said = cli_ok("evaluate", "--model", clf, "--data", data, "--predictions", tmp_path / "clf.jsonl").output
    records = [json.loads(line) for line in (tmp_path / "clf.jsonl").read_text().splitlines()]
    assert [r["text"] for r in records] == [line.split(",")[0] for line in data.read_text().splitlines()[1:]]
    accuracy = accuracy_score([r["gold"] for r in records], [r["label"] for r in records])
    assert f"accuracy {accuracy:.4f}" in said and {"scores", "score"} <= records[0].keys()
