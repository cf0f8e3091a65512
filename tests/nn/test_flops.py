"""The analytic FLOP count equals what torch's FlopCounterMode counts for the real forward and backward passes
(eager attention: the CPU's fused SDPA kernel is invisible to the counter)."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from bertkit.nn.attention import set_attention_impl
from bertkit.nn.flops import forward_flops, train_flops
from bertkit.nn.model import Model
from conftest import heads, tiny

B, T = 3, 12


def counted(model: Model, run) -> tuple[int, int]:
    """(forward, forward + backward) FLOPs of `run(model) -> loss`, as FlopCounterMode counts them."""
    set_attention_impl(model, "eager")
    with FlopCounterMode(display=False) as forward:
        run(model)
    with FlopCounterMode(display=False) as step:
        run(model).backward()
    return forward.get_total_flops(), step.get_total_flops()


def mlm_run(select):
    def run(model):
        ids = torch.randint(5, 101, (B, T))
        return model(ids, mlm_select=select).logits.float().logsumexp(-1).sum()
    return run


@pytest.mark.parametrize("overrides", [
    {}, {"activation": "swiglu"}, {"n_kv_heads": 1}, {"n_kv_heads": 2, "positions": "rotary"},
    {"positions": "relative"}, {"norm_position": "pre", "bias": False}, {"d_ff": 48, "n_layers": 3},
])
def test_mlm_count_matches_the_flop_counter(overrides):
    cfg = tiny(**overrides)
    select = torch.zeros(B, T, dtype=torch.bool)
    select[:, ::4] = True  # 3 masked positions per row
    fwd, step = counted(Model(cfg, heads("mlm")), mlm_run(select))
    assert forward_flops(cfg, "mlm", B, T, masked=int(select.sum())) == fwd
    assert train_flops(cfg, "mlm", B, T, masked=int(select.sum())) == step


def test_clm_count_matches_the_flop_counter():
    cfg = tiny(architecture="decoder", norm_position="pre", positions="rotary")
    fwd, step = counted(Model(cfg, heads("lm")), lambda m: m(torch.randint(5, 101, (B, T)), head="lm").logits.sum())
    assert forward_flops(cfg, "clm", B, T) == fwd
    assert train_flops(cfg, "clm", B, T) == step


def test_seq2seq_count_matches_the_flop_counter():
    cfg = tiny(architecture="encoder-decoder", n_decoder_layers=3, positions="sinusoidal")
    source = 9

    def run(model):
        out = model(torch.randint(5, 101, (B, source)), torch.randint(5, 101, (B, T)), head="lm")
        return out.logits.sum()
    fwd, step = counted(Model(cfg, heads("lm")), run)
    assert forward_flops(cfg, "seq2seq", B, T, source=source) == fwd
    assert train_flops(cfg, "seq2seq", B, T, source=source) == step


@pytest.mark.parametrize("generator_d_model", [8, 32])
def test_rtd_count_matches_the_flop_counter(generator_d_model):
    cfg = tiny(generator_d_model=generator_d_model)
    ids = torch.randint(5, 101, (B, T))
    labels = torch.full((B, T), -100)
    labels[:, 1::3] = ids[:, 1::3]  # 4 masked positions per row

    def run(model):
        out = model(ids, rtd_labels=labels, rtd_seed=0)
        return out.logits.float().logsumexp(-1).sum() + F.softplus(out.rtd_logits).sum()
    fwd, step = counted(Model(cfg, heads("rtd", "generator")), run)
    masked = int((labels >= 0).sum())
    assert forward_flops(cfg, "rtd", B, T, masked=masked) == fwd
    assert train_flops(cfg, "rtd", B, T, masked=masked) == step


def test_unknown_objective_is_refused():
    with pytest.raises(ValueError, match="no FLOP count"):
        forward_flops(tiny(), "contrastive", B, T)
