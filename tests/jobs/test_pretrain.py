"""`bertkit pretrain` end to end through the CLI: run directory, fill-mask, export to transformers, plot, exact
resume after kill -9, a 2-process run, and every bad input as one line."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bertkit.hardware import resolve_precision
from conftest import AS_ON_CI, cli_error, cli_ok, cli_process, free_port, merged, repeated_corpus, torchrun_process

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set", "batch_size=4",
        "--set", "min_frequency=1", "--set", "log_every=2", "--set", "eval_every=10", "--no-progress"]


_cli = cli_process


@pytest.fixture
def corpus(tmp_path):
    return repeated_corpus(tmp_path / "corpus.txt", 30)


def _losses(run):
    return [(r["step"], r.get("loss"), r.get("val_loss")) for r in
            (json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines())]


def test_pretrain_makes_a_complete_run(tmp_path, corpus):
    run = tmp_path / "run"
    _cli("pretrain", *TINY, "--corpus", corpus, "--out", run, "--max-steps", "20", "--set", "save_every=10")
    for name in ("config.json", "tokenizer.json", "model.safetensors", "metrics.jsonl", "results.json",
                 "baseline.json"):
        assert (run / name).is_file(), name
    assert (run / "checkpoints" / "latest").read_text() == "step-20"
    assert list((run / "tensorboard").iterdir())
    config = json.loads((run / "config.json").read_text())
    assert config["heads"]["names"] == ["mlm"] and config["model"]["vocab_size"] == 400
    losses = [loss for _, loss, _ in _losses(run) if loss is not None]
    assert len(losses) == 10 and losses[-1] < losses[0]
    results = json.loads((run / "results.json").read_text())
    assert results["step"] == 20 and "val_accuracy" in results["evaluation"]
    assert results["precision"] == resolve_precision("auto", "cpu").precision  # train.precision = auto, resolved

    filled = _cli("fill-mask", run, "The decoder [MASK] only the words.", "--json", "--top-k", "3")
    options = json.loads(filled.stdout)
    assert len(options) == 1 and len(options[0]) == 3 and options[0][0]["score"] >= options[0][1]["score"]
    assert "[MASK]" not in options[0][0]["sequence"]
    assert json.loads(_cli("fill-mask", run, "The decoder [MASK] only the words.", "--json", "-k", "3").stdout) \
        == options  # -k as search spells it
    # two masks: each guess's sequence is the text with its own mask filled and the other kept as written (they
    # were decoded away: 'The [MASK] only [MASK].' read 'The X only.')
    text = "The decoder [MASK] only the [MASK]."
    two = json.loads(cli_ok("fill-mask", run, text, "--json", "--top-k", "2").stdout)
    assert len(two) == 2
    for guess in two[0]:
        word = guess["sequence"][len("The decoder"):-len(" only the [MASK].")]
        assert guess["sequence"].startswith("The decoder") and guess["sequence"].endswith(" only the [MASK].")
        assert word.strip() == guess["token"]
    for guess in two[1]:
        assert guess["sequence"].startswith("The decoder [MASK] only the") and guess["sequence"].endswith(".")
    # every candidate the vocabulary has, but never a special token (they decoded to ""); past that, one line
    # (in-process: the subprocess above already checks the console script)
    every = json.loads(cli_ok("fill-mask", run, "The [MASK] words.", "--json", "--top-k", "395").stdout)[0]
    assert len(every) == 395 and not {o["token_id"] for o in every} & {0, 1, 2, 3, 4}
    assert "--top-k 396: the vocabulary has 395 tokens that can fill a mask" in cli_error(
        "fill-mask", run, "The [MASK] words.", "--top-k", "396")
    assert "the text has no [MASK] token to fill ('[mask]' is text: write it [MASK], in capitals)" in cli_error(
        "fill-mask", run, "The [mask] words.")

    plotted = _cli("plot", run)
    assert (run / "curves.png").stat().st_size > 10_000 and "curves.png" in plotted.stdout


def test_bf16_training_runs_and_is_recorded(tmp_path, corpus):
    """train.precision = bf16 (what auto picks on bf16-native hardware) trains under autocast on a CPU too: finite,
    falling losses, the precision in the opening line, results.json and `bertkit info`."""
    run = tmp_path / "run"
    done = _cli("pretrain", *TINY, "--corpus", corpus, "--out", run, "--max-steps", "12", "--set", "precision=bf16")
    assert "precision: bf16 (as configured)" in done.stderr
    assert json.loads((run / "results.json").read_text())["precision"] == "bf16"
    losses = [loss for _, loss, _ in _losses(run) if loss is not None]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    assert "bf16)" in _cli("info", run).stdout


def test_export_fills_masks_in_transformers_like_bertkit(tmp_path, corpus):
    transformers = pytest.importorskip("transformers")
    run = tmp_path / "run"
    _cli("pretrain", *TINY, "--corpus", corpus, "--out", run, "--max-steps", "30")
    _cli("export", run, "--format", "hf", "-o", tmp_path / "hf")
    model = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "hf")).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    fill = transformers.pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=3)
    theirs = fill("A small encoder learns to [MASK] in masked words.")
    ours = json.loads(_cli("fill-mask", run, "A small encoder learns to [MASK] in masked words.", "--json",
                           "--top-k", "3").stdout)[0]
    assert [o["token_id"] for o in ours] == [t["token"] for t in theirs]
    assert [o["score"] for o in ours] == pytest.approx([t["score"] for t in theirs], abs=1e-5)


@pytest.mark.slow
def test_kill_9_and_resume_gives_the_same_loss_curve(tmp_path, corpus):
    args = merged(TINY, ["--corpus", corpus, "--max-steps", "120", "--set", "save_every=10", "--set", "eval_every=40"])
    _cli("pretrain", *args, "--out", tmp_path / "straight")
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, AS_ON_CI, "pretrain", *map(str, args), "--out", killed],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    latest = killed / "checkpoints" / "latest"
    deadline = time.time() + 120
    while time.time() < deadline and not (latest.is_file() and latest.read_text() not in ("step-10", "step-20")):
        time.sleep(0.02)
    time.sleep(0.15)  # land somewhere between checkpoints
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (killed / "model.safetensors").exists(), "the run finished before it could be killed"
    _cli("pretrain", *args, "--out", killed, "--resume")
    assert _losses(killed) == _losses(tmp_path / "straight")  # exactly, every logged loss

    # Ctrl-C: the step in progress finishes and is written as a checkpoint, so a run whose save_every lies beyond
    # it keeps its steps (every Ctrl-C lost them, silently: a first-use review, 2026-11-28)
    rare = merged(args, ["--set", "save_every=1000"])
    stopped = tmp_path / "stopped"
    # SIGINT as a terminal's foreground job has it (a background CI runner's children inherit it ignored, which
    # bertkit rightly leaves alone)
    proc = subprocess.Popen([sys.executable, AS_ON_CI, "pretrain", *map(str, rare), "--out", stopped],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    metrics, deadline = stopped / "metrics.jsonl", time.time() + 120
    while time.time() < deadline and not (metrics.is_file() and '"step": 30' in metrics.read_text()):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    said = " ".join(err.split())
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    step = int(re.search(r"interrupted at step (\d+): checkpoint step-\1 written; the same command with --resume "
                         r"goes on from it", said).group(1))
    assert 30 <= step < 120 and (stopped / "checkpoints" / "latest").read_text() == f"step-{step}"
    assert not (stopped / "model.safetensors").exists()
    _cli("pretrain", *rare, "--out", stopped, "--resume")
    assert _losses(stopped) == _losses(tmp_path / "straight")  # exactly, the window cut by the stop included


def test_two_processes_match_one_with_the_same_global_batch(tmp_path, corpus):
    args = ["--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set", "min_frequency=1",
            "--set", "log_every=1", "--set", "eval_every=100", "--set", "dropout=0", "--set", "attention_dropout=0",
            "--no-progress", "--corpus", corpus,
            "--max-steps", "8"]
    _cli("pretrain", *args, "--set", "batch_size=8", "--out", tmp_path / "one")
    env = {"OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                             "--master_port", "29517", AS_ON_CI, "pretrain", *map(str, args),
                             "--set", "batch_size=4", "--out", str(tmp_path / "two")],
                            capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    one = [loss for _, loss, _ in _losses(tmp_path / "one") if loss is not None]
    two = [loss for _, loss, _ in _losses(tmp_path / "two") if loss is not None]
    assert len(one) == len(two) == 8
    # Same rows, same masks, no dropout: only the order of float sums differs.
    assert two == pytest.approx(one, rel=1e-4)
    # each process draws its own dropout masks (both were seeded alike: the halves of a global batch got the same
    # noise; review, 2026-11-28); the main process keeps a one-process run's stream
    states = torch.load(tmp_path / "two" / "checkpoints" / "step-8" / "rng.pt", weights_only=True)
    alone = torch.load(tmp_path / "one" / "checkpoints" / "step-8" / "rng.pt", weights_only=True)
    assert len(states) == 2 and not torch.equal(states[0]["cpu"], states[1]["cpu"])
    assert torch.equal(states[0]["cpu"], alone[0]["cpu"])


@pytest.mark.slow
def test_a_run_resumes_with_another_process_count_on_the_same_global_batches(tmp_path, corpus):
    """Elastic resume: checkpointed with 2 processes and continued with 1 (or the other way), a run keeps its global
    batch (the accumulation follows the process count) and logs the losses of the uninterrupted run."""
    args = ["--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set", "min_frequency=1",
            "--set", "log_every=1", "--set", "eval_every=100", "--set", "save_every=4", "--set", "dropout=0",
            "--set", "attention_dropout=0", "--set", "schedule=constant", "--set", "warmup_ratio=0",
            "--no-progress", "--corpus", corpus]
    _cli("pretrain", *args, "--set", "batch_size=8", "--max-steps", "8", "--out", tmp_path / "straight")
    straight = [loss for _, loss, _ in _losses(tmp_path / "straight") if loss is not None]

    two_then_one = tmp_path / "two-then-one"
    torchrun_process("pretrain", *args, "--set", "batch_size=4", "--max-steps", "4", "--out", two_then_one)
    resumed = _cli("pretrain", *args, "--set", "batch_size=4", "--max-steps", "8", "--out", two_then_one,
                   "--resume")
    assert "resuming a 2-process run with 1: accumulation_steps 1 -> 2 per step (global batch 8 kept)" in \
        " ".join(resumed.stderr.split())  # (rich wraps long lines)
    one_then_two = tmp_path / "one-then-two"
    _cli("pretrain", *args, "--set", "batch_size=4", "--set", "accumulation_steps=2", "--max-steps", "4",
         "--out", one_then_two)
    torchrun_process("pretrain", *args, "--set", "batch_size=4", "--set", "accumulation_steps=2", "--max-steps", "8",
              "--out", one_then_two, "--resume")
    for run in (two_then_one, one_then_two):
        losses = [loss for _, loss, _ in _losses(run) if loss is not None]
        assert len(losses) == 8 and losses == pytest.approx(straight, rel=1e-4), run.name
        assert json.loads((run / "config.json").read_text())["train"]["accumulation_steps"] == \
            (1 if run == two_then_one else 2)  # the run's own setting, not the resumed part's
    # the process the resume added took the first one's stream, so it drew that process's dropout masks (review,
    # 2026-11-28): its own now
    states = torch.load(one_then_two / "checkpoints" / "step-8" / "rng.pt", weights_only=True)
    assert len(states) == 2 and not torch.equal(states[0]["cpu"], states[1]["cpu"])

    # a global batch the new process count cannot divide: one line, the run untouched
    small = tmp_path / "small"
    _cli("pretrain", *args, "--set", "batch_size=4", "--max-steps", "4", "--out", small)
    # finished, it is "already finished" under any process count
    finished = torchrun_process("pretrain", *args, "--set", "batch_size=4", "--max-steps", "4", "--out", small,
                                "--resume")
    assert "already finished at step 4" in " ".join(finished.stderr.split())
    (small / "results.json").unlink()  # as if it had been stopped at its last checkpoint
    before = {p: p.read_bytes() for p in small.rglob("*") if p.is_file()}
    result = torchrun_process("pretrain", *args, "--set", "batch_size=4", "--max-steps", "8", "--out", small,
                              "--resume", check=False)
    said = " ".join(result.stderr.split())  # each process's one error line (torchrun adds its own failure report)
    assert result.returncode != 0 and "error: " in said, result.stderr[-3000:]
    assert "began with 1 process(es) and a global batch of 4" in said
    assert "resume with a process count that divides 1" in said
    assert before == {p: p.read_bytes() for p in small.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_two_nodes_on_loopback_match_one_process(tmp_path, corpus):
    """The multi-node recipe of the README, simulated: two torchrun launches (--nnodes 2, one process each, node
    ranks 0 and 1) meeting at one rendezvous address give the losses of one process holding the global batch."""
    args = ["--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set", "min_frequency=1",
            "--set", "log_every=1", "--set", "eval_every=100", "--set", "dropout=0", "--set", "attention_dropout=0",
            "--no-progress", "--corpus", corpus, "--max-steps", "6"]
    _cli("pretrain", *args, "--set", "batch_size=8", "--out", tmp_path / "one")
    port = free_port()
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node_rank", str(rank),
                               "--nproc_per_node", "1", "--master_addr", "127.0.0.1", "--master_port", str(port),
                               AS_ON_CI, "pretrain", *map(str, args), "--set", "batch_size=4",
                               "--out", str(tmp_path / "nodes")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**os.environ, "OMP_NUM_THREADS": "1"}) for rank in (0, 1)]
    try:
        for node in nodes:
            _, err = node.communicate(timeout=300)
            assert node.returncode == 0, err[-3000:]
    finally:  # a node whose peer failed would wait for it: never leave one behind
        for node in nodes:
            if node.poll() is None:
                node.kill()
    one = [loss for _, loss, _ in _losses(tmp_path / "one") if loss is not None]
    two = [loss for _, loss, _ in _losses(tmp_path / "nodes") if loss is not None]
    assert len(one) == len(two) == 6 and two == pytest.approx(one, rel=1e-4)


@pytest.mark.slow
def test_bad_inputs_are_one_line_and_never_damage_a_run(tmp_path, corpus):
    def fails(*args, match, process=False):
        """In-process (2.4 s less a case), or with `process` in a real one: exit 2, one error line (in a process:
        the last line of stderr, progress lines may precede it, no traceback)."""
        if not process:
            line = cli_error("pretrain", *merged(TINY, args))
            assert match in line, line
            return line
        result = _cli("pretrain", *merged(TINY, args), check=False)
        assert result.returncode == 2, result.stderr[-2000:]
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and match in errors[0], result.stderr[-2000:]
        assert "Traceback" not in result.stderr and result.stderr.strip().endswith(errors[0])
        return errors[0]

    fails("--corpus", tmp_path / "missing.txt", "--out", tmp_path / "a", match="no such file or directory",
          process=True)
    (tmp_path / "blank.txt").write_text("\n\n")
    fails("--corpus", tmp_path / "blank.txt", "--out", tmp_path / "a", match="corpus is empty")
    (tmp_path / "dir").mkdir()
    fails("--corpus", tmp_path / "dir", "--out", tmp_path / "a", match="no readable text files")
    (tmp_path / "bad.txt").write_bytes(b"fine\nbroken \xc3\x28 here\n")
    fails("--corpus", tmp_path / "bad.txt", "--out", tmp_path / "a", match="bad.txt: invalid UTF-8 at byte 12")
    fails("--corpus", corpus, "--out", tmp_path / "a", "--set", "batch_size=4096",
          match="corpus too small for one batch")
    fails("--corpus", corpus, "--out", tmp_path / "a", "--set", "vocab_size=60000", match="corpus supports only")
    # a task head pretraining never trains was stored random, as if part of the model
    fails("--corpus", corpus, "--out", tmp_path / "a", "--set", "heads.names=['classifier']", "--set",
          "num_labels=2", match="heads.names: pretraining trains its objective's heads, not classifier")
    assert not (tmp_path / "a").exists()

    run = tmp_path / "run"
    _cli("pretrain", *TINY, "--corpus", corpus, "--out", run, "--max-steps", "4")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    fails("--corpus", corpus, "--out", run, "--max-steps", "4", match="already holds a run", process=True)
    fails("--corpus", corpus, "--out", run, "--resume", "--set", "d_model=64", match="holds a different run")
    assert before == {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    fails("--corpus", corpus, "--out", tmp_path / "other", match="is not a bertkit run")

    big = tmp_path / "big-tok"
    _cli("tokenizer", "train", corpus, "--vocab-size", "500", "--min-frequency", "1", "-o", big)
    result = _cli("pretrain", *TINY, "--corpus", corpus, "--out", tmp_path / "b", "--tokenizer", big,
                  "--max-steps", "2")
    assert json.loads((tmp_path / "b" / "config.json").read_text())["model"]["vocab_size"] == 500
    assert result.returncode == 0


def test_fill_mask_refuses_models_without_an_mlm_head(tmp_path):
    from bertkit.config import Config
    from bertkit.nn.model import Model
    from bertkit.run.directory import save_run
    from conftest import tiny

    cfg = tiny()
    save_run(tmp_path / "run", Model(cfg), Config(model=cfg))
    result = _cli("fill-mask", tmp_path / "run", "a [MASK] b", check=False)
    assert result.returncode == 2 and "no MLM head" in result.stderr


def test_what_a_pretraining_cannot_do_with_its_settings_is_warned(tmp_path, sample_tokenizer):
    """Issue 38: tokenize_workers when streaming, and a corpus too small to hold out a validation block, were taken
    without a word (the latter wrote `"evaluation": {}`). The run goes on; results.json says why it is empty."""
    from bertkit.text.tokenizer import save_tokenizer
    from conftest import SAMPLE_CORPUS, cli_ok

    save_tokenizer(sample_tokenizer, tmp_path / "tok")
    one = tmp_path / "one.txt"
    one.write_text(" ".join(line for line in SAMPLE_CORPUS.read_text().splitlines() if line) + "\n")  # 1 document
    base = [*TINY, "--tokenizer", tmp_path / "tok", "--max-steps", "2"]
    said = " ".join(cli_ok("pretrain", *merged(base, ["--corpus", one, "--set", "block_size=16", "--out",
                                                      tmp_path / "run"])).output.split())
    assert ("warning: no validation blocks: the corpus is too small for data.validation_fraction=0.01 (1% of the "
            "documents, spread evenly, are held out: too few documents, or too little text in them for a block of 16 "
            "tokens); the run "
            "has no validation loss (add documents, or raise data.validation_fraction)") in said
    assert "no validation blocks, no validation loss" in said and "tokenize_workers" not in said
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["evaluation"] == {} and results["validation_blocks"] == 0 and results["step"] == 2
    assert (tmp_path / "run" / "model.safetensors").is_file()

    corpus = repeated_corpus(tmp_path / "corpus.txt", 30)
    said = " ".join(cli_ok("pretrain", *base, "--corpus", corpus, "--streaming", "--set", "tokenize_workers=4",
                           "--out", tmp_path / "streamed").output.split())
    assert ("warning: data.tokenize_workers=4 does nothing when streaming (a streamed corpus is tokenised as it is "
            "read, in the training process); leave it at 1, or pack the corpus (data.streaming = false) to tokenise "
            "it with workers") in said
    assert "no validation blocks" not in said
    # a resume keeps the run's own tokenizer: another one given was ignored without a word
    trained = tmp_path / "streamed"
    again = ["--corpus", corpus, "--streaming", "--set", "tokenize_workers=4", "--out", trained, "--resume"]
    said = " ".join(cli_ok("pretrain", *merged(base, ["--max-steps", "3"]), *again).output.split())
    assert "is not the run's own tokenizer" not in said  # the same one: nothing to say
    from tokenizers import Tokenizer

    other = Tokenizer.from_str(sample_tokenizer.to_str())
    other.add_tokens(["zzzq"])
    save_tokenizer(other, tmp_path / "other")
    given = [tmp_path / "other" if str(a) == str(tmp_path / "tok") else a for a in merged(base, ["--max-steps", "4"])]
    said = "".join(cli_ok("pretrain", *given, *again).output.split())
    assert "".join(f"warning: --tokenizer {tmp_path / 'other'} is not the run's own tokenizer: a resume keeps "
                   f"{trained}'s tokenizer".split()) in said
    # one that is gone (the first command line again, with --resume, after its folder was cleaned) is warned about
    # too: a resume does not need it, and it was refused (review, 2026-11-29)
    given = [tmp_path / "gone" if str(a) == str(tmp_path / "tok") else a for a in merged(base, ["--max-steps", "5"])]
    said = "".join(cli_ok("pretrain", *given, *again).output.split())
    assert "".join(f"warning: --tokenizer {tmp_path / 'gone'} cannot be read (".split()) in said
    assert "".join(f"a resume keeps {trained}'s tokenizer".split()) in said
    assert json.loads((tmp_path / "streamed" / "results.json").read_text())["validation_blocks"] > 0


def test_cuda_graphs_on_a_cpu_train_without_them_and_say_why(tmp_path, corpus):
    done = _cli("pretrain", *TINY, "--corpus", corpus, "--out", tmp_path / "run", "--max-steps", "3",
                "--set", "train.cuda_graphs=true", "--set", "train.compile=off")
    assert "CUDA graphs: off (needs a CUDA GPU, not cpu)" in " ".join(done.stderr.split())  # rich wraps lines


def test_an_extension_of_a_budgeted_run_that_ended_at_its_step_cap_trains_at_the_new_plans_rate(tmp_path):
    """A --max-time run that reached its --max-steps before the budget was fitted saved the planner's provisional
    schedule total; extended with --max-steps, the schedule kept following it: every step of the extension at rate
    0, the weights unchanged (review, 2026-11-28)."""
    from safetensors.torch import load_file

    corpus = repeated_corpus(tmp_path / "c.txt", 6)
    args = merged(TINY, ["--corpus", corpus, "--out", tmp_path / "run", "--set", "log_every=1", "--set",
                         "save_every=30", "--set", "eval_every=30", "--set", "schedule=linear"])
    cli_ok("pretrain", *args, "--max-steps", "30")
    # the checkpoint as such a run writes it (whether 30 tiny steps fit the budget depends on the machine's speed):
    # a budget, not yet fitted, and the schedule's provisional total, reached
    saved = tmp_path / "run" / "checkpoints" / "step-30" / "state.json"
    saved.write_text(json.dumps({**json.loads(saved.read_text()), "max_seconds": 40.0, "calibrated": False,
                                 "schedule_steps": 30, "chunk_times": [0.05, 0.04]}))
    before = load_file(tmp_path / "run" / "model.safetensors")
    cli_ok("pretrain", *args, "--max-steps", "36", "--resume")
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    extension = [r for r in lines if r.get("kind") == "train" and r["step"] > 30]
    assert [r["step"] for r in extension] == list(range(31, 37))
    assert all(r["total_steps"] == 36 for r in extension)
    assert all(r["lr"] > 0 for r in extension[:-1])  # the linear decay reaches 0 at step 36, not at 30
    after = load_file(tmp_path / "run" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_plot_sets_the_mlm_part_of_an_rtd_or_contrastive_loss_beside_validation(tmp_path):
    # the whole objective was drawn as the "MLM loss": rtd's ~40 (50 x the discriminator's) beside a validation 6.8
    from bertkit.jobs.plot import _train_losses

    rtd = [{"step": 1, "loss": 40.3, "gen_loss": 6.78, "rtd_loss": 0.671}]
    assert _train_losses(tmp_path, rtd) == ([6.78], "train (generator MLM)")
    (tmp_path / "config.json").write_text(json.dumps({"train": {"objective": "mlm", "contrastive_weight": 0.5}}))
    contrastive = [{"step": 1, "loss": 9.0, "contrastive_loss": 4.0}, {"step": 2, "loss": 8.0, "contrastive_loss": 2.0}]
    assert _train_losses(tmp_path, contrastive) == ([7.0, 7.0], "train (MLM part)")
    assert _train_losses(tmp_path, [{"step": 1, "loss": 6.9}]) == (None, "train")  # plain MLM: its loss as logged


def test_fill_mask_reads_a_wordpiece_sentence_with_single_spaces(tmp_path, minilm_dir):
    # WordPiece's [MASK] leaves the space before it out of its span and the guessed word brings its own: every
    # imported BERT's filled sentence read "Paris is the  capital of France."
    from bertkit.config import Config
    from bertkit.jobs.fill_mask import FillMaskJob, run
    from bertkit.nn.model import Model
    from bertkit.run.directory import save_run
    from conftest import heads, tiny

    cfg, mlm = tiny(vocab_size=30522), heads("mlm")
    folder = save_run(tmp_path / "wordpiece", Model(cfg, mlm), Config(model=cfg, heads=mlm),
                      minilm_dir / "tokenizer.json")
    guesses = run(FillMaskJob(folder, "Paris is the [MASK] of France.", top_k=5)).masks[0]
    for guess in guesses:
        assert "  " not in guess.sequence and guess.sequence.startswith("Paris is the "), guess
        assert guess.sequence.endswith(" of France."), guess  # the text as given around the guessed word
