"""Run directories: save → load gives identical parameters; writes are atomic and never damage what exists."""

import json
import os
import stat
from pathlib import Path

import pytest
import torch
from conftest import heads, tiny

from bertkit.config import Config
from bertkit.errors import BertkitError
from bertkit.nn.model import Model
from bertkit.run.directory import is_run_dir, load_run, save_run
from bertkit.run.files import atomic_dir


@pytest.mark.parametrize("overrides", [dict(heads=("pooler", "mlm")), dict(architecture="decoder", positions="rotary"),
                                       dict(architecture="encoder-decoder", positions="relative")])
def test_save_load_gives_identical_parameters(tmp_path, overrides):
    overrides = dict(overrides)
    on_top = heads(*overrides.pop("heads", ()))
    cfg = tiny(**overrides)
    model = Model(cfg, on_top)
    save_run(tmp_path / "run", model, Config(model=cfg, heads=on_top))
    assert is_run_dir(tmp_path / "run")
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    assert stored["bertkit_version"] and stored["model"]["d_model"] == 32
    config, loaded = load_run(tmp_path / "run")
    assert config.model == cfg
    original, restored = model.state_dict(), loaded.state_dict()
    assert original.keys() == restored.keys()
    for key in original:
        assert torch.equal(original[key], restored[key]), key
    if cfg.architecture == "encoder-decoder":  # tying survives the round trip (stored once)
        bb = loaded.backbone
        assert bb.decoder.embeddings.token.weight is bb.encoder.embeddings.token.weight


def test_existing_output_is_refused_then_replaced_atomically(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    cfg = tiny()
    with pytest.raises(BertkitError, match="already exists"):
        save_run(out, Model(cfg), Config(model=cfg))
    assert (out / "keep.txt").read_text() == "precious"
    save_run(out, Model(cfg), Config(model=cfg), overwrite=True)
    assert is_run_dir(out) and not (out / "keep.txt").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temp dirs left behind


def test_failed_write_leaves_the_old_run_untouched(tmp_path):
    out = tmp_path / "run"
    cfg = tiny()
    save_run(out, Model(cfg), Config(model=cfg))
    before = (out / "model.safetensors").read_bytes()
    with pytest.raises(RuntimeError):
        with atomic_dir(out, overwrite=True) as tmp:
            (tmp / "model.safetensors").write_bytes(b"half")
            raise RuntimeError("killed mid-write")
    assert (out / "model.safetensors").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_weights_that_do_not_fit_the_config_are_a_user_error(tmp_path):
    cfg = tiny()
    save_run(tmp_path / "run", Model(cfg), Config(model=cfg))
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    stored["model"]["d_ff"] = 128
    (tmp_path / "run" / "config.json").write_text(json.dumps(stored))
    with pytest.raises(BertkitError, match="weights do not fit the config"):
        load_run(tmp_path / "run")
    (tmp_path / "run" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(BertkitError):
        load_run(tmp_path / "run")
    with pytest.raises(BertkitError, match="missing: no such directory"):
        load_run(tmp_path / "missing")


def test_a_failed_swap_puts_the_old_run_back(tmp_path, monkeypatch):
    out = tmp_path / "run"
    cfg = tiny()
    save_run(out, Model(cfg), Config(model=cfg))
    before = (out / "model.safetensors").read_bytes()
    real_replace = os.replace

    def failing_replace(src, dst):
        if Path(dst) == out and ".tmp-" in str(src):  # the new run's rename into place fails (disk full, …)
            raise OSError("no space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        save_run(out, Model(cfg), Config(model=cfg), overwrite=True)
    assert (out / "model.safetensors").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def test_run_directories_follow_the_umask(tmp_path):
    cfg = tiny()
    save_run(tmp_path / "run", Model(cfg), Config(model=cfg))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o777 & ~umask
    # and its files, the weights too: safetensors writes 0600, so they were the one file others could not read
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "run").rglob("*") if p.is_file()}
    assert modes["model.safetensors"] == 0o666 & ~umask and set(modes.values()) == {0o666 & ~umask}, modes
    from bertkit.interop.hf import export_hf

    export_hf(tmp_path / "run", tmp_path / "hf")
    assert stat.S_IMODE((tmp_path / "hf" / "model.safetensors").stat().st_mode) == 0o666 & ~umask


def test_a_run_stored_before_auto_precision_resumes_where_auto_means_the_same(tmp_path, monkeypatch):
    import dataclasses

    from bertkit import hardware
    from bertkit.run.resume import check_run_output

    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx2"})  # auto means fp32 here
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = tiny()
    stored = Config(model=cfg)
    save_run(tmp_path / "run", Model(cfg), dataclasses.replace(
        stored, train=dataclasses.replace(stored.train, precision="fp32")))
    check_run_output(tmp_path / "run", stored, True, ("train",), set())  # "fp32" == "auto" on this machine
    bf16 = dataclasses.replace(stored, train=dataclasses.replace(stored.train, precision="bf16"))
    with pytest.raises(BertkitError, match=r"train.precision = 'fp32', now 'bf16'"):
        check_run_output(tmp_path / "run", bf16, True, ("train",), set())


def test_pinning_the_precision_a_run_trained_at_is_accepted_on_resume(tmp_path, monkeypatch):
    """A run trained under auto = bf16, resumed where auto means fp32: the warning says to pass
    `--set train.precision=bf16` to continue exactly, and that pin was refused as "a different run" (review,
    2026-11-28). It matches what the latest checkpoint trained at, so it is taken; another precision still is not."""
    import dataclasses

    from bertkit import hardware
    from bertkit.run.resume import check_run_output

    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx2"})  # auto means fp32 here
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = tiny()
    stored = Config(model=cfg)  # train.precision auto
    save_run(tmp_path / "run", Model(cfg), stored)
    with pytest.raises(BertkitError, match=r"train.precision = 'auto', now 'bf16'"):  # no checkpoint: nothing says
        check_run_output(tmp_path / "run", dataclasses.replace(
            stored, train=dataclasses.replace(stored.train, precision="bf16")), True, ("train",), set())
    step = tmp_path / "run" / "checkpoints" / "step-10"
    step.mkdir(parents=True)
    (step / "state.json").write_text(json.dumps({"step": 10, "precision": "bf16"}))
    (tmp_path / "run" / "checkpoints" / "latest").write_text("step-10")
    for precision, taken in (("bf16", True), ("fp16", False)):
        given = dataclasses.replace(stored, train=dataclasses.replace(stored.train, precision=precision))
        if taken:
            check_run_output(tmp_path / "run", given, True, ("train",), set())
        else:
            with pytest.raises(BertkitError, match=r"train.precision = 'auto', now 'fp16'"):
                check_run_output(tmp_path / "run", given, True, ("train",), set())


def test_a_restart_before_the_first_checkpoint_records_the_commands_limits(tmp_path):
    """A run killed before its first checkpoint starts again; the limits of the command that restarted it were
    never written, so a later plain --resume went back to the old ones (a 60-step schedule cut at 30; review,
    2026-11-28)."""
    import dataclasses
    import io

    from rich.console import Console

    from bertkit.run.directory import load_config
    from bertkit.train.loop import _begin

    cfg = tiny()
    stored = Config(model=cfg)
    save_run(tmp_path / "run", Model(cfg), stored)
    given = dataclasses.replace(stored.train, max_steps=stored.train.max_steps + 60, save_every=7)
    assert _begin(tmp_path / "run", True, True, Console(file=io.StringIO()), given) == (None, 0)
    train = load_config(tmp_path / "run").train
    assert (train.max_steps, train.save_every) == (given.max_steps, 7)


def test_a_resume_under_equivalent_auto_keeps_the_stored_precision(tmp_path, monkeypatch):
    """An fp32 run resumed under "auto" (fp32 here) keeps "fp32" in its config.json: on a bf16 machine later,
    auto would mean bf16 and the run would silently change precision."""
    import dataclasses

    from bertkit import hardware
    from bertkit.run.directory import load_config, record_train

    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx2"})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cfg = tiny()
    stored = Config(model=cfg)
    save_run(tmp_path / "run", Model(cfg), dataclasses.replace(
        stored, train=dataclasses.replace(stored.train, precision="fp32")))
    record_train(tmp_path / "run", dataclasses.replace(stored.train, precision="auto", max_steps=99))
    train = load_config(tmp_path / "run").train
    assert (train.precision, train.max_steps) == ("fp32", 99)
