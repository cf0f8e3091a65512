"""The Python API under the CLI: every job takes an XJob and returns an XResult (dataclasses). The README's Python
example, on a tiny model: pretrain → fill-mask → finetune → evaluate → predict in one process, each result typed and
equal to what the run directory says; resuming a finished run returns the same result (it used to return another
dict shape)."""

import dataclasses
import json
import math
from pathlib import Path

from rich.console import Console

from bertkit.jobs import evaluate, fill_mask, finetune, predict, pretrain
from bertkit.recipes import load_recipe, with_values
from bertkit.run.files import to_json
from bertkit.train.results import FinetuneResult
from conftest import repeated_corpus

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
QUIET = Console(quiet=True)


def test_with_values_names_an_unknown_key_as_set_does():
    """A misspelt key was dataclasses' TypeError from deep inside; it is the ConfigError --set gives (bare keys too)."""
    import pytest

    from bertkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"with_values: train.max_tim: unknown key \(did you mean"):
        with_values(load_recipe("tiny"), {"train.max_tim": "2m"})
    assert with_values(load_recipe("tiny"), {"max_time": "2m"}).train.max_time == "2m"


def test_pretrain_finetune_evaluate_predict_from_python(tmp_path):
    corpus = repeated_corpus(tmp_path / "corpus.txt", 20)
    # the README's recipes: demo (max_len 64), then finetune-sst2 with task.max_length 64, as the README sets it
    config = with_values(load_recipe("demo"), {"data.corpus": (str(corpus),), "model.vocab_size": 400,
                                               "data.block_size": 32, "train.batch_size": 4,
                                               "tokenizer.min_frequency": 1, "train.max_steps": 6,
                                               "train.eval_every": 3})
    job = pretrain.PretrainJob(config, out=str(tmp_path / "pretrain"), progress=False)  # a str path is fine
    trained = pretrain.run(job, console=QUIET)
    assert isinstance(trained, pretrain.PretrainResult) and trained.out == tmp_path / "pretrain"
    stored = json.loads((trained.out / "results.json").read_text())
    assert trained.step == stored["step"] == 6 and trained.evaluation == stored["evaluation"]
    assert trained.baseline == stored["baseline"] and trained.step_seconds > 0 and not trained.already_done

    again = pretrain.run(dataclasses.replace(job, resume=True), console=QUIET)  # finished: nothing to do
    assert again.already_done and again.step_seconds is None
    assert dataclasses.replace(again, already_done=False, step_seconds=trained.step_seconds) == trained

    masks = fill_mask.run(fill_mask.FillMaskJob(trained.out, "the film was [MASK] .", top_k=3)).masks
    assert len(masks) == 1 and len(masks[0]) == 3 and masks[0][0].score >= masks[0][-1].score
    assert json.loads(to_json(masks))[0][0].keys() == {"token", "token_id", "score", "sequence"}

    data = SAMPLES / "sentiment.tsv"
    recipe = with_values(load_recipe("finetune-sst2"), {"task.max_length": 64, "task.train_file": str(data),
                                                        "task.validation_file": str(data), "train.batch_size": 4,
                                                        "train.max_steps": 4, "train.eval_every": 2})
    recipe = dataclasses.replace(recipe, train=dataclasses.replace(recipe.train, epochs=None, max_time=None))
    tune = finetune.FinetuneJob(recipe, model=trained.out, out=tmp_path / "sst2", progress=False)
    tuned = finetune.run(tune, console=QUIET)
    assert isinstance(tuned, FinetuneResult) and tuned.metric == "accuracy" and tuned.steps == 4
    assert tuned.best_step in (2, 4) and tuned.score == tuned.validation["accuracy"]
    assert tuned.validation == json.loads((tuned.out / "results.json").read_text())["validation"]
    assert dataclasses.replace(finetune.run(dataclasses.replace(tune, resume=True), console=QUIET),
                               already_done=False) == tuned

    dev = evaluate.run(evaluate.EvaluateJob(tuned.out, data=data, precision=tuned.precision), console=QUIET)
    examples = sum(1 for line in data.read_text().splitlines()[1:] if line.strip())
    assert dev.kind == "classify" and dev.scores["examples"] == examples
    assert sum(map(sum, dev.scores["confusion"]["matrix"])) == examples
    assert dev.scores["accuracy"] == tuned.score  # the final validation is `bertkit evaluate`'s own path

    texts = tmp_path / "texts.txt"
    texts.write_text("a wonderful film\na dull mess\n")
    out = tmp_path / "predictions.jsonl"
    predicted = predict.run(predict.PredictJob(tuned.out, texts, out), console=QUIET)
    assert [r["text"] for r in predicted.records] == ["a wonderful film", "a dull mess"]
    assert [json.loads(line) for line in out.read_text().splitlines()] == predicted.records


def test_a_result_holds_what_its_results_file_holds():
    """An undefined metric (NaN) is null in results.json; the result built from a fresh run's summary holds it as
    stored, so it equals the one a resume reads back, and `score` still reads it as NaN."""
    summary = {"metric": "spearman", "best_step": 3, "steps": 4, "validation": {"spearman": math.nan}}
    fresh = FinetuneResult.from_results(Path("run"), summary)
    assert fresh == FinetuneResult.from_results(Path("run"), json.loads(to_json(summary)))
    assert fresh.validation == {"spearman": None} and math.isnan(fresh.score)
