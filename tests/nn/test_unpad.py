"""Unpadded (variable-length) encoder batches: the real tokens packed into one row give the padded forward's states
and gradients at every real token, for every position kind that allows it; auto packs only where the GPU kernel
runs; the call to PyTorch's varlen kernel fits its signature (with or without enable_gqa)."""

import pytest
import torch
import torch.nn.functional as F

from bertkit.nn import attention, transformer
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


def test_a_compiled_forward_stays_padded_one_graph_for_every_batch_length():
    """Under torch.compile the packing's data-dependent steps (the any-padding check, boolean gathers, the kernel's
    integer max length) would break the graph and recompile per batch (18 breaks, 16 graphs for these 5 batches
    before): a compiled forward takes the padded path, one graph for every length, the same real-token states."""
    from torch._dynamo.utils import counters

    model = Model(tiny(positions="rotary"), heads("classifier", num_labels=3, pooling="mean")).eval()
    set_unpad(model, "always")  # as auto does on a GPU with the varlen kernel
    batches = []
    for t in (9, 13, 17, 21, 30):
        ids = torch.randint(5, 101, (3, t))
        mask = torch.ones_like(ids)
        mask[1, t - 3:] = 0
        mask[2, t // 2:] = 0
        batches.append((ids, mask))
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, dynamic=True, backend="eager")
    with torch.no_grad():
        for ids, mask in batches:
            eager = model(ids, attention_mask=mask, head="classifier").logits  # packed
            torch.testing.assert_close(compiled(ids, attention_mask=mask, head="classifier").logits, eager,
                                       atol=1e-5, rtol=1e-5)
    assert not counters["graph_break"]
    assert counters["stats"]["unique_graphs"] == 1


def _varlen_reference(query, key, value, cu_seq_q, max_q, enable_gqa=False):
    """What the variable-length kernel computes, by SDPA with the block-diagonal mask: query (N, H, dh), key / value
    (N, Hkv, dh) -> (N, H, dh)."""
    mask = attention.Packed(cu_seq_q, max_q).block_mask()  # (1, 1, N, N)
    q, k, v = (t.transpose(0, 1)[None] for t in (query, key, value))  # (1, heads, N, dh)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=enable_gqa)[0].transpose(0, 1)


def _fake_kernels(calls: list) -> dict:
    """Stand-ins for `varlen_attn` with torch 2.10 / 2.11's signature (no enable_gqa) and with torch 2.13's, which
    record the k/v head count and keywords they were given. Without enable_gqa, SDPA refuses unequal head counts:
    the old kernel's reference only runs on repeated heads."""
    def old(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None):
        calls.append((key.shape[1], {}))
        return _varlen_reference(query, key, value, cu_seq_q, max_q)

    def new(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
            window_size=(-1, -1), enable_gqa=None):  # None: the keyword was not passed
        calls.append((key.shape[1], {} if enable_gqa is None else {"enable_gqa": enable_gqa}))
        return _varlen_reference(query, key, value, cu_seq_q, max_q, bool(enable_gqa))

    return {"without enable_gqa": old, "with enable_gqa": new}


@pytest.mark.parametrize("kernel", ["without enable_gqa", "with enable_gqa"])
@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])  # MHA, GQA, MQA (4 query heads)
def test_the_varlen_call_fits_the_kernels_signature(kernel, n_kv_heads, monkeypatch):
    """torch 2.10 / 2.11's varlen_attn has no enable_gqa: the signature is read once and GQA / MQA repeat the k/v
    heads (MHA never passes the keyword). Either way the packed states equal the block-diagonal SDPA reference."""
    calls: list = []
    fake = _fake_kernels(calls)[kernel]
    model = Model(tiny(positions="rotary", n_kv_heads=n_kv_heads)).eval()
    set_unpad(model, "always")
    ids, mask = _batch()
    real = mask.bool()
    with torch.no_grad():
        reference = model(ids, mask).last_hidden_state  # CPU: kernel not ready, block-diagonal SDPA
        monkeypatch.setattr(attention, "varlen_attn", fake)
        monkeypatch.setattr(attention, "VARLEN_GQA", attention.takes_keyword(fake, "enable_gqa"))
        monkeypatch.setattr(attention.Packed, "kernel_ready", lambda self, q: True)
        through_kernel = model(ids, mask).last_hidden_state
    assert attention.VARLEN_GQA == (kernel == "with enable_gqa")
    assert len(calls) == model.config.n_layers  # every block took the kernel
    torch.testing.assert_close(through_kernel[real], reference[real], atol=1e-6, rtol=1e-5)
    gqa = n_kv_heads != 4
    if kernel == "without enable_gqa":
        assert calls == [(4, {})] * len(calls)  # heads repeated to the query heads, no keyword
    else:
        assert calls == [(n_kv_heads, {"enable_gqa": True} if gqa else {})] * len(calls)


def test_the_signature_check():
    assert attention.takes_keyword(lambda q, *, enable_gqa=False: q, "enable_gqa")
    assert not attention.takes_keyword(lambda q, **kwargs: q, "enable_gqa")  # a wrapper's **kwargs proves nothing
    assert not attention.takes_keyword(object(), "enable_gqa")  # no readable signature: the safe answer
    if attention.varlen_attn is not None:
        assert attention.VARLEN_GQA == attention.takes_keyword(attention.varlen_attn, "enable_gqa")


def test_a_process_that_runs_on_a_cpu_never_imports_dynamo():
    """PyTorch's varlen module imports torch._dynamo, ~0.8 s at the start of every process: bertkit imports it on
    first use on a GPU, so the CLI's imports and a CPU forward through the unpadded path leave it out (`embed`,
    `predict`, `search` start that much sooner); `attention.varlen_attn` and `VARLEN_GQA` still read as before."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = """
import sys, torch
import bertkit.cli, bertkit.inference, bertkit.tasks.registry
from bertkit.nn.model import Model
from bertkit.nn.transformer import set_unpad
from conftest import tiny
model = Model(tiny())
set_unpad(model, "always")  # through `_packed`, which asks whether the kernel can run
ids = torch.randint(5, 101, (2, 6))
mask = torch.ones_like(ids)
mask[0, 3:] = 0
model.backbone(ids, mask)
print("dynamo" if "torch._dynamo" in sys.modules else "no dynamo")
from bertkit.nn import attention
print(attention.varlen_attn is None or callable(attention.varlen_attn), type(attention.VARLEN_GQA).__name__)
"""
    tests = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tests, timeout=120,
                          env={**os.environ, "PYTHONPATH": f"{tests.parent}:{tests}"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["no", "dynamo", "True", "bool"]
