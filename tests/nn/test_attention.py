"""Attention: the SDPA fast path equals the eager reference; MHA/GQA/MQA equal their definitions."""

import pytest
import torch
from torch import nn

import bertkit.nn.attention as attention_module
from bertkit.nn.attention import Attention, build_mask, sdpa, set_attention_impl
from conftest import qkv_runs, tiny

ATOL = 1e-5


def _run(attn, x, kv=None, pad=None, causal=False, impl="sdpa", need_weights=False):
    t_k = x.shape[1] if kv is None else kv.shape[1]
    mask, is_causal = build_mask(pad, x.shape[1], t_k, causal)
    attn.impl = impl
    return attn(x, kv=kv, mask=mask, is_causal=is_causal, need_weights=need_weights)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("positions", ["none", "rotary", "learned"])
@pytest.mark.parametrize("masks", ["none", "padding", "causal", "causal+padding"])
def test_sdpa_equals_eager_self_attention(n_kv_heads, positions, masks):
    attn = Attention(tiny(n_kv_heads=n_kv_heads, positions=positions)).eval()
    x = torch.randn(3, 7, 32)
    pad = None
    if "padding" in masks:
        pad = torch.ones(3, 7, dtype=torch.long)
        pad[0, 4:] = 0
        pad[2, 1:] = 0
    causal = "causal" in masks
    fast, _ = _run(attn, x, pad=pad, causal=causal, impl="sdpa")
    slow, weights = _run(attn, x, pad=pad, causal=causal, impl="eager")
    assert weights.shape == (3, 4, 7, 7)
    torch.testing.assert_close(fast, slow, atol=ATOL, rtol=0)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_sdpa_equals_eager_cross_attention(n_kv_heads):
    attn = Attention(tiny(n_kv_heads=n_kv_heads, positions="rotary"), cross=True).eval()
    assert attn.rotary is None and attn.relative is None  # positions act only in self-attention
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 9, 32)
    pad = torch.ones(2, 9, dtype=torch.long)
    pad[1, 3:] = 0
    fast, _ = _run(attn, x, kv=memory, pad=pad, impl="sdpa")
    slow, weights = _run(attn, x, kv=memory, pad=pad, impl="eager")
    torch.testing.assert_close(fast, slow, atol=ATOL, rtol=0)
    assert weights.shape == (2, 4, 5, 9)
    assert torch.all(weights[1, :, :, 3:] == 0)  # padded memory gets no attention


def test_eager_weights_are_a_masked_distribution():
    attn = Attention(tiny()).eval()
    pad = torch.tensor([[1, 1, 1, 0, 0]])
    _, w = _run(attn, torch.randn(1, 5, 32), pad=pad, causal=True, impl="eager", need_weights=True)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 4, 5))
    assert torch.all(w.triu(diagonal=1) == 0)  # no future
    assert torch.all(w[..., :3, 3:] == 0)  # no padding for real queries


def test_need_weights_uses_eager_and_matches():
    attn = Attention(tiny()).eval()
    x = torch.randn(2, 6, 32)
    out_fast, none = _run(attn, x)
    out_w, w = _run(attn, x, need_weights=True)
    assert none is None and w is not None
    torch.testing.assert_close(out_fast, out_w, atol=ATOL, rtol=0)


def _copy_into_torch_mha(attn: Attention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(32, 4, bias=True, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([attn.q.weight, attn.k.weight, attn.v.weight]))
        ref.in_proj_bias.copy_(torch.cat([attn.q.bias, attn.k.bias, attn.v.bias]))
        ref.out_proj.weight.copy_(attn.o.weight)
        ref.out_proj.bias.copy_(attn.o.bias)
    return ref.eval()


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_mha_equals_torch_multihead_attention(impl):
    """n_kv_heads == n_heads is plain multi-head attention: torch's own implementation is the oracle."""
    attn = Attention(tiny(n_kv_heads=4, positions="none")).eval()
    ref = _copy_into_torch_mha(attn)
    x = torch.randn(3, 6, 32)
    pad = torch.ones(3, 6, dtype=torch.long)
    pad[1, 2:] = 0
    causal = torch.ones(6, 6, dtype=torch.bool).triu(1)  # torch: True = masked
    expected, _ = ref(x, x, x, key_padding_mask=pad == 0, attn_mask=causal, need_weights=False)
    got, _ = _run(attn, x, pad=pad, causal=True, impl=impl)
    torch.testing.assert_close(got, expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("n_kv_heads", [2, 1])
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_gqa_equals_mha_with_shared_kv_heads(n_kv_heads, impl):
    """GQA/MQA is MHA whose key/value heads are copies: query head h reads kv head h // (H / Hkv)."""
    gqa = Attention(tiny(n_kv_heads=n_kv_heads, positions="rotary")).eval()
    mha = Attention(tiny(n_kv_heads=4, positions="rotary")).eval()
    group, dh = 4 // n_kv_heads, 8
    with torch.no_grad():
        for name in ("q", "o"):
            getattr(mha, name).load_state_dict(getattr(gqa, name).state_dict())
        for name in ("k", "v"):
            w = getattr(gqa, name).weight.view(n_kv_heads, dh, 32).repeat_interleave(group, 0).reshape(32, 32)
            b = getattr(gqa, name).bias.view(n_kv_heads, dh).repeat_interleave(group, 0).reshape(32)
            getattr(mha, name).weight.copy_(w)
            getattr(mha, name).bias.copy_(b)
    x = torch.randn(2, 5, 32)
    pad = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    torch.testing.assert_close(_run(gqa, x, pad=pad, impl=impl)[0], _run(mha, x, pad=pad, impl=impl)[0],
                               atol=ATOL, rtol=0)
    assert gqa.k.weight.shape == (n_kv_heads * dh, 32)  # fewer kv parameters is the point


def test_build_mask_shapes_and_open_rows():
    assert build_mask(None, 4, 4, causal=False) == (None, False)
    assert build_mask(None, 4, 4, causal=True) == (None, True)
    mask, is_causal = build_mask(None, 2, 5, causal=True)  # 3 cached keys, 2 new queries
    assert not is_causal
    assert mask[0, 0].tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    left_padded = torch.tensor([[0, 0, 1, 1]])
    mask, _ = build_mask(left_padded, 4, 4, causal=True)
    assert mask[0, 0, 0].all() and mask[0, 0, 1].all()  # fully masked pad rows are opened (stay finite)
    assert mask[0, 0, 3].tolist() == [False, False, True, True]
    mask, _ = build_mask(torch.tensor([[1, 1, 0], [0, 0, 0]]), 3, 3, causal=False)
    assert mask.shape == (2, 1, 1, 3)  # padding alone stays a broadcast row, never (B, 1, T, T)
    assert mask[1].all()  # an all-padding row is opened so softmax stays finite
    # with 3 keys cached, a mask of the 2 new tokens alone would broadcast over the cached keys' padding: refused
    with pytest.raises(ValueError, match="attention_mask covers 2 positions, the keys are 5"):
        build_mask(torch.tensor([[1, 1]]), 2, 5, causal=True)


def test_all_padding_row_stays_finite():
    attn = Attention(tiny()).eval()
    pad = torch.tensor([[1, 1, 0], [0, 0, 0]])
    for impl in ("sdpa", "eager"):
        out, _ = _run(attn, torch.randn(2, 3, 32), pad=pad, impl=impl)
        assert torch.isfinite(out).all()


def test_set_attention_impl_rejects_unknown():
    with pytest.raises(ValueError):
        set_attention_impl(Attention(tiny()), "flash")


@pytest.mark.parametrize("gqa", [False, True])
def test_bf16_cpu_training_attention_is_computed_in_fp32(gqa, monkeypatch):
    """A bf16 CPU pass with gradients takes fp32 attention (PyTorch's bf16 CPU flash backward is 1.8-3x slower): the
    result is the fp32 function of the same bf16 inputs, rounded once to bf16, and gradients reach q, k and v in
    bf16. Without gradients (inference), or with the switch off, it is the bf16 kernel's own result."""
    torch.manual_seed(0)
    kv_heads = 2 if gqa else 4
    q = torch.randn(2, 4, 6, 8, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(2, kv_heads, 6, 8, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[1, ..., 4:] = False  # the second row's last two keys are padding
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    reference = torch.nn.functional.scaled_dot_product_attention(
        q32, k32, v32, attn_mask=mask, enable_gqa=gqa)  # (2, 4, 6, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = sdpa(q, k, v, mask, 0.0, False, gqa=gqa)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, reference.to(torch.bfloat16), atol=0, rtol=0)
    out.float().sum().backward()
    reference.sum().backward()
    for t, t32 in ((q, q32), (k, k32), (v, v32)):  # the fp32 gradients, rounded once to the inputs' bf16
        assert t.grad.dtype == torch.bfloat16 and t.grad.abs().sum() > 0
        torch.testing.assert_close(t.grad, t32.grad.to(torch.bfloat16), atol=0, rtol=0)
    with torch.no_grad():
        bf16_kernel = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        torch.testing.assert_close(sdpa(q, k, v, mask, 0.0, False, gqa=gqa), bf16_kernel, atol=0, rtol=0)
    assert not torch.equal(bf16_kernel, out.detach())  # the two paths are told apart by these inputs
    # gradients for the keys and values only (a frozen query side) take the fp32 path too
    only_kv = sdpa(q.detach(), k, v, mask, 0.0, False, gqa=gqa)
    torch.testing.assert_close(only_kv, reference.detach().to(torch.bfloat16), atol=0, rtol=0)
    monkeypatch.setattr(attention_module, "CPU_BF16_TRAINING_ATTENTION_IN_FP32", False)
    torch.testing.assert_close(sdpa(q, k, v, mask, 0.0, False, gqa=gqa).detach(), bf16_kernel, atol=0, rtol=0)


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])  # MHA, GQA, MQA
@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_one_stacked_qkv_product_equals_three(monkeypatch, n_kv_heads, positions):
    """FUSE_QKV (a benchmark lever): where gradients are taken, one product over the stacked q/k/v weights gives
    the same outputs and the same gradients for each of the three weights as three products."""
    torch.manual_seed(0)
    attention = Attention(tiny(n_kv_heads=n_kv_heads, positions=positions)).train()
    x = torch.randn(2, 9, 32)
    (plain, plain_grads), (fused_out, fused_grads) = qkv_runs(monkeypatch, attention, x, (False, True))
    torch.testing.assert_close(fused_out, plain, rtol=1e-5, atol=1e-6)
    for a, b in zip(fused_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_by_default_q_k_v_are_one_product_on_a_gpu_only_and_only_where_gradients_are_taken(monkeypatch):
    """FUSE_QKV None (the default): one stacked product where the input is on a GPU and gradients are taken;
    three products on a CPU (its runs keep their exact numbers) and wherever no gradient is taken."""
    assert attention_module.FUSE_QKV is None
    attention = Attention(tiny()).train()
    calls = []
    original = Attention._fused_qkv
    monkeypatch.setattr(Attention, "_fused_qkv", lambda self, x: calls.append(x.device.type) or original(self, x))
    attention(torch.randn(2, 5, 32))
    assert calls == []  # a CPU input: three products
    monkeypatch.setattr(attention_module, "FUSE_QKV", True)
    with torch.no_grad():
        attention(torch.randn(2, 5, 32))
    assert calls == []  # forced on, but no gradient is taken
    attention(torch.randn(2, 5, 32))
    assert calls == ["cpu"]
