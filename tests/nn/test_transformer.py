"""The three stacks: no future leak, padding invariance, gradients everywhere, outputs, tied embeddings."""

import pytest
import torch

from bertkit.nn.attention import set_attention_impl
from bertkit.nn.heads import HeadInput
from bertkit.nn.model import Model
from conftest import POSITIONS, tiny, heads


def _forward(model, ids, mask=None, src=None, src_mask=None):
    if model.config.architecture == "encoder-decoder":
        return model(src, ids, attention_mask=src_mask, decoder_attention_mask=mask).last_hidden_state
    return model(ids, mask).last_hidden_state


@pytest.mark.parametrize("architecture", ["decoder", "encoder-decoder"])
@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_causal_stack_does_not_see_the_future(architecture, positions, impl):
    model = Model(tiny(architecture=architecture, positions=positions)).eval()
    set_attention_impl(model, impl)
    src = torch.randint(1, 101, (2, 6))
    ids = torch.randint(1, 101, (2, 10))
    changed = ids.clone()
    changed[:, 6:] = torch.randint(1, 101, (2, 4))
    a, b = _forward(model, ids, src=src), _forward(model, changed, src=src)
    torch.testing.assert_close(a[:, :6], b[:, :6], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_encoder_is_bidirectional():
    model = Model(tiny()).eval()
    ids = torch.randint(1, 101, (1, 8))
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] % 100) + 1
    assert not torch.allclose(model(ids).last_hidden_state[:, 0], model(changed).last_hidden_state[:, 0])


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_padding_does_not_change_real_tokens(positions, impl):
    model = Model(tiny(positions=positions)).eval()
    set_attention_impl(model, impl)
    short = torch.randint(1, 101, (1, 5))
    alone = model(short).last_hidden_state
    other = torch.randint(1, 101, (1, 9))
    batch = torch.cat([torch.cat([short, torch.zeros(1, 4, dtype=torch.long)], 1), other])
    mask = torch.tensor([[1] * 5 + [0] * 4, [1] * 9])
    padded = model(batch, mask).last_hidden_state
    torch.testing.assert_close(padded[0, :5], alone[0], atol=1e-5, rtol=0)
    torch.testing.assert_close(padded[1], model(other).last_hidden_state[0], atol=1e-5, rtol=0)
    unmasked = model(batch).last_hidden_state  # the mask is what protects the real tokens
    assert not torch.allclose(unmasked[0, :5], alone[0], atol=1e-4)


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_left_padding_does_not_change_a_decoder(positions, impl):
    """Right padding cannot reach earlier tokens of a causal stack anyway; left padding (batched generation) can,
    unless the mask and the position ids keep it out."""
    model = Model(tiny(architecture="decoder", positions=positions)).eval()
    set_attention_impl(model, impl)
    short = torch.randint(1, 101, (1, 5))
    alone = model(short).last_hidden_state
    batch = torch.cat([torch.zeros(1, 4, dtype=torch.long), short], 1)
    mask = torch.tensor([[0] * 4 + [1] * 5])
    position_ids = (mask.cumsum(1) - 1).clamp(min=0)  # (B, T): real tokens at 0..4
    padded = model(batch, mask, position_ids=position_ids).last_hidden_state
    torch.testing.assert_close(padded[0, 4:], alone[0], atol=1e-5, rtol=0)
    unmasked = model(batch, position_ids=position_ids).last_hidden_state
    assert not torch.allclose(unmasked[0, 4:], alone[0], atol=1e-4)


def test_source_padding_does_not_change_the_decoder():
    model = Model(tiny(architecture="encoder-decoder", positions="sinusoidal")).eval()
    src, tgt = torch.randint(1, 101, (1, 4)), torch.randint(1, 101, (1, 6))
    alone = _forward(model, tgt, src=src)
    padded_src = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], 1)
    src_mask = torch.tensor([[1, 1, 1, 1, 0, 0, 0]])
    torch.testing.assert_close(_forward(model, tgt, src=padded_src, src_mask=src_mask), alone, atol=1e-5, rtol=0)


VARIANTS = [
    dict(),
    dict(architecture="decoder", norm_position="pre", norm="rmsnorm", activation="swiglu", positions="rotary",
         n_kv_heads=2, bias=False, type_vocab_size=0, embedding_norm=False),
    dict(architecture="encoder", positions="relative", n_kv_heads=1, heads=heads("pooler", "mlm")),
    dict(architecture="encoder-decoder", positions="sinusoidal", activation="relu", scale_embeddings=True,
         n_decoder_layers=3),
    dict(architecture="encoder-decoder", positions="learned", share_embeddings=False, norm_position="pre"),
]


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: "-".join(f"{v}" for v in o.values()) or "bert")
def test_every_parameter_gets_a_gradient(overrides):
    overrides = dict(overrides)
    on_top = overrides.pop("heads", heads())
    model = Model(tiny(**overrides), on_top).train()
    ids = torch.randint(1, 101, (2, 7))
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 1]] * 2)
    if model.config.architecture == "encoder-decoder":
        out = model(ids, ids[:, :5]).last_hidden_state
    elif model.config.architecture == "encoder":
        out = model(ids, token_type_ids=types).last_hidden_state
    else:
        out = model(ids).last_hidden_state
    # Project with fixed random weights: a plain sum of LayerNorm outputs has zero input gradient.
    loss = (out * torch.randn_like(out)).sum()
    if "pooler" in model.heads:
        loss = loss + (model.heads["pooler"](HeadInput(out)) * torch.randn(2, 32)).sum()
    if "mlm" in model.heads:
        logits = model.mlm_logits(out[:, 1:4].reshape(-1, 32))  # (6, V)
        loss = loss + torch.nn.functional.cross_entropy(logits, torch.randint(0, 101, (6,)))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_outputs_hidden_states_and_attentions():
    model = Model(tiny(architecture="encoder-decoder", n_layers=2, n_decoder_layers=3)).eval()
    src, tgt = torch.randint(1, 101, (2, 6)), torch.randint(1, 101, (2, 4))
    out = model(src, tgt, output_hidden_states=True, output_attentions=True)
    assert out.last_hidden_state.shape == (2, 4, 32)
    assert len(out.hidden_states) == 4 and out.hidden_states[-1] is out.last_hidden_state
    assert len(out.attentions) == 3
    assert out.attentions[0]["self"].shape == (2, 4, 4, 4) and out.attentions[0]["cross"].shape == (2, 4, 4, 6)
    plain = model(src, tgt).last_hidden_state
    torch.testing.assert_close(plain, out.last_hidden_state, atol=1e-5, rtol=0)


def test_shared_and_separate_embeddings():
    shared = Model(tiny(architecture="encoder-decoder"))
    bb = shared.backbone
    assert bb.decoder.embeddings.token.weight is bb.encoder.embeddings.token.weight
    separate = Model(tiny(architecture="encoder-decoder", share_embeddings=False))
    assert separate.parameter_counts()["embeddings"] == shared.parameter_counts()["embeddings"] + 101 * 32


def test_parameter_counts_add_up():
    model = Model(tiny(), heads("pooler"))
    counts = model.parameter_counts()
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["heads"] == 32 * 32 + 32
    assert counts["embeddings"] == 101 * 32 + 64 * 32 + 2 * 32 + 2 * 32


def test_longer_than_max_len_is_refused():
    with pytest.raises(ValueError, match="max_len"):
        Model(tiny(max_len=8))(torch.randint(1, 101, (1, 9)))
    with pytest.raises(ValueError, match="beyond max_len"):
        Model(tiny(max_len=8))(torch.randint(1, 101, (1, 3)), position_ids=torch.tensor([0, 1, 8]))


def test_rotary_survives_a_cast_to_bf16():
    """Angles come from (d_head, base) in fp32: casting the model must not round positions above 256 together."""
    model = Model(tiny(architecture="decoder", positions="rotary", max_len=1024)).eval()
    ids = torch.randint(1, 101, (1, 600))
    reference = model(ids).last_hidden_state
    model.to(torch.bfloat16).float()  # a round trip through bf16 must leave nothing rounded behind but weights
    rotary = model.backbone.blocks[0].self_attn.rotary
    cos, _ = rotary.cos_sin(torch.arange(590, 600))
    assert cos.dtype == torch.float32 and len({round(v, 6) for v in cos[0, :, 0].tolist()}) == 10
    assert torch.isfinite(model(ids).last_hidden_state).all() and reference.shape == (1, 600, 32)


def test_pooling_ignores_padding_and_heads_have_the_right_shapes():
    from bertkit.nn.heads import Pooling

    hidden = torch.randn(2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    torch.testing.assert_close(Pooling("mean")(hidden, mask)[0], hidden[0, :3].mean(0))
    torch.testing.assert_close(Pooling("max")(hidden, mask)[0], hidden[0, :3].amax(0))
    torch.testing.assert_close(Pooling("cls")(hidden, mask), hidden[:, 0])
    ids = torch.randint(5, 100, (2, 7))
    for pooling in ("cls", "mean", "max"):
        model = Model(tiny(), heads("classifier", num_labels=3, pooling=pooling)).eval()
        out = model(ids, attention_mask=torch.ones_like(ids), head="classifier")
        assert out.logits.shape == (2, 3)
        # padding a row does not change its class scores
        padded = torch.cat([ids, torch.zeros(2, 3, dtype=torch.long)], 1)
        mask = torch.cat([torch.ones_like(ids), torch.zeros(2, 3, dtype=torch.long)], 1)
        torch.testing.assert_close(model(padded, attention_mask=mask, head="classifier").logits, out.logits,
                                   atol=1e-5, rtol=1e-4)
    tagger = Model(tiny(), heads("tagger", num_labels=9))
    assert tagger(ids, head="tagger").logits.shape == (2, 7, 9)
    with pytest.raises(ValueError, match="no 'classifier' head"):
        tagger(ids, head="classifier")
