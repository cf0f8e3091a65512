"""`bertkit ablate`: budgets, the plan (one change at a time or a grid, invalid combinations kept with the reason),
the outputs, resume (finished variants are reused, unfinished ones start again), and bad flags as one line."""

import csv
import json
from pathlib import Path

import pytest

from conftest import SAMPLE_CORPUS, cli_error, cli_ok, repeated_corpus

from bertkit.ablation import Budget, build_plan, parse_vary
from bertkit.errors import BertkitError
from bertkit.recipes import load_recipe

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--recipe", "tiny", "--set", "vocab_size=300", "--set", "block_size=32", "--set", "batch_size=4",
        "--set", "min_frequency=1", "--set", "eval_every=2", "--set", "data.validation_fraction=0.2", "--no-progress"]


@pytest.fixture
def corpus(tmp_path):
    return repeated_corpus(tmp_path / "corpus.txt", 6)


def test_budget_parses_time_tokens_and_steps():
    assert Budget.parse("5m").kind == "time" and Budget.parse("5m").amount == 300
    assert Budget.parse("90s").amount == 90
    tokens = Budget.parse("2Mtok")
    assert (tokens.kind, tokens.amount) == ("tokens", 2e6)
    assert Budget.parse("500k tokens").amount == 5e5
    assert Budget.parse("300steps").kind == "steps"
    # a token budget becomes the steps that consume it (rounded up), time is then out of the way
    assert tokens.overrides(4096)[:2] == ["train.max_steps=489", "train.max_time=none"]
    assert Budget.parse("5m").overrides(4096)[0] == "train.max_time=300.0s"
    for bad in ("abc", "0tok", "-5m", "5 parsecs", "2M"):
        with pytest.raises(BertkitError, match="--budget"):
            Budget.parse(bad)
    # a bare number is seconds to --max-time, but an ablation's budget can be steps or tokens too
    with pytest.raises(BertkitError, match=r"--budget '5': a number alone is ambiguous; write 5s \(seconds\), "
                                           r"5steps or 5tok"):
        Budget.parse("5")
    # --finetune-budget takes no tokens: its errors name it and suggest only what it takes
    with pytest.raises(BertkitError, match=r"^--finetune-budget '5': a number alone is ambiguous; write 5s "
                                           r"\(seconds\), 5steps$"):
        Budget.parse("5", "--finetune-budget", tokens=False)
    with pytest.raises(BertkitError, match=r"^--finetune-budget '2Mtok': give a time \(2m\) or steps"):
        Budget.parse("2Mtok", "--finetune-budget", tokens=False)
    for bad in (".", "1.2.3"):  # not numbers: the general message, not "write 1.2.3s"
        with pytest.raises(BertkitError, match="expected a time"):
            Budget.parse(bad)


def _plan(vary, grid=False):
    return build_plan(lambda changes: load_recipe("tiny", changes), parse_vary(vary), grid)


def test_values_spelled_two_ways_are_one_variant_run_once_and_said():
    """`learning_rate=1e-3,0.001` trained two identical variants shown as two rows: the second is the first's
    config, left out of the plan and named with it (a review, 2026-11-28); the base's own value stays the base."""
    base_rate = load_recipe("tiny").train.learning_rate
    plan = _plan([f"learning_rate=1e-3,0.001,{base_rate}"])
    assert [v.name for v in plan.variants] == ["base", "learning_rate=1e-3"]
    assert plan.same == [("learning_rate=0.001", "learning_rate=1e-3"), (f"learning_rate={base_rate}", "base")]


def _row(variant, seed, loss, status="ok"):
    """One ablation.csv row, as the report reads it."""
    return {"variant": variant, "changes": "" if variant == "base" else "model.positions=rotary", "seed": seed,
            "status": status, "params": 1e6, "steps": 100, "tokens": 1e6, "train_seconds": 10, "tokens_per_s": 1e5,
            "val_loss": loss, "val_accuracy": 0.3 if status == "ok" else None, "downstream_metric": None,
            "downstream": None, "downstream_examples": None, "message": None if status == "ok" else "diverged"}


def test_a_failed_seed_keeps_the_delta_paired_and_the_row_says_how_many_seeds():
    """Seed 2 is hard for both; the variant is 0.05 better on each seed it finished and failed seed 2: comparing
    its 2-seed mean with the base's 3-seed one read -0.247."""
    from bertkit.ablation import summarise
    from bertkit.jobs.ablate_report import markdown_table

    rows = [_row("base", 0, 5.00), _row("base", 1, 5.02), _row("base", 2, 5.60),
            _row("positions=rotary", 0, 4.95), _row("positions=rotary", 1, 4.97),
            _row("positions=rotary", 2, None, "failed")]
    table = markdown_table(summarise(rows), "pretrain", None, rows)
    line = next(line for line in table.splitlines() if line.startswith("| positions=rotary"))
    assert line.startswith("| positions=rotary (2/3 seeds) |") and "| -0.050 |" in line
    assert "Δ loss is the mean of the per-seed differences over the seeds both runs finished" in table
    complete = rows[:5] + [_row("positions=rotary", 2, 5.55)]  # every seed: the paired mean is the means' difference
    line = next(line for line in markdown_table(summarise(complete), "pretrain", None, complete).splitlines()
                if line.startswith("| positions=rotary |"))
    assert f"| {(4.95 + 4.97 + 5.55 - 5.00 - 5.02 - 5.60) / 3:+.3f} |" in line


def test_a_seed_that_failed_for_every_variant_is_named_not_dropped():
    """Seed 2 failed for the base and the variant: counting finished seeds only, the table read as a clean 2-seed
    ablation and seed 2 was gone from ablation.md (review, 2026-11-28)."""
    from bertkit.ablation import summarise
    from bertkit.jobs.ablate_report import markdown_table

    rows = [_row("base", 0, 5.00), _row("base", 1, 5.02), _row("base", 2, None, "failed"),
            _row("positions=rotary", 0, 4.95), _row("positions=rotary", 1, 4.97),
            _row("positions=rotary", 2, None, "failed")]
    table = markdown_table(summarise(rows), "pretrain", None, rows)
    assert "| base (2/3 seeds) |" in table and "| positions=rotary (2/3 seeds) |" in table
    assert "Seed 2 failed for every variant" in table
    assert "failed for every variant" not in markdown_table(summarise(rows[:2] + rows[3:5]), "pretrain", None,
                                                            rows[:2] + rows[3:5])
    # not while the variant is still to run (the report is written after each), nor for a seed variant's own seed
    # (a second review)
    early = rows[:3]
    assert "failed for every variant" not in markdown_table(summarise(early), "pretrain", None, early)
    seeds = [_row("base", 0, 5.0), {**_row("seed=2", 2, None, "failed"), "changes": "train.seed=2"}]
    assert "failed for every variant" not in markdown_table(summarise(seeds), "pretrain", None, seeds)
    # and a seed variant beside does not hide a shared seed lost everywhere (a third review)
    beside = rows + [{**_row("seed=7", 7, 5.1), "changes": "train.seed=7"},
                     {**_row("seed=7+positions=rotary", 7, 5.0), "changes": "train.seed=7 model.positions=rotary"}]
    assert "Seed 2 failed for every variant" in markdown_table(summarise(beside), "pretrain", None, beside)


def test_a_seed_variant_shares_no_seed_with_the_base_and_gets_the_unpaired_delta():
    """`--vary seed=1` runs on seed 1, the base on the recipe's 0: the paired Δ found no common seed and showed "–"
    where the docs read the seed-to-seed noise (review, 2026-11-28)."""
    from bertkit.ablation import summarise
    from bertkit.jobs.ablate_report import markdown_table

    rows = [_row("base", 0, 5.00), {**_row("seed=1", 1, 5.07), "changes": "train.seed=1"}]
    table = markdown_table(summarise(rows), "pretrain", None, rows)
    line = next(line for line in table.splitlines() if line.startswith("| seed=1"))
    assert "| +0.070 (unpaired) |" in line and "Δ loss marked unpaired" in table
    # not a seed variant: a change on a seed the base failed (or a grid cell changing the seed and more) is no noise
    # estimate, and its difference of means was shown as one
    rows = [_row("base", 0, 5.00), _row("base", 1, None, "failed"), _row("positions=rotary", 0, None, "failed"),
            _row("positions=rotary", 1, 5.60),
            {**_row("seed=1,positions=rotary", 1, 4.80), "changes": "train.seed=1 model.positions=rotary"}]
    table = markdown_table(summarise(rows), "pretrain", None, rows)
    for name in ("positions=rotary", "seed=1,positions=rotary"):
        line = next(line for line in table.splitlines() if line.startswith(f"| {name} "))
        assert "(unpaired)" not in line and "| – |" in line, line
    assert "Δ loss marked unpaired" not in table


def test_a_variant_scored_on_other_targets_is_shown_not_ranked():
    """A 40% masking rate, whole-word masks or ELECTRA's generator score their validation loss on other targets than
    the base's: the table bolded mlm_probability=0.4 as the best and gave each a Δ, without a word (review,
    2026-11-29)."""
    from bertkit.ablation import summarise
    from bertkit.jobs.ablate_report import markdown_table

    rows = [_row("base", 0, 6.806), {**_row("mlm_probability=0.4", 0, 6.789), "changes": "data.mlm_probability=0.4"},
            {**_row("objective=rtd", 0, 6.70), "changes": "train.objective=rtd"},
            {**_row("positions=rotary", 0, 6.80), "changes": "model.positions=rotary"}]
    table = markdown_table(summarise(rows), "pretrain", None, rows)
    lines = {line.split(" |")[0][2:]: line for line in table.splitlines() if line.startswith("| ")}
    for name in ("mlm_probability=0.4", "objective=rtd"):
        assert "**" not in lines[name] and "† | – † |" in lines[name], lines[name]
    assert "**6.800**" in lines["positions=rotary"] and "| -0.006 |" in lines["positions=rotary"]
    assert "† Scored on other validation targets than the base" in table
    plain = rows[:1] + rows[3:]
    assert "†" not in markdown_table(summarise(plain), "pretrain", None, plain)
    # another corpus or text field holds out other documents (review, 2026-11-29)
    from bertkit.jobs.ablate_report import other_targets

    assert other_targets({"changes": "data.corpus=['b.txt']"}) and other_targets({"changes": "data.text_field=body"})


def test_a_token_budget_counts_corpus_text_so_contrastive_variants_see_the_same_data():
    # a contrastive variant's rows are two views of each block: counted per row, a 2Mtok budget gave it half the
    # text, and its halves' tokens seen and tokens/s read twice what it trained on (review, 2026-11-29)
    from bertkit.ablation import Budget
    from bertkit.jobs.ablate import tokens_per_step
    from bertkit.recipes import load_recipe, with_values

    base = load_recipe("tiny")
    plain = base.train.batch_size * base.train.accumulation_steps * base.data.block_size
    assert tokens_per_step(base) == plain
    for views in ("maskings", "halves"):
        contrastive = with_values(base, {"train.contrastive_weight": 1.0, "train.contrastive_views": views})
        assert tokens_per_step(contrastive) == plain // 2
        budget = Budget.parse("100000tok")
        steps = [int(o.split("=")[1]) for o in budget.overrides(tokens_per_step(contrastive)) if "max_steps" in o]
        assert steps[0] * plain // 2 >= 100_000 > (steps[0] - 1) * plain // 2  # the blocks of 100k tokens of text


def test_one_change_at_a_time_skips_the_base_value_and_keeps_invalid_variants():
    plan = _plan(["positions=learned,rotary,none", "n_heads=2,3", "norm_position=pre"])
    names = [v.name for v in plan.variants]
    # tiny has learned positions and 2 heads: those values are the base itself
    assert names == ["base", "positions=rotary", "positions=none", "n_heads=3", "norm_position=pre"]
    invalid = {v.name: v.invalid for v in plan.variants if v.config is None}
    assert list(invalid) == ["n_heads=3"] and "not divisible" in invalid["n_heads=3"]
    rotary = plan.variants[1].config
    assert rotary.model.positions == "rotary" and rotary.model.norm_position == plan.base.model.norm_position


def test_grid_crosses_every_value_once():
    plan = _plan(["positions=learned,rotary,relative", "activation=gelu,relu"], grid=True)
    names = [v.name for v in plan.variants]
    assert len(names) == 6 and names[0] == "base"  # 3 x 2 combinations, the base's own one first
    assert "positions=relative+activation=relu" in names
    assert sum(v.config == plan.base for v in plan.variants) == 1


def test_bad_vary_flags_name_the_problem():
    with pytest.raises(BertkitError, match="expected KEY=VALUE"):
        parse_vary(["positions"])
    with pytest.raises(BertkitError, match="given twice"):
        parse_vary(["positions=rotary", "model.positions=none"])
    with pytest.raises(Exception, match="positoins"):
        parse_vary(["positoins=rotary"])


def test_a_key_pretraining_never_reads_is_refused_in_vary_and_set(tmp_path):
    """`--vary patience=1,5` gave two variants identical to the base and to each other, shown as an ablation;
    `--set train.patience=3` was taken, where `bertkit pretrain` refuses both (review, 2026-11-28)."""
    from bertkit.jobs.ablate import AblationJob, make_plan

    for vary, sets, said in ((("patience=1,5",), (), "--vary train.patience: does nothing in pretraining"),
                             (("epochs=1,2",), (), "--vary train.epochs: does nothing in pretraining"),
                             (("positions=rotary",), ("train.patience=3",),
                              "--set train.patience: train.patience does nothing in pretrain")):
        with pytest.raises(BertkitError, match=said):
            make_plan(AblationJob("tiny", vary, "5steps", tmp_path / "abl", sets, corpus=(str(SAMPLE_CORPUS),)))
    plan, _ = make_plan(AblationJob("tiny", ("positions=rotary",), "5steps", tmp_path / "abl",
                                    corpus=(str(SAMPLE_CORPUS),)))
    assert [v.name for v in plan.variants] == ["base", "positions=rotary"]


def test_variant_names_and_plans_from_before_the_config_split_are_found_again(tmp_path):
    from bertkit.ablation import _short, check_plan_file

    assert _short("model.positions=rotary") == "positions=rotary"
    assert _short("model.dropout=0") == "model.dropout=0"  # a key two sections shared then: named whole, as then
    base = load_recipe("tiny").to_dict()
    finetune = load_recipe("finetune-sst2").to_dict()
    record = json.loads(json.dumps({"base": base, "budget": {"kind": "steps", "amount": 4}, "task": "classify",
                                    "finetune": finetune}))
    old = json.loads(json.dumps(record))  # the same plan as an earlier bertkit wrote it
    for shape in (old["base"], old["finetune"]):
        heads = shape.pop("heads")
        shape["model"].update(heads=heads["names"], num_labels=heads["num_labels"], pooling="cls")
        loss = shape.pop("sentence_loss")
        loss.pop("cross_process_negatives")  # newer than the split
        shape["task"].update(dropout=shape["task"].pop("finetune_dropout"),
                             validation_fraction=shape["task"].pop("validation_split"), pooling="cls",
                             **loss, **shape.pop("seq2seq"))
        shape["sentence"]["max_length"] = shape["sentence"].pop("max_seq_length")
    (tmp_path / "plan.json").write_text(json.dumps(old))
    check_plan_file(tmp_path / "plan.json", record)  # the same plan: no error
    old["finetune"]["task"]["dropout"] = 0.3
    (tmp_path / "plan.json").write_text(json.dumps(old))
    with pytest.raises(BertkitError, match="different finetune .task.finetune_dropout: 0.3 there, 0.1 now"):
        check_plan_file(tmp_path / "plan.json", record)


def _rows(out):
    with (out / "ablation.csv").open() as fh:
        return list(csv.DictReader(fh))


def test_ablate_writes_table_csv_plot_and_resumes(tmp_path, corpus, monkeypatch):
    out = tmp_path / "abl"
    args = ["ablate", *TINY, "--corpus", corpus, "--budget", "4steps", "--vary", "positions=learned,rotary",
            "--vary", "n_heads=3", "--seed", 0, "--seed", 1, "-o", out]
    result = cli_ok(*args)
    rows = _rows(out)
    assert [(r["variant"], r["seed"], r["status"]) for r in rows] == [
        ("base", "0", "ok"), ("base", "1", "ok"), ("positions=rotary", "0", "ok"), ("positions=rotary", "1", "ok"),
        ("n_heads=3", "0", "invalid"), ("n_heads=3", "1", "invalid")]
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(r["steps"] == "4" and r["tokens"] == str(4 * 4 * 32) for r in ok)  # the same budget for all
    assert all(float(r["tokens_per_s"]) > 0 and 0 <= float(r["val_accuracy"]) <= 1 for r in ok)
    # rotary positions have no position table: fewer parameters than the base's learned ones
    assert int(ok[2]["params"]) == int(ok[0]["params"]) - 128 * 32  # tiny: max_len 128, d_model 32
    # seeds differ, and each number is the run's own final evaluation
    assert ok[0]["val_loss"] != ok[1]["val_loss"]
    final = json.loads((out / "variants/positions=rotary/seed-1/pretrain/results.json").read_text())
    assert float(ok[3]["val_loss"]) == pytest.approx(final["evaluation"]["val_loss"])
    table = (out / "ablation.md").read_text()
    assert "| base |" in table and "± " in table and "invalid: model.d_model: 32 is not divisible" in table
    assert "Mean ± standard deviation over 2 seeds" in table and table in result.output
    assert "Unigram baseline (predicting every masked token by its corpus frequency): loss " in table
    assert (out / "ablation.png").read_bytes()[:4] == b"\x89PNG"
    # an invalid variant is said before the base trains (a typo does not wait for the base's budget)
    assert result.output.index("n_heads=3: invalid, skipped") < result.output.index("[1/4]")

    # Re-running reuses every finished variant; a new value runs only the new variant; an unfinished one restarts.
    from bertkit.jobs import pretrain

    calls = []
    real = pretrain.run
    monkeypatch.setattr(pretrain, "run", lambda job, **kw: calls.append(job.out) or real(job, **kw))
    (out / "variants/positions=rotary/seed-1/result.json").unlink()  # as if killed before it finished
    cli_ok(*args[:-2], "--vary", "activation=relu", "-o", out)
    assert [Path(c).parent.parent.name + "/" + Path(c).parent.name for c in calls] == [
        "positions=rotary/seed-1", "activation=relu/seed-0", "activation=relu/seed-1"]
    again = _rows(out)
    timing = ("train_seconds", "tokens_per_s")
    # exact resume: seeded data and init give the same numbers again (timings aside)
    assert [{k: v for k, v in r.items() if k not in timing} for r in again[:4]] == \
        [{k: v for k, v in r.items() if k not in timing} for r in rows[:4]]
    assert len(again) == 8

    # Another budget in the same directory would mix numbers that cannot be compared.
    line = cli_error(*[a if a != "4steps" else "6steps" for a in args])
    assert "different budget" in line and "4.0 there, 6.0 now" in line


def test_ablate_classify_adds_the_downstream_metric(tmp_path, corpus):
    out = tmp_path / "abl"
    result = cli_ok("ablate", *TINY, "--corpus", corpus, "--budget", "2steps", "--vary", "activation=relu", "--task",
           "classify", "--finetune-recipe", "finetune-classify", "--finetune-set",
           f"task.train_file={ROOT / 'data/samples/sentiment.tsv'}", "--finetune-set", "task.validation_split=0.3",
           "--finetune-set", "task.text_column=sentence",
           "--finetune-budget", "3steps", "-o", out)
    rows = _rows(out)
    assert [r["downstream_metric"] for r in rows] == ["accuracy", "accuracy"]
    assert all(0 <= float(r["downstream"]) <= 1 for r in rows)
    assert (out / "variants/base/seed-0/finetune/model.safetensors").is_file()
    # scored on 30% of the 20 sample rows: the table says n, and a line says it is too few to compare variants
    assert {r["downstream_examples"] for r in rows} == {"6"}
    assert "downstream accuracy % (n=6)" in (out / "ablation.md").read_text()
    assert "the downstream scores come from 6 validation examples: too few" in " ".join(result.output.split())


def test_ablate_bad_inputs_are_one_line(tmp_path, corpus, base):
    run = base
    # -o on a folder of the user's, a run, or a folder inside a run: refused before anything is written (ablate
    # replaced a user's ablation.md and wrote plan.json into a run before failing)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ablation.md").write_text("my own notes")
    for out in (notes, run, run / "abl"):
        line = cli_error("ablate", *TINY, "--corpus", corpus, "--budget", "2steps", "--vary", "positions=rotary",
                         "-o", out)
        assert ("is not an ablation folder" in line) if out != run / "abl" else ("inside the run" in line), line
    assert (notes / "ablation.md").read_text() == "my own notes" and sorted(p.name for p in notes.iterdir()) == [
        "ablation.md"]
    assert not (run / "plan.json").exists() and not (run / "abl").exists()
    base = ["ablate", *TINY, "--corpus", corpus, "-o", tmp_path / "abl"]
    assert "--budget 'soon'" in cli_error(*base, "--budget", "soon", "--vary", "positions=rotary")
    assert "positoins" in cli_error(*base, "--budget", "2steps", "--vary", "positoins=rotary")
    # every variant invalid: refused before the base trains alone, with nothing to compare it with
    assert "--vary: every variant is invalid (positions=banana: model.positions: 'banana'" in cli_error(
        *base, "--budget", "2steps", "--vary", "positions=banana")
    assert "--task 'translate'" in cli_error(*base, "--budget", "2steps", "--vary", "positions=rotary",
                                             "--task", "translate")
    assert "no [model] table" in cli_error("ablate", "--recipe", "finetune-classify", "--budget", "2steps",
                                           "--vary", "positions=rotary", "-o", tmp_path / "x")
    assert "no text column 'text'" in cli_error(
        *base, "--budget", "2steps", "--vary", "positions=rotary", "--task", "classify", "--finetune-recipe",
        "finetune-classify", "--finetune-set", f"task.train_file={ROOT / 'data/samples/sentiment.tsv'}")
    assert not (tmp_path / "abl").exists()
    # the base recipe itself failing is not an "invalid variant": nothing could be compared with it
    assert "block_size" in cli_error(*base, "--set", "max_len=16", "--budget", "2steps", "--vary",
                                     "positions=rotary")


def test_seeds_can_be_variants_to_measure_noise(tmp_path, corpus):
    out = tmp_path / "abl"
    cli_ok("ablate", *TINY, "--corpus", corpus, "--budget", "2steps", "--vary", "seed=3", "-o", out)
    rows = _rows(out)
    assert [(r["variant"], r["seed"]) for r in rows] == [("base", "0"), ("seed=3", "3")]
    assert rows[0]["val_loss"] != rows[1]["val_loss"]
    assert "give one of them" in cli_error("ablate", *TINY, "--corpus", corpus, "--budget", "2steps", "--vary",
                                           "seed=3", "--seed", 1, "-o", out)


@pytest.mark.alone
def test_time_budget_and_a_crashing_variant(tmp_path, corpus, monkeypatch):
    """A time budget fits each variant's schedule to it; a variant that crashes is a `failed` row with its
    traceback kept, and the others still run."""
    from bertkit.jobs import pretrain

    real = pretrain.run

    def broken(job, **kwargs):
        if job.config.model.activation == "relu":
            raise RuntimeError("boom")
        return real(job, **kwargs)

    monkeypatch.setattr(pretrain, "run", broken)
    out = tmp_path / "abl"
    cli_ok("ablate", *TINY, "--corpus", corpus, "--budget", "3s", "--vary", "activation=relu,swiglu", "-o", out)
    rows = {r["variant"]: r for r in _rows(out)}
    assert rows["activation=relu"]["status"] == "failed" and "RuntimeError: boom" in rows["activation=relu"]["message"]
    assert "boom" in (out / "variants/activation=relu/seed-0/error.txt").read_text()
    assert rows["base"]["status"] == rows["activation=swiglu"]["status"] == "ok"
    config = json.loads((out / "variants/base/seed-0/pretrain/config.json").read_text())
    assert config["train"]["max_time"] == "3.0s" and config["train"]["max_steps"] == 10 ** 9
    assert 0 < float(rows["base"]["train_seconds"]) < 6
    assert "failed: RuntimeError: boom" in (out / "ablation.md").read_text()
