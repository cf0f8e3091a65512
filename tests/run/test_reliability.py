"""Runs you can trust, attacked the way a hostile or careless user would: kill -9 at the worst moments (mid metrics
line, between the last checkpoint and the results), two writers, a full disk, damaged and hostile checkpoint files,
NaN weights. Each case ends in an exact resume or one `error:` line, and never in damaged files."""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.run.files import atomic_dir, to_json
from bertkit.run.lock import locked
from bertkit.run.metrics import read_metrics
from conftest import AS_ON_CI, file_size_cap, repeated_corpus

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set", "batch_size=4",
        "--set", "min_frequency=1", "--set", "log_every=2", "--set", "eval_every=10", "--set", "save_every=10",
        "--no-progress"]


def _cli(*args, env=None, limit=None, check=True):
    """`bertkit ARGS` in a subprocess; `limit` caps every file it writes (RLIMIT_FSIZE): a full disk on demand."""
    result = subprocess.run([sys.executable, AS_ON_CI, *map(str, args)], capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, cwd=ROOT,
                            preexec_fn=file_size_cap(limit) if limit else None)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def _said(result) -> str:
    """stderr with rich's line wrapping undone."""
    return " ".join(result.stderr.split())


def _one_error(result, match: str) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and match in errors[0], result.stderr[-3000:]
    assert "Traceback" not in _said(result)
    return errors[0]


def _snapshot(run: Path) -> dict:
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run.rglob("*"))
            if p.is_file()}


def _curve(run: Path) -> list:
    return [(r["step"], r["kind"], r.get("loss"), r.get("val_loss")) for r in read_metrics(run)]


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".tmp" in p.name or ".old-" in p.name]


@pytest.fixture
def corpus(tmp_path):
    return repeated_corpus(tmp_path / "corpus.txt", 20)


@pytest.mark.slow
def test_kills_mid_metrics_line_and_before_results_resume_exactly(tmp_path, corpus):
    args = [*TINY, "--corpus", corpus, "--max-steps", "30"]
    _cli("pretrain", *args, "--out", tmp_path / "straight")
    straight = json.loads((tmp_path / "straight" / "results.json").read_text())
    assert straight["evaluation"] and straight["step"] == 30

    # kill -9 with half a metrics line written (the 8th append: step 14 or so, past the step-10 checkpoint)
    def killed_at(name: str, fault: str) -> Path:
        """A run that kill -9'd itself at the fault point."""
        run = tmp_path / name
        died = _cli("pretrain", *args, "--out", run, env={"BERTKIT_FAULT": fault}, check=False)
        assert died.returncode == -signal.SIGKILL, died.stderr[-2000:]
        return run

    torn = killed_at("torn", "metrics-append@8")
    assert not (torn / "metrics.jsonl").read_text().endswith("\n")  # really torn
    with pytest.warns(UserWarning, match="torn last line"):
        read_metrics(torn)  # readers (plot, ablate) drop it instead of failing
    _cli("plot", torn, "-o", tmp_path / "torn.png")
    resumed = _cli("pretrain", *args, "--out", torn, "--resume")
    assert "dropped a torn last line" in _said(resumed)
    assert _curve(torn) == _curve(tmp_path / "straight")

    # kill -9 before the first checkpoint (the run directory exists, nothing to resume from): starts again
    early = killed_at("early", "metrics-append@2")
    assert not (early / "checkpoints").exists()
    restarted = _cli("pretrain", *args, "--out", early, "--resume")
    assert "starting the run again from step 0" in _said(restarted)
    assert _curve(early) == _curve(tmp_path / "straight")

    # kill -9 after the last checkpoint, with results.json written but not yet renamed into place
    late = killed_at("late", "commit:results.json")
    assert not (late / "results.json").exists()
    _cli("pretrain", *args, "--out", late, "--resume")
    assert json.loads((late / "results.json").read_text()) == straight  # the evaluation is never lost
    assert _curve(late) == _curve(tmp_path / "straight")
    assert not _leftovers(late)


@pytest.mark.slow
def test_resuming_a_finished_run_changes_nothing_and_a_larger_budget_extends_it(tmp_path, corpus):
    args = [*TINY, "--corpus", corpus]
    run = tmp_path / "run"
    _cli("pretrain", *args, "--out", run, "--max-steps", "20")
    before = _snapshot(run)
    again = _cli("pretrain", *args, "--out", run, "--max-steps", "20", "--resume")
    assert "already finished at step 20" in _said(again) and "--max-steps" in _said(again)
    assert _snapshot(run) == before  # byte-identical: results.json keeps its evaluation
    assert _cli("pretrain", *args, "--out", run, "--resume").returncode == 0  # the recipe's max_steps: same plan
    assert _snapshot(run) == before

    # one more step of a finished linear decay: the optimiser came back with the old plan's rate, 0, so the step
    # changed nothing (review, 2026-11-28); it trains at the new plan's rate (1 - 20/21) x peak
    one = _cli("pretrain", *args, "--out", run, "--max-steps", "21", "--resume")
    assert "re-planned: 20 -> 21 steps" in _said(one)
    assert _snapshot(run)["model.safetensors"] != before["model.safetensors"]
    extended = _cli("pretrain", *args, "--out", run, "--max-steps", "30", "--resume")
    assert "re-planned: 21 -> 30 steps" in _said(extended)
    results = json.loads((run / "results.json").read_text())
    assert results["step"] == 30 and results["evaluation"]
    steps = [(r["kind"], r["step"]) for r in read_metrics(run)]
    assert len(steps) == len(set(steps)) and max(s for _, s in steps) == 30  # no duplicated or missing lines
    state = json.loads((run / "checkpoints" / "step-30" / "state.json").read_text())
    assert state["step"] == state["total_steps"] == state["max_steps"] == 30
    final = _snapshot(run)
    _cli("pretrain", *args, "--out", run, "--max-steps", "30", "--resume")
    assert _snapshot(run) == final
    # killed after its last checkpoint (no results yet), resumed with a limit below its step: it was accepted,
    # "step 30 of 25", and config.json said 25 beside results at 30; one line now, the run as it was
    (run / "results.json").unlink()
    kept = _snapshot(run)
    _one_error(_cli("pretrain", *args, "--out", run, "--max-steps", "25", "--resume", check=False),
               "the run is at step 30 already (step-30), past train.max_steps = 25; resume with a limit of at "
               "least 30 (--max-steps), or without one")
    assert _snapshot(run) == kept


@pytest.mark.slow
def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path, corpus):
    args = [*TINY, "--corpus", corpus, "--max-steps", "100000"]
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, AS_ON_CI, "pretrain", *map(str, args), "--out", str(run)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (run / "checkpoints" / "latest").is_file():
            time.sleep(0.05)
        assert (run / "checkpoints" / "latest").is_file(), "the first writer never checkpointed"
        _one_error(_cli("pretrain", *args, "--out", run, "--resume", check=False),
                   f"in use by another bertkit process (pid {holder.pid})")
        _one_error(_cli("pretrain", *args, "--out", run, check=False), f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    # the kernel released the lock with the holder: the run resumes (and a smaller budget finishes it there)
    step = json.loads((run / "checkpoints" / (run / "checkpoints" / "latest").read_text() / "state.json")
                      .read_text())["step"]
    _cli("pretrain", *args[:-1], str(step + 4), "--out", run, "--resume")
    records = [(r["kind"], r["step"]) for r in read_metrics(run)]
    assert len(records) == len(set(records))


@pytest.mark.slow
def test_a_full_disk_during_pretraining_is_one_line_and_the_run_resumes(tmp_path, corpus):
    args = [*TINY, "--corpus", corpus]
    run = tmp_path / "run"
    _cli("pretrain", *args, "--out", run, "--max-steps", "10")
    weights = (run / "checkpoints" / "step-10" / "model.safetensors").stat().st_size
    before = _snapshot(run / "checkpoints" / "step-10")
    # every file capped below one checkpoint's weights: the step-20 checkpoint cannot be written
    full = _cli("pretrain", *args, "--out", run, "--max-steps", "20", "--resume", limit=weights // 2, check=False)
    _one_error(full, "no space left on the device")
    assert (run / "checkpoints" / "latest").read_text() == "step-10"
    assert _snapshot(run / "checkpoints" / "step-10") == before
    assert not _leftovers(run), _leftovers(run)
    _cli("pretrain", *args, "--out", run, "--max-steps", "20", "--resume")
    assert json.loads((run / "results.json").read_text())["step"] == 20


def test_a_full_disk_during_finetuning_is_one_line_and_leaves_no_temporaries(tmp_path, base):
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f"the film was {w} {i},{lab}\n" for i in range(20)
                                             for w, lab in (("great", "pos"), ("awful", "neg"))))
    before = _snapshot(base)
    weights = (base / "model.safetensors").stat().st_size
    out = tmp_path / "clf"
    full = _cli("finetune", "classify", "--model", base, "--train", train, "--out", out, "--max-steps", "4",
                "--no-progress", "--set", "batch_size=8", "--set", "eval_every=2", limit=weights // 2, check=False)
    _one_error(full, "no space left on the device")
    assert _snapshot(base) == before and not _leftovers(tmp_path)


def _finished_run(tmp_path, corpus) -> tuple[Path, list]:
    run = tmp_path / "run"
    args = [*TINY, "--set", "keep_checkpoints=2", "--corpus", corpus, "--out"]
    _cli("pretrain", *args, run, "--max-steps", "20")
    return run, args


@pytest.mark.slow
def test_damaged_checkpoint_files_are_one_line_naming_the_fallback(tmp_path, corpus):
    run, args = _finished_run(tmp_path, corpus)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    damage = {
        "optimizer.pt": lambda p: p.write_bytes(p.read_bytes()[:100]),
        "model.safetensors": lambda p: p.write_bytes(p.read_bytes()[:1000]),
        "state.json": lambda p: p.write_text(p.read_text()[:20]),
        "rng.pt": lambda p: torch.save([Evil()], p, _use_new_zipfile_serialization=True),
    }
    for name, spoil in damage.items():
        copy = tmp_path / f"copy-{name}"
        shutil.copytree(run, copy)
        spoil(copy / "checkpoints" / "step-20" / name)
        before = _snapshot(copy)
        error = _one_error(_cli("pretrain", *args, copy, "--max-steps", "30", "--resume", check=False),
                           "checkpoint step-20 is damaged")
        assert name in error and "to resume from step-10" in error, error
        assert _snapshot(copy) == before
    assert not marker.exists()  # the pickle never ran

    # what a user told to delete the damaged one gets: the resume falls back to step-10
    shutil.rmtree(tmp_path / "copy-rng.pt" / "checkpoints" / "step-20")
    resumed = _cli("pretrain", *args, tmp_path / "copy-rng.pt", "--max-steps", "30", "--resume")
    assert "resuming from step-10" in _said(resumed)


def test_stray_and_hostile_entries_in_checkpoints_are_ignored_or_cleaned(tmp_path, corpus):
    run, args = _finished_run(tmp_path, corpus)
    checkpoints = run / "checkpoints"
    (checkpoints / "step-old").mkdir()  # a user's backup: not a checkpoint, never parsed as one
    (checkpoints / ".step-25.tmp-abc").mkdir()  # a killed checkpoint write
    (checkpoints / ".step-25.tmp-abc" / "model.safetensors").write_bytes(b"partial")
    (checkpoints / "latest").write_text("../../../etc")  # a hostile pointer: ignored, the newest complete one used
    resumed = _cli("pretrain", *args, run, "--max-steps", "24", "--resume")
    assert "resuming from step-20" in _said(resumed)
    assert not (checkpoints / ".step-25.tmp-abc").exists() and (checkpoints / "step-old").is_dir()
    assert json.loads((run / "results.json").read_text())["step"] == 24


def test_nan_weights_are_refused_and_json_output_is_strict(tmp_path, corpus):
    from safetensors.torch import load_file, save_file

    run, _ = _finished_run(tmp_path, corpus)
    tensors = load_file(run / "model.safetensors")
    name = next(iter(tensors))
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    save_file(tensors, run / "model.safetensors")
    _one_error(_cli("fill-mask", run, "the [MASK] was good", check=False), "weights are not finite")
    assert to_json({"a": float("nan"), "b": [1.0, float("inf")]}, indent=None) == '{"a": null, "b": [1.0, null]}'


def test_torch_load_never_unpickles_code():
    """Every torch.load in the package passes weights_only=True (a shared run must never run code)."""
    import ast

    calls = []
    for path in (ROOT / "bertkit").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "load" \
                    and getattr(node.func.value, "id", None) == "torch":
                keywords = {k.arg: k.value for k in node.keywords}
                calls.append(path.name)
                assert isinstance(keywords.get("weights_only"), ast.Constant) and \
                    keywords["weights_only"].value is True, f"{path}:{node.lineno}"
    assert calls  # the checkpoint loader is among them


def test_lock_is_exclusive_and_released(tmp_path):
    run = tmp_path / "run"
    with locked(run):
        with pytest.raises(BertkitError, match=f"in use by another bertkit process \\(pid {os.getpid()}\\)"):
            with locked(run):
                pass
    with locked(run):  # released on exit
        pass


def test_atomic_dir_never_replaces_what_another_process_created_meanwhile(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(BertkitError, match="created by another process meanwhile"):
        with atomic_dir(out) as tmp:
            (tmp / "mine.txt").write_text("mine")
            out.mkdir()
            (out / "theirs.txt").write_text("theirs")  # another job got there while this one worked
    assert (out / "theirs.txt").read_text() == "theirs" and not (out / "mine.txt").exists()
    assert not _leftovers(tmp_path)


def test_torn_metrics_line_in_the_middle_is_an_error_not_a_guess(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "kind": "train"}\n{"step": 2, "ki\n{"step": 3}\n')
    with pytest.raises(BertkitError, match="metrics.jsonl:2: not a JSON record"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "kind": "train"}\n{"step": 2, "ki')
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert read_metrics(tmp_path) == [{"step": 1, "kind": "train"}]


def test_a_run_stopped_by_its_time_budget_is_finished(tmp_path, corpus):
    run = tmp_path / "run"
    _cli("pretrain", *TINY, "--corpus", corpus, "--out", run, "--max-time", "4s", "--set", "max_steps=100000")
    before = _snapshot(run)
    state = json.loads((run / "checkpoints" / (run / "checkpoints" / "latest").read_text() / "state.json").read_text())
    # stopped by its budget before the fitted total, or at that total: either way finished under these limits
    assert state["budget_spent"] or state["step"] == state["total_steps"]
    again = _cli("pretrain", *TINY, "--corpus", corpus, "--out", run, "--resume")
    assert "already finished" in _said(again) and _snapshot(run) == before


def test_an_epoch_finetune_extends_with_max_steps(tmp_path, base):
    from conftest import cli_ok

    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f"the film was {w} {i},{lab}\n" for i in range(16)
                                             for w, lab in (("great", "pos"), ("awful", "neg"))))
    args = ["finetune", "classify", "--model", base, "--train", train, "--out", tmp_path / "clf", "--no-progress",
            "--set", "batch_size=8", "--set", "eval_every=2", "--set", "patience=1"]
    cli_ok(*args, "--epochs", "1")
    first = json.loads((tmp_path / "clf" / "results.json").read_text())
    cli_ok(*args, "--resume", "--max-steps", str(first["steps"] + 4))  # early-stopped or not, it trains on
    extended = json.loads((tmp_path / "clf" / "results.json").read_text())
    assert extended["steps"] > first["steps"] and extended["validation"]
    stored = json.loads((tmp_path / "clf" / "config.json").read_text())["train"]
    assert stored["epochs"] is None and stored["max_steps"] == first["steps"] + 4


def test_best_weights_moved_aside_by_a_kill_are_restored(tmp_path):
    from bertkit.run.checkpoints import best_weights, clean_stale

    aside = tmp_path / "run" / "checkpoints" / ".best.old-abc123" / "best"
    aside.mkdir(parents=True)
    (aside / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "run" / "checkpoints" / ".best.tmp-def456").mkdir()  # the new one, never renamed in
    clean_stale(tmp_path / "run")
    assert best_weights(tmp_path / "run").read_bytes() == b"weights"
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == ["best"]


def test_a_planted_lock_link_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / ".run.lock").symlink_to(victim)
    with pytest.raises(BertkitError, match="a link"):
        with locked(tmp_path / "run"):
            pass
    assert victim.read_text() == "precious"
