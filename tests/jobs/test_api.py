"""The Python API under the CLI: every job is `run(XJob) -> XResult` (dataclasses). The README's Python example,
on a tiny model: pretrain → finetune → evaluate → predict in one process, each result typed and equal to what
the run directory says; resuming a finished run returns the same result (it used to return another dict shape)."""

import dataclasses
import json
from pathlib import Path

from rich.console import Console

from bertkit.jobs import evaluate, finetune, fill_mask, predict, pretrain
from bertkit.recipes import load_recipe, with_values
from bertkit.run.files import to_json
from conftest import repeated_corpus

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"
QUIET = Console(quiet=True)


def test_pretrain_finetune_evaluate_predict_from_python(tmp_path):
    corpus = repeated_corpus(tmp_path / "corpus.txt", 20)
    config = with_values(load_recipe("tiny"), {"data.corpus": (str(corpus),), "model.vocab_size": 400,
                                               "data.block_size": 32, "train.batch_size": 4,
                                               "tokenizer.min_frequency": 1, "train.max_steps": 6,
                                               "train.eval_every": 3})
    run = tmp_path / "pretrain"
    job = pretrain.PretrainJob(config, run, progress=False)
    result = pretrain.run(job, console=QUIET)
    assert isinstance(result, pretrain.PretrainResult) and result.out == run and result.step == 6
    stored = json.loads((run / "results.json").read_text())
    assert result.evaluation == stored["evaluation"] and result.baseline == stored["baseline"]
    assert result.step_seconds > 0 and not result.already_done

    again = pretrain.run(dataclasses.replace(job, resume=True), console=QUIET)  # finished: nothing to do
    assert again.already_done and again.step_seconds is None
    assert dataclasses.replace(again, already_done=False, step_seconds=result.step_seconds) == result

    masks = fill_mask.run(fill_mask.FillMaskJob(run, "the film was [MASK] .", top_k=3)).masks
    assert len(masks) == 1 and len(masks[0]) == 3 and masks[0][0].score >= masks[0][-1].score
    assert json.loads(to_json(masks))[0][0].keys() == {"token", "token_id", "score", "sequence"}

    data = SAMPLES / "sentiment.tsv"
    tune = with_values(load_recipe("finetune-sst2"), {"task.train_file": str(data), "task.validation_file": str(data),
                                                      "train.batch_size": 4, "train.max_steps": 4,
                                                      "train.eval_every": 2})
    tune = dataclasses.replace(tune, train=dataclasses.replace(tune.train, epochs=None, max_time=None))
    classifier = tmp_path / "classifier"
    tuned = finetune.run(finetune.FinetuneJob(tune, run, classifier, progress=False), console=QUIET)
    assert isinstance(tuned, finetune.FinetuneResult) and tuned.metric == "accuracy" and tuned.steps == 4
    assert tuned.score == json.loads((classifier / "results.json").read_text())["validation"]["accuracy"]

    scored = evaluate.run(evaluate.EvaluateJob(classifier, data), console=QUIET)
    assert scored.kind == "classify" and scored.scores["examples"] == len(data.read_text().splitlines()) - 1
    assert scored.scores["accuracy"] == tuned.score  # the final validation is `bertkit evaluate`'s own path

    texts = tmp_path / "texts.txt"
    texts.write_text("a wonderful film\na dull mess\n")
    out = tmp_path / "predictions.jsonl"
    predicted = predict.run(predict.PredictJob(classifier, texts, out), console=QUIET)
    assert [r["text"] for r in predicted.records] == ["a wonderful film", "a dull mess"]
    assert [json.loads(line) for line in out.read_text().splitlines()] == predicted.records
