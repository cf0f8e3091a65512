"""checkpoints/step-N round trips: weights, optimiser, scheduler, RNG states and fp16's GradScaler (whose loss scale
an fp16 run on a GPU resumes with; the scaler itself runs on the CPU here)."""

from __future__ import annotations

import torch
from conftest import heads, tiny

from bertkit.nn.model import Model
from bertkit.run.checkpoints import latest_checkpoint, load_checkpoint, rng_state, save_checkpoint


def _parts(seed: int):
    torch.manual_seed(seed)
    model = Model(tiny(vocab_size=60), heads("mlm"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (s + 1))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    return model, optimizer, scheduler, scaler


def test_a_checkpoint_round_trips_the_training_state_and_the_loss_scale(tmp_path):
    model, optimizer, scheduler, scaler = _parts(0)
    loss = model(torch.randint(5, 60, (2, 8)), mlm_select=torch.ones(2, 8, dtype=torch.bool)).logits.sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scheduler.step()
    scaler.update(2.0 ** 7)  # as after overflows: the scale went down
    save_checkpoint(tmp_path, 1, model, optimizer, scheduler, {"step": 1}, 2, [rng_state()], scaler=scaler)

    fresh, fresh_optimizer, fresh_scheduler, fresh_scaler = _parts(1)
    state, rngs = load_checkpoint(latest_checkpoint(tmp_path), fresh, fresh_optimizer, fresh_scheduler,
                                  fresh_scaler)
    assert state["step"] == 1 and len(rngs) == 1
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    assert fresh_scheduler.state_dict()["last_epoch"] == 1
    assert fresh_optimizer.state_dict()["state"][0]["step"] == 1
    assert fresh_scaler.get_scale() == 2.0 ** 7

    # a checkpoint written without a scaler (fp32 / bf16) leaves a given scaler as it is
    save_checkpoint(tmp_path, 2, model, optimizer, scheduler, {"step": 2}, 2, [rng_state()])
    untouched = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    load_checkpoint(latest_checkpoint(tmp_path), fresh, scaler=untouched)
    assert untouched.get_scale() == 2.0 ** 10


def test_a_state_or_rng_file_of_the_wrong_types_is_a_damaged_checkpoint_not_a_traceback(tmp_path):
    """Valid JSON of another type (`"step": "30"`, `"total_steps": null`) or an RNG file holding float tensors was a
    TypeError where the resume compared or set them (review, 2026-11-28); the file is named as damaged now."""
    import json

    import pytest

    from bertkit.errors import BertkitError
    from bertkit.run.checkpoints import read_state

    model, optimizer, scheduler, _ = _parts(0)
    save_checkpoint(tmp_path, 1, model, optimizer, scheduler, {"step": 1, "total_steps": 4}, 2, [rng_state()])
    step = latest_checkpoint(tmp_path)
    good = (step / "state.json").read_text()
    for change, said in (({"step": "30"}, "step is '30', not a number >= 0"),
                         ({"total_steps": None}, "total_steps is None, not a number >= 0"),
                         ({"elapsed": -1.0}, "elapsed is -1.0, not a number >= 0")):
        (step / "state.json").write_text(json.dumps({**json.loads(good), **change}))
        for read in (lambda: read_state(step), lambda: load_checkpoint(step, model)):
            with pytest.raises(BertkitError, match="checkpoint step-1 is damaged: .*state.json: " + said):
                read()
    (step / "state.json").write_text(good)
    torch.save([{"cpu": torch.zeros(8)}], step / "rng.pt")
    with pytest.raises(BertkitError, match="checkpoint step-1 is damaged: .*rng.pt: not a bertkit RNG state"):
        load_checkpoint(step, model)


def test_a_checkpoint_from_a_lost_future_is_pruned_by_the_next_save(tmp_path):
    """step-4 written, then a kill before `latest` named it; the resume went on from step-2 and saved step-3. The
    stale step-4 kept its place (pruning keeps the newest by number, so step-2 went instead) and was what a damaged
    `latest` fell back to (review, 2026-11-28)."""
    from bertkit.run.checkpoints import LATEST, checkpoint_steps

    model, optimizer, scheduler, _ = _parts(0)
    for step in (2, 4):
        save_checkpoint(tmp_path, step, model, optimizer, scheduler, {"step": step}, 2, [rng_state()])
    (tmp_path / "checkpoints" / LATEST).write_text("step-2")  # as a kill between step-4's rename and the flip
    save_checkpoint(tmp_path, 3, model, optimizer, scheduler, {"step": 3}, 2, [rng_state()])
    assert checkpoint_steps(tmp_path) == [3, 2]
    (tmp_path / "checkpoints" / LATEST).unlink()
    assert latest_checkpoint(tmp_path).name == "step-3"
    for step in (5, 6, 7):  # and pruning keeps the newest two as before
        save_checkpoint(tmp_path, step, model, optimizer, scheduler, {"step": step}, 2, [rng_state()])
    assert checkpoint_steps(tmp_path) == [7, 6]
