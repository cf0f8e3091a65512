"""Unpadded (variable-length) encoder batches: the real tokens packed into one row give the padded forward's states
and gradients at every real token, for every position kind that allows it; auto packs only where the GPU kernel
runs."""

import pytest
import torch

from bertkit.nn import transformer
from bertkit.nn.model import Model
from bertkit.nn.transformer import set_unpad
from conftest import tiny, heads


def _batch():
    ids = torch.randint(5, 101, (4, 9))
    mask = torch.ones_like(ids)
    mask[0, 3:] = 0  # lengths 3, 9, 6, 1
    mask[2, 6:] = 0
    mask[3, 1:] = 0
    return ids, mask


@pytest.mark.parametrize("overrides", [dict(positions="learned"), dict(positions="rotary"),
                                       dict(positions="sinusoidal", norm_position="pre"),
                                       dict(positions="rotary", n_kv_heads=1, activation="swiglu"),
                                       dict(architecture="encoder-decoder", positions="rotary")])
def test_packed_equals_padded_at_every_real_token_forward_and_backward(overrides):
    model = Model(tiny(**overrides, dropout=0.0, attention_dropout=0.0))
    ids, mask = _batch()
    encoder = model.backbone.encoder if overrides.get("architecture") == "encoder-decoder" else model.backbone
    weights = torch.randn(4, 9, model.config.d_model)
    results = {}
    for mode in ("never", "always"):
        set_unpad(model, mode)
        model.zero_grad()
        states = encoder(ids, mask).last_hidden_state  # (B, T, D)
        (states * weights * mask[..., None]).sum().backward()
        results[mode] = states, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    (padded, padded_grads), (packed, packed_grads) = results["never"], results["always"]
    real = mask.bool()
    torch.testing.assert_close(packed[real], padded[real], atol=1e-5, rtol=1e-5)
    assert (packed[~real] == 0).all()  # padding positions come back as zeros
    assert packed_grads.keys() == padded_grads.keys()
    for name, grad in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], grad, atol=1e-5, rtol=1e-4, msg=name)


def test_task_heads_see_the_same_states_packed():
    model = Model(tiny(positions="rotary"), heads("classifier", num_labels=3, pooling="mean")).eval()
    ids, mask = _batch()
    with torch.no_grad():
        set_unpad(model, "never")
        padded = model(ids, attention_mask=mask, head="classifier").logits
        set_unpad(model, "always")
        packed = model(ids, attention_mask=mask, head="classifier").logits
    torch.testing.assert_close(packed, padded, atol=1e-5, rtol=1e-5)


def test_auto_packs_only_where_the_varlen_kernel_runs(monkeypatch):
    model = Model(tiny(positions="rotary")).eval()
    relative = Model(tiny(positions="relative")).eval()
    ids, mask = _batch()
    monkeypatch.setattr(transformer, "_pack", lambda *a: pytest.fail("this forward must not pack"))
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(ids, mask)  # auto on a CPU, even in bf16: no flash kernel here, the padded path
        set_unpad(relative, "always")
        relative(ids, mask)  # relative positions need the padded grid: never packed, even when asked
        set_unpad(model, "always")
        model(ids, torch.ones_like(mask))  # no padding to drop
    with pytest.raises(ValueError, match="unpad must be"):
        set_unpad(model, "sometimes")
