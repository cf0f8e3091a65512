"""The head registry and the one head signature: every head the config can name is registered, each is called as
head(HeadInput), and the padding mask a head reads is the output stack's, whether given by keyword or position;
each stack's Model has a typed forward, and tied heads project onto their own model's token embedding."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny, heads

from bertkit.config import HEADS as CONFIG_HEADS
from bertkit.nn.heads import HeadInput
from bertkit.nn.model import HEADS, TASK_HEADS, Model


def test_the_registry_is_the_configs_list():
    assert set(HEADS) == set(CONFIG_HEADS)
    assert TASK_HEADS == ("classifier", "tagger")


def test_every_encoder_head_reads_one_bundle():
    model = Model(tiny(), heads("pooler", "mlm", "classifier", "tagger", "rtd", num_labels=3)).eval()
    ids = torch.randint(5, 101, (2, 7))
    states = model.backbone(ids).last_hidden_state  # (2, 7, 32)
    select = torch.zeros(2, 7, dtype=torch.bool)
    select[0, 2] = select[1, 4] = True
    x = HeadInput(states, torch.ones(2, 7), select=select)
    shapes = {name: tuple(model.heads[name](x).shape) for name in model.heads}
    assert shapes == {"pooler": (2, 32), "mlm": (2, 101), "classifier": (2, 3), "tagger": (2, 7, 3), "rtd": (2, 7)}
    # the MLM head on selected positions == on the rows selected beforehand
    torch.testing.assert_close(model.heads["mlm"](x), model.mlm_logits(states[select]))


def test_forward_reads_the_mask_by_keyword_or_position():
    model = Model(tiny(), heads("classifier", num_labels=2)).eval()
    ids, mask = torch.randint(5, 101, (2, 6)), torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
    by_name = model(ids, attention_mask=mask, pool="mean", head="classifier")
    by_position = model(ids, mask, pool="mean", head="classifier")
    torch.testing.assert_close(by_position.pooled, by_name.pooled)
    torch.testing.assert_close(by_position.logits, by_name.logits)
    assert not torch.allclose(model(ids, pool="mean").pooled[1], by_name.pooled[1])  # the mask mattered


def test_an_encoder_decoder_pools_with_its_decoder_mask():
    """Heads read the decoder's states, so its mask; the third positional argument is the encoder's mask, not it
    (the old rule took args[1], which for an encoder-decoder is decoder_input_ids)."""
    model = Model(tiny(architecture="encoder-decoder"), heads("lm")).eval()
    src, tgt = torch.randint(5, 101, (2, 5)), torch.randint(5, 101, (2, 4))
    decoder_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    by_name = model(src, tgt, decoder_attention_mask=decoder_mask, pool="mean").pooled
    by_position = model(src, tgt, None, decoder_mask, pool="mean").pooled
    torch.testing.assert_close(by_position, by_name)
    unmasked = model(src, tgt, torch.ones(2, 5), pool="mean").pooled  # an encoder mask only: no decoder padding
    assert not torch.allclose(unmasked[1], by_name[1])


def test_a_head_without_logits_is_refused_by_name():
    model = Model(tiny(), heads("mlm"))
    with pytest.raises(ValueError, match="no 'mlm' head with logits"):
        model(torch.randint(5, 101, (1, 4)), head="mlm")


@pytest.mark.parametrize("architecture,cls,inputs", [
    ("encoder", "EncoderModel", ["input_ids", "attention_mask", "token_type_ids", "position_ids"]),
    ("decoder", "DecoderModel", ["input_ids", "attention_mask", "token_type_ids", "position_ids"]),
    ("encoder-decoder", "EncoderDecoderModel", ["input_ids", "decoder_input_ids", "attention_mask",
                                                "decoder_attention_mask"]),
])
def test_each_stack_has_its_own_typed_forward(architecture, cls, inputs):
    import inspect

    model = Model(tiny(architecture=architecture))
    assert type(model).__name__ == cls and isinstance(model, Model)
    parameters = inspect.signature(type(model).forward).parameters
    assert list(parameters)[1:len(inputs) + 1] == inputs  # by position exactly as the stack takes them
    assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters.values())
    assert parameters["head"].kind == parameters["head"].KEYWORD_ONLY
    other = next(c for c in ("EncoderModel", "DecoderModel") if c != cls)
    with pytest.raises(ValueError, match=f"{other} cannot hold a {architecture}"):
        getattr(__import__("bertkit.nn.model", fromlist=[other]), other)(tiny(architecture=architecture))
    with pytest.raises(TypeError, match="unexpected keyword argument 'decoder_input_ids'|'mlm_select'"):
        model(torch.randint(5, 101, (1, 4)), torch.randint(5, 101, (1, 4)),
              **({"mlm_select": None} if architecture == "encoder-decoder" else {"decoder_input_ids": None}))


def test_tied_heads_project_onto_their_own_models_embedding():
    import copy

    model = Model(tiny(), heads("mlm", "rtd", "generator")).eval()
    keys = set(model.state_dict())
    assert {"heads.mlm.bias", "heads.generator.bias"} <= keys and not any(".decoder." in k for k in keys)
    hidden = torch.randn(3, 32)
    before = model.mlm_logits(hidden)
    twin = copy.deepcopy(model)
    with torch.no_grad():
        model.token_embedding.weight.mul_(2.0)  # the original's embedding changes; the copy's does not
    assert not torch.allclose(model.mlm_logits(hidden), before)
    torch.testing.assert_close(twin.mlm_logits(hidden), before)
    decoder = Model(tiny(architecture="encoder-decoder", share_embeddings=False), heads("lm"))
    torch.testing.assert_close(decoder.lm_logits(hidden), hidden @ decoder.backbone.decoder.embeddings.token.weight.T)


def test_a_meta_model_has_the_real_ones_parameters_and_imports_no_compiler():
    """`meta_model` (the memory check, `info`) builds every stack's parameters and buffers as the real model does,
    on the meta device, without initialising them: a meta normal_ imported torch._dynamo, 2-3 s of a process's
    start (checked in a fresh process: this one may have imported it already)."""
    import subprocess
    import sys

    code = """
import sys
from bertkit.config import HeadsConfig, ModelConfig
from bertkit.nn.model import Model, meta_model
for arch, names in (("encoder", ("mlm", "classifier")), ("decoder", ()), ("encoder-decoder", ())):
    for positions in ("learned", "sinusoidal", "relative", "rotary", "none"):
        cfg = ModelConfig(architecture=arch, vocab_size=101, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_len=64,
                          positions=positions)
        meta = meta_model(cfg, HeadsConfig(names=names, num_labels=3 if names else 0))
        assert "torch._dynamo" not in sys.modules, (arch, positions)
        real = Model(cfg, HeadsConfig(names=names, num_labels=3 if names else 0))
        assert meta.device.type == "meta" and meta.parameter_counts() == real.parameter_counts(), arch
        for ours, theirs in ((meta.named_parameters(), real.named_parameters()),
                             (meta.named_buffers(), real.named_buffers())):
            assert [(n, p.shape, p.dtype) for n, p in ours] == [(n, p.shape, p.dtype) for n, p in theirs], arch
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
