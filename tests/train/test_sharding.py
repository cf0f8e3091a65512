"""Sharded training (train.sharding = fsdp: FSDP2 through Accelerate) on 2 CPU gloo processes, the way Accelerate's
and Cramming's tests run without a cluster: the sharded run's losses and weights are the data-parallel run's, its
checkpoints hold every process's shards and resume exactly (sharded again, or whole on one process), the run exports
one model.safetensors, an `accelerate launch` config selects it, finetuning runs sharded too, and what cannot work is
one clear line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from bertkit.config import ConfigError, TrainConfig
from bertkit.errors import BertkitError
from bertkit.run.directory import load_run
from bertkit.train.accelerator import make_accelerator, resolve_sharding, sharding_text
from conftest import AS_ON_CI, cli_error, cli_process, free_port, repeated_corpus, torchrun_process

ROOT = Path(__file__).resolve().parents[2]
# dropout 0: the one-process resume below continues process 1's rows on process 0's random stream
ARGS = ["--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set", "min_frequency=1",
        "--set", "batch_size=4", "--set", "log_every=1", "--set", "eval_every=4", "--set", "save_every=4",
        "--set", "dropout=0", "--set", "attention_dropout=0", "--max-steps", "8", "--no-progress"]
FSDP = ["--set", "train.sharding=fsdp"]


def _losses(run: Path) -> list[float]:
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "loss" in r]


def _same_weights(a: Path, b: Path, atol: float = 1e-6) -> None:
    left, right = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert sorted(left) == sorted(right)
    for name in left:
        torch.testing.assert_close(left[name], right[name], rtol=0, atol=atol, msg=name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same 8 steps data-parallel and sharded (2 processes each), and the sharded run killed after step 5."""
    root = tmp_path_factory.mktemp("sharding")
    corpus = repeated_corpus(root / "corpus.txt", 30)
    args = [*ARGS, "--corpus", corpus]
    torchrun_process("pretrain", *args, "--out", root / "ddp")
    sharded = torchrun_process("pretrain", *args, *FSDP, "--out", root / "fsdp")
    # killed while logging step 5 (the 6th metrics line), after checkpoints/step-4 was written
    killed = torchrun_process("pretrain", *args, *FSDP, "--out", root / "killed", check=False,
                              env={"BERTKIT_FAULT": "metrics-append@6"})
    assert killed.returncode != 0
    return {"root": root, "args": args, "sharded_log": " ".join(sharded.stderr.split())}


@pytest.mark.slow
def test_sharded_training_is_data_parallel_training(runs):
    """Same losses (to float rounding of the sharded reductions) and final weights; the checkpoint is every
    process's shards (no whole weights file), and the run exports one model.safetensors that loads as a run."""
    ddp, fsdp = runs["root"] / "ddp", runs["root"] / "fsdp"
    assert "sharding: fsdp (FSDP2: weights, gradients and AdamW state sharded over 2 processes" in runs["sharded_log"]
    assert len(_losses(fsdp)) == 8 and _losses(fsdp) == pytest.approx(_losses(ddp), rel=1e-5)
    _same_weights(ddp, fsdp)
    step = fsdp / "checkpoints" / "step-8"
    assert sorted(p.name for p in (step / "sharded").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert not (step / "model.safetensors").exists()
    assert (ddp / "checkpoints" / "step-8" / "model.safetensors").is_file()
    assert json.loads((fsdp / "config.json").read_text())["train"]["sharding"] == "fsdp"
    config, model = load_run(fsdp)  # the exported weights: a normal run directory
    assert config.model.n_layers == 2 and torch.isfinite(next(model.parameters())).all()


@pytest.mark.slow
def test_a_killed_sharded_run_resumes_exactly_sharded_or_whole(runs):
    root, args = runs["root"], runs["args"]
    assert (root / "killed" / "checkpoints" / "latest").read_text() == "step-4"
    whole = root / "killed-whole"
    shutil.copytree(root / "killed", whole)
    torchrun_process("pretrain", *args, *FSDP, "--out", root / "killed", "--resume")
    assert _losses(root / "killed") == pytest.approx(_losses(root / "fsdp"), rel=1e-6)
    _same_weights(root / "fsdp", root / "killed", atol=1e-7)
    # the shards load whole into one unsharded process (torch.distributed.checkpoint reshards on load)
    resumed = cli_process("pretrain", *args, "--set", "train.sharding=none", "--out", whole, "--resume")
    assert "resuming a 2-process run with 1: accumulation_steps 1 -> 2" in " ".join(resumed.stderr.split())
    assert _losses(whole) == pytest.approx(_losses(root / "fsdp"), rel=1e-5)
    _same_weights(root / "fsdp", whole, atol=1e-5)
    assert (whole / "checkpoints" / "step-8" / "model.safetensors").is_file()  # from there on, unsharded
    assert json.loads((whole / "config.json").read_text())["train"]["sharding"] == "none"


@pytest.mark.slow
def test_an_accelerate_config_with_fsdp_selects_sharding(runs, tmp_path):
    config = tmp_path / "fsdp.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
                      "mixed_precision: 'no'\nnum_machines: 1\nnum_processes: 2\nuse_cpu: true\n")
    args = [a if a != "8" else "4" for a in runs["args"]]
    result = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
                             "--main_process_port", str(free_port()), AS_ON_CI, "pretrain", *map(str, args),
                             "--out", str(tmp_path / "run")], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "from the accelerate config" in " ".join(result.stderr.split())
    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["sharding"] == "fsdp"
    assert (tmp_path / "run" / "checkpoints" / "step-4" / "sharded").is_dir()
    # one whole model.safetensors: the same tensor names and shapes as the torchrun-sharded run's (its values differ:
    # that run took 8 steps, this one 4)
    assert {k: v.shape for k, v in load_file(tmp_path / "run" / "model.safetensors").items()} == \
        {k: v.shape for k, v in load_file(runs["root"] / "fsdp" / "model.safetensors").items()}


@pytest.mark.slow
def test_finetuning_runs_sharded_like_data_parallel(runs, tmp_path):
    args = ["finetune", "classify", "--model", runs["root"] / "ddp", "--train", ROOT / "data" / "samples" /
            "sentiment.tsv", "--text-column", "sentence", "--max-steps", "6", "--no-progress", "--set",
            "batch_size=4", "--set", "log_every=1", "--set", "eval_every=3", "--set", "save_every=3"]
    torchrun_process(*args, "--out", tmp_path / "ddp")
    torchrun_process(*args, *FSDP, "--out", tmp_path / "fsdp")
    assert _losses(tmp_path / "fsdp") == pytest.approx(_losses(tmp_path / "ddp"), rel=1e-5)
    _same_weights(tmp_path / "ddp", tmp_path / "fsdp")  # the best checkpoint's, gathered and exported
    assert (tmp_path / "fsdp" / "checkpoints" / "best" / "model.safetensors").is_file()
    ddp, fsdp = (json.loads((tmp_path / r / "results.json").read_text()) for r in ("ddp", "fsdp"))
    assert (fsdp["best_step"], fsdp["validation"]["accuracy"]) == (ddp["best_step"], ddp["validation"]["accuracy"])


@pytest.mark.slow
def test_an_encoder_decoder_trains_and_decodes_sharded_like_data_parallel(tmp_path):
    """seq2seq's validation decodes greedily (BLEU) through the decoder's own modules: under FSDP too."""
    samples = ROOT / "data" / "samples"
    args = ["finetune", "seq2seq", "--train-source", samples / "parallel.en", "--train-target", samples / "parallel.de",
            "--recipe", "translate-multi30k", "--max-steps", "6", "--no-progress", "--set", "d_model=32",
            "--set", "n_layers=2", "--set", "n_heads=2", "--set", "d_ff=64", "--set", "max_len=32",
            "--set", "batch_size=4", "--set", "log_every=1", "--set", "eval_every=3", "--set", "save_every=3",
            "--set", "vocab_size=300", "--set", "min_frequency=1", "--set", "bleu_examples=4"]
    torchrun_process(*args, "--out", tmp_path / "ddp")
    torchrun_process(*args, *FSDP, "--out", tmp_path / "fsdp")
    assert _losses(tmp_path / "fsdp") == pytest.approx(_losses(tmp_path / "ddp"), rel=1e-5)
    evals = [r for r in map(json.loads, (tmp_path / "fsdp" / "metrics.jsonl").read_text().splitlines())
             if r["kind"] == "eval"]
    assert len(evals) == 2 and all("bleu" in r for r in evals)  # the greedy decoding ran, sharded
    _same_weights(tmp_path / "ddp", tmp_path / "fsdp")


@pytest.mark.slow
def test_what_sharding_cannot_do_is_one_line(runs, tmp_path):
    line = cli_error("pretrain", *runs["args"], *FSDP, "--out", tmp_path / "alone")
    assert "train.sharding: fsdp shards the model over processes and this launch has 1" in line
    assert not (tmp_path / "alone").exists()
    # a data-parallel run's whole checkpoint cannot become shards: resume it as it was written
    stopped = tmp_path / "stopped"
    shutil.copytree(runs["root"] / "ddp", stopped)
    (stopped / "results.json").unlink()  # as if stopped at its last checkpoint
    before = {p: p.read_bytes() for p in stopped.rglob("*") if p.is_file()}
    result = torchrun_process("pretrain", *runs["args"], *FSDP, "--max-steps", "12", "--out", stopped, "--resume",
                              check=False)
    said = " ".join(result.stderr.split())
    assert result.returncode != 0 and "error: " in said and "was written without sharding; resume it with --set " \
        "train.sharding=none" in said, result.stderr[-3000:]
    assert before == {p: p.read_bytes() for p in stopped.rglob("*") if p.is_file()}
    with pytest.raises(ConfigError, match="train.sharding"):
        TrainConfig(sharding="zero")


def test_an_accelerate_launch_asking_for_fsdp_is_followed(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    assert resolve_sharding("none") == "none" and resolve_sharding("fsdp") == "fsdp"
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "1")
    assert resolve_sharding("none") == "fsdp"
    assert "whose fsdp_version 1 bertkit does not use: it shards with FSDP2" in sharding_text(4)


def test_an_accelerate_cpu_launch_of_several_processes_that_starts_one_is_said(tmp_path):
    """`accelerate launch --cpu --num_processes 2` (or --num_processes 2 on a machine without GPUs) starts ONE
    Python (Accelerate's simple launcher; N processes only under MPI): it trained alone, on half the global batch
    planned, and only "global batch 4" said so (a review). Warned, naming the launches that start N (a warning:
    a job script's own MASTER_ADDR looks the same to a one-process launch, which must still run)."""
    def launch(processes: str, out: str, env: dict) -> str:
        result = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes",
                                 processes, "--main_process_port", str(free_port()), AS_ON_CI, "pretrain",
                                 "--recipe", "tiny", "--corpus", "data/samples/corpus.txt", "--max-steps", "1",
                                 "--set", "batch_size=4", "--set", "vocab_size=300",
                                 "--set", "block_size=32", "--no-progress", "--out", str(tmp_path / out)],
                                capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})
        assert result.returncode == 0, result.stderr[-3000:]
        return " ".join((result.stdout + result.stderr).split())

    said = launch("2", "two", {"OMP_NUM_THREADS": "1"})
    assert "warning: MASTER_ADDR is set, yet this is one process" in said and "global batch 4" in said
    assert "torchrun --nproc_per_node N -m bertkit" in said
    # the same signs under torchrun (WORLD_SIZE) or MPI, or without MASTER_ADDR (--num_processes 1): nothing to say
    from bertkit.train import accelerator

    for env in ({"WORLD_SIZE": "2"}, {"OMPI_COMM_WORLD_SIZE": "2"}, {"MASTER_ADDR": None}):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("ACCELERATE_USE_CPU", "True")
            patch.setenv("MASTER_ADDR", "127.0.0.1")
            for key, value in env.items():
                patch.delenv(key) if value is None else patch.setenv(key, value)
            assert not accelerator._one_of_many()


def test_an_accelerate_config_with_deepspeed_is_one_line(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(BertkitError, match=r"DeepSpeed is not supported .* shard with train.sharding = \"fsdp\""):
        make_accelerator("fp32")
