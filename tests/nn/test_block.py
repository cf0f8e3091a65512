"""The Block against PyTorch's reference layers (weights copied), norms, FFN variants and dropout placement."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bertkit.nn.attention import build_mask
from bertkit.nn.block import Block, FeedForward
from conftest import tiny


def _copy_attention(ours, ref):
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([ours.q.weight, ours.k.weight, ours.v.weight]))
        ref.in_proj_bias.copy_(torch.cat([ours.q.bias, ours.k.bias, ours.v.bias]))
        ref.out_proj.weight.copy_(ours.o.weight)
        ref.out_proj.bias.copy_(ours.o.bias)


def _copy_ffn_and_norms(block, ref, norms):
    with torch.no_grad():
        ref.linear1.load_state_dict(block.ffn.w_in.state_dict())
        ref.linear2.load_state_dict(block.ffn.w_out.state_dict())
        for ours, theirs in zip(norms, (ref.norm1, ref.norm2, getattr(ref, "norm3", None))):
            theirs.load_state_dict(ours.state_dict())


def _randomise(module):
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)


@pytest.mark.parametrize("norm_position", ["post", "pre"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_equals_torch_encoder_layer(norm_position, activation):
    cfg = tiny(norm_position=norm_position, activation=activation, positions="none", norm_eps=1e-5)
    block = Block(cfg).eval()
    _randomise(block)
    ref = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation=activation, batch_first=True,
                                     norm_first=norm_position == "pre").eval()
    _copy_attention(block.self_attn, ref.self_attn)
    _copy_ffn_and_norms(block, ref, [block.self_attn_norm, block.ffn_norm])
    x = torch.randn(3, 6, 32)
    pad = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    mask, _ = build_mask(pad, 6, 6, causal=False)
    ours, _ = block(x, mask=mask)
    theirs = ref(x, src_key_padding_mask=pad == 0)
    real = pad.bool()
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_position", ["post", "pre"])
def test_decoder_block_equals_torch_decoder_layer(norm_position):
    cfg = tiny(norm_position=norm_position, activation="relu", positions="none", norm_eps=1e-5)
    block = Block(cfg, cross=True).eval()
    _randomise(block)
    ref = nn.TransformerDecoderLayer(32, 4, 64, dropout=0.0, activation="relu", batch_first=True,
                                     norm_first=norm_position == "pre").eval()
    _copy_attention(block.self_attn, ref.self_attn)
    _copy_attention(block.cross_attn, ref.multihead_attn)
    _copy_ffn_and_norms(block, ref, [block.self_attn_norm, block.cross_attn_norm, block.ffn_norm])
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    memory_pad = torch.tensor([[1] * 7, [1, 1, 1, 1, 0, 0, 0]])
    mask, is_causal = build_mask(None, 5, 5, causal=True)
    cross_mask, _ = build_mask(memory_pad, 5, 7, causal=False)
    ours, weights = block(x, mask=mask, is_causal=is_causal, memory=memory, memory_mask=cross_mask,
                          need_weights=True)
    theirs = ref(x, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(5), tgt_is_causal=True,
                 memory_key_padding_mask=memory_pad == 0)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)
    assert weights["self"].shape == (2, 4, 5, 5) and weights["cross"].shape == (2, 4, 5, 7)


def test_swiglu_ffn_formula():
    ffn = FeedForward(tiny(activation="swiglu"))
    x = torch.randn(2, 3, 32)
    expected = ffn.w_out(F.silu(ffn.w_gate(x)) * ffn.w_in(x))
    torch.testing.assert_close(ffn(x), expected)
    assert FeedForward(tiny(activation="gelu")).w_gate is None


def test_rmsnorm_and_no_bias_switches():
    block = Block(tiny(norm="rmsnorm", bias=False))
    assert isinstance(block.ffn_norm, nn.RMSNorm)
    assert all(not name.endswith("bias") for name, _ in block.named_parameters())


def test_dropout_only_in_training():
    block = Block(tiny(dropout=0.3, attention_dropout=0.3))
    x = torch.randn(2, 6, 32)
    block.train()
    assert not torch.allclose(block(x)[0], block(x)[0])  # dropout is active (sublayer outputs, attention)
    block.eval()
    torch.testing.assert_close(block(x)[0], block(x)[0])


def test_attention_dropout_is_applied_to_weights():
    """With only attention dropout on, training outputs vary; with everything at 0, train == eval."""
    x = torch.randn(2, 6, 32)
    only_attn = Block(tiny(dropout=0.0, attention_dropout=0.5)).train()
    assert not torch.allclose(only_attn(x)[0], only_attn(x)[0])
    no_dropout = Block(tiny()).train()
    torch.testing.assert_close(no_dropout(x)[0], no_dropout.eval()(x)[0])
