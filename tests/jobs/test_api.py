"""The Python API under the CLI: every job takes an XJob and returns an XResult (dataclasses). The README's Python
example, on a tiny model: pretrain → fill-mask → finetune → evaluate → predict in one process, each result typed and
equal to what the run directory says; resuming a finished run returns the same result (it used to return another
dict shape)."""

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
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
                                                        "train.max_steps": 4, "train.eval_every": 2,
                                                        "train.max_time": "none"})  # as --max-steps 4 --max-time none
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

    # the in-code predictor reads texts as predict does: stripped, one str one text; what the run cannot read is
    # refused in a line (a pair for a single-text model was read as one; a tagger's call raised IndexError)
    from bertkit.embedding import SentenceEncoder
    from bertkit.errors import BertkitError
    from bertkit.inference import TaskModel

    model = TaskModel(tuned.out)  # predict's precision (auto)
    assert model.classify("  a wonderful film \n") == model.classify(["a wonderful film"])
    assert model.classify(["a wonderful film"])[0][0] == {k: v for k, v in predicted.records[0].items()
                                                          if k in ("label", "score", "scores")}
    for call, message in ((lambda: model.classify(["a"], ["b"]), "finetuned on single texts"),
                          (lambda: model.tag(["a b"], [[(0, 1), (2, 3)]]), "is a classifier: TaskModel.classify"),
                          (lambda: TaskModel(tuned.out, batch_size=0), "batch_size must be a whole number >= 1"),
                          (lambda: SentenceEncoder(trained.out, device="gpu"), "'gpu': not a device torch knows"),
                          (lambda: pretrain.PretrainJob("tiny", out=tmp_path / "x"), r"load_recipe\('tiny'\)")):
        with pytest.raises(BertkitError, match=message):
            call()

    # plotting draws on a Figure of its own: the caller's backend (a notebook's inline one) is left as it was
    import matplotlib

    from bertkit.jobs import plot

    before = matplotlib.get_backend()
    matplotlib.use("svg")
    try:
        assert plot.run(plot.PlotJob(trained.out, tmp_path / "curves.png")).path.read_bytes()[:4] == b"\x89PNG"
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)


def test_with_values_means_what_the_command_options_mean():
    """From Python, `with_values` did not do what the same options do on the command line: a step count left the
    recipe's epochs in charge (7 steps where --max-steps 20 trained 20), a time budget kept the 1,000-step default
    cap (a 40 s run stopped at step 1,000 where --max-time 40s trained 1,607), and nothing could clear a value."""
    from bertkit.config import BUDGET_STEPS
    from bertkit.errors import ConfigError

    sst2 = load_recipe("finetune-sst2")
    assert sst2.train.epochs is not None
    steps = with_values(sst2, {"train.max_steps": 20})
    assert (steps.train.max_steps, steps.train.epochs) == (20, None)  # as --max-steps 20
    with pytest.raises(ConfigError, match="train.max_steps and train.epochs both set the run's length"):
        with_values(sst2, {"train.max_steps": 20, "train.epochs": 2})
    cleared = with_values(sst2, {"train.epochs": "none", "train.max_time": "None"})  # as --set epochs=none
    assert (cleared.train.epochs, cleared.train.max_time) == (None, None)

    budget = with_values(load_recipe("tiny"), {"train.max_time": "40s"})  # as --max-time 40s
    assert budget.train.max_steps == BUDGET_STEPS == load_recipe("tiny", ["max_time=40s"]).train.max_steps
    assert with_values(budget, {"train.max_time": "none"}).train.max_steps == 1000  # the cap is back
    assert with_values(budget, {"train.max_steps": 50}).train.max_steps == 50
    assert with_values(with_values(load_recipe("tiny"), {"train.max_steps": 50}),
                       {"train.max_time": "40s"}).train.max_steps == 50  # a step count given stays
    demo = load_recipe("demo")  # a recipe's own step count stays too
    assert with_values(demo, {"train.max_time": "2m"}).train.max_steps == demo.train.max_steps != BUDGET_STEPS


def test_a_job_refuses_keys_its_command_never_reads(tmp_path):
    """From Python a key the command never reads trained as if not given and was stored as if it had counted (a
    classifier's config.json said `objective: clm`); the jobs refuse it as the command refuses it in --set."""
    from bertkit.errors import ConfigError

    sst2 = load_recipe("finetune-sst2")
    for key, value, said in (("model.n_layers", 4, "model.n_layers is not read by finetune classify (it reads "
                                                    "[task], [heads], [train])"),
                             ("train.objective", "clm", "train.objective does nothing in finetune classify")):
        with pytest.raises(ConfigError, match=re.escape(said)):
            finetune.run(finetune.FinetuneJob(with_values(sst2, {key: value}), tmp_path / "base", tmp_path / "out"))
    with pytest.raises(ConfigError, match="train.patience does nothing in pretrain"):
        pretrain.run(pretrain.PretrainJob(with_values(load_recipe("tiny"), {"patience": 1}), tmp_path / "p"))
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_jobs_read_one_str_as_one_item(tmp_path):
    """`SearchJob(index, "guitar")` ran six one-letter searches, `TranslateJob(run, "A dog.")` translated each
    letter, `GlueJob(tasks="wnli")` looked for a task 'w'."""
    from bertkit.jobs import ablate, generate, glue, probe, search, translate

    assert search.SearchJob(tmp_path, "guitar").queries == ("guitar",)
    assert search.SearchJob(tmp_path, ["a", "b"]).queries == ("a", "b")
    assert translate.TranslateJob(tmp_path, "A dog.").sentences == ("A dog.",)
    assert generate.GenerateJob(tmp_path, "The movie").prompts == ("The movie",)
    job = glue.GlueJob(tmp_path / "run", tmp_path / "out", tasks="wnli", overrides="seed=1")
    assert (job.models, job.tasks, job.overrides) == ((tmp_path / "run",), ("wnli",), ("seed=1",))
    assert probe.ProbeJob("runs/a", "pos", "conll2003/train.txt", tmp_path).models == ("runs/a",)
    assert ablate.AblationJob("tiny", "model.norm=rmsnorm", "10s", tmp_path).vary == ("model.norm=rmsnorm",)
    assert job.budget == "5m" and glue.GlueJob("run", tmp_path, budget="none").budget is None  # as --budget none
    assert load_recipe("tiny", "d_model=64").model.d_model == 64  # one override, not its characters


def test_generate_job_samples_as_the_command_does():
    """GenerateJob sampled from every token (top-k 0, top-p 1) where `bertkit generate` takes the top 50 holding
    0.95: the same seed and prompts gave other text from Python."""
    import typer.main

    from bertkit.cli import app
    from bertkit.jobs.generate import GenerateJob

    params = {p.name: p.default for p in typer.main.get_command(app).commands["generate"].params}
    sampling = GenerateJob(Path("run"), ("a",)).sampling
    assert (sampling.top_k, sampling.top_p, sampling.temperature) == (params["top_k"], params["top_p"],
                                                                      params["temperature"])


def test_a_result_holds_what_its_results_file_holds():
    """An undefined metric (NaN) is null in results.json; the result built from a fresh run's summary holds it as
    stored, so it equals the one a resume reads back, and `score` still reads it as NaN."""
    summary = {"metric": "spearman", "best_step": 3, "steps": 4, "validation": {"spearman": math.nan}}
    fresh = FinetuneResult.from_results(Path("run"), summary)
    assert fresh == FinetuneResult.from_results(Path("run"), json.loads(to_json(summary)))
    assert fresh.validation == {"spearman": None} and math.isnan(fresh.score)
