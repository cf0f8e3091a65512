"""The same code on CUDA: SDPA (fused kernels) equals eager, bf16 autocast stays finite, masks live on the device.
Skipped without CUDA."""

import pytest
import torch

from bertkit.nn.attention import set_attention_impl
from bertkit.nn.model import Model
from conftest import POSITIONS, tiny

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("architecture", ["encoder", "decoder", "encoder-decoder"])
@pytest.mark.parametrize("positions", POSITIONS)
def test_cuda_sdpa_equals_eager_and_bf16_runs(architecture, positions):
    model = Model(tiny(architecture=architecture, positions=positions, n_kv_heads=2)).cuda().eval()
    ids = torch.randint(1, 101, (3, 12), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0

    def run():
        if architecture == "encoder-decoder":
            return model(ids, ids[:, :9], attention_mask=mask).last_hidden_state
        return model(ids, mask).last_hidden_state

    with torch.no_grad():
        fast = run()
        set_attention_impl(model, "eager")
        slow = run()
        set_attention_impl(model, "sdpa")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            half = run()
    torch.testing.assert_close(fast, slow, atol=1e-4, rtol=0)
    assert torch.isfinite(half).all()
    assert (half.float() - fast).abs().max() < 0.1
