"""The same code on CUDA: SDPA (fused kernels) equals eager, bf16 autocast stays finite, masks live on the device.
Skipped without CUDA."""

import pytest
import torch

from bertkit.nn.attention import set_attention_impl
from bertkit.nn.model import Model
from conftest import POSITIONS, qkv_runs, tiny

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("architecture", ["encoder", "decoder", "encoder-decoder"])
@pytest.mark.parametrize("positions", POSITIONS)
def test_cuda_sdpa_equals_eager_and_bf16_runs(architecture, positions):
    """At real positions only: padded positions are undefined (`bertkit.nn.attention`) — bf16 on sm80+ runs an
    encoder unpadded (zeros at padding) where fp32 computes them — though finite everywhere. An encoder-decoder is
    checked on both sides: the encoder's states at real source tokens, the decoder's (unpadded targets) everywhere."""
    model = Model(tiny(architecture=architecture, positions=positions, n_kv_heads=2)).cuda().eval()
    ids = torch.randint(1, 101, (3, 12), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0

    def run() -> dict[str, torch.Tensor]:
        if architecture == "encoder-decoder":
            return {"encoder": model.backbone.encode(ids, mask).last_hidden_state,  # (B, S, D)
                    "decoder": model(ids, ids[:, :9], attention_mask=mask).last_hidden_state}  # (B, T, D)
        return {architecture: model(ids, mask).last_hidden_state}  # (B, T, D)

    real = {"encoder": mask.bool(), "decoder": mask.bool() if architecture == "decoder" else
            torch.ones(3, 9, dtype=torch.bool, device="cuda")}  # (B, T): the positions whose states mean something
    with torch.no_grad():
        fast = run()
        set_attention_impl(model, "eager")
        slow = run()
        set_attention_impl(model, "sdpa")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            half = run()
    for side, states in fast.items():
        keep = real[side]
        torch.testing.assert_close(states[keep], slow[side][keep], atol=1e-4, rtol=0, msg=side)
        assert torch.isfinite(half[side]).all(), side  # undefined at padding, but never inf / NaN
        assert (half[side].float()[keep] - states[keep]).abs().max() < 0.1, side


@pytest.mark.parametrize("n_kv_heads", [4, 2])  # MHA; GQA: enable_gqa, or repeated k/v heads where torch lacks it
@pytest.mark.parametrize("positions", ["learned", "rotary"])
def test_cuda_bf16_batches_run_unpadded_through_the_varlen_kernel(positions, n_kv_heads, monkeypatch):
    """auto packs a padded bf16 batch on CUDA (PyTorch's variable-length flash kernel): the same states at real
    tokens as the padded path, to bf16 rounding, and gradients flow."""
    from bertkit.nn import attention
    from bertkit.nn.transformer import set_unpad

    if attention.varlen_attn is None:
        pytest.skip("this PyTorch has no torch.nn.attention.varlen")
    calls = []
    kernel = attention.varlen_attn
    monkeypatch.setattr(attention, "varlen_attn", lambda *a, **k: calls.append(1) or kernel(*a, **k))
    model = Model(tiny(positions=positions, n_heads=4, n_kv_heads=n_kv_heads, d_model=64, dropout=0.0,
                       attention_dropout=0.0)).cuda()
    ids = torch.randint(1, 101, (3, 12), device="cuda")
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    mask[2, 9:] = 0
    weights = torch.randn(3, 12, 64, device="cuda")
    results = {}
    for mode in ("auto", "never"):
        set_unpad(model, mode)
        model.zero_grad()
        calls.clear()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            states = model(ids, mask).last_hidden_state
        (states.float() * weights * mask[..., None]).sum().backward()
        results[mode] = states.float(), {n: p.grad.float().clone() for n, p in model.named_parameters()
                                         if p.grad is not None}
        assert bool(calls) == (mode == "auto"), "auto did not take the varlen kernel"
    (packed, packed_grads), (padded, padded_grads) = results["auto"], results["never"]
    real = mask.bool()
    assert (packed[real] - padded[real]).abs().max() < 0.05
    for name, grad in padded_grads.items():  # bf16 rounding differs between the kernels: relative agreement
        assert (packed_grads[name] - grad).norm() <= 0.05 * grad.norm() + 1e-3, name


def test_auto_batch_size_measures_the_gpu_and_its_rows_train(capsys):
    """`train.batch_size = "auto"` on CUDA: two probe steps' peaks give a power of two of rows, within the token
    cap, that a real bf16 MLM step at that batch then runs without running out of memory."""
    from bertkit.config import Config, DataConfig, HeadsConfig, TrainConfig
    from bertkit.train.batch_size import MAX_TOKENS, resolve_batch_size

    config = Config(model=tiny(), heads=HeadsConfig(names=("mlm",)), data=DataConfig(block_size=64),
                    train=TrainConfig(batch_size="auto"))
    said = []
    rows = resolve_batch_size(config, torch.device("cuda"), "bf16", said.append)
    assert rows & (rows - 1) == 0 and 1 <= rows * 64 <= MAX_TOKENS and "train.batch_size auto" in said[0]
    model = Model(config.model, config.heads).cuda().train()
    ids = torch.randint(5, config.model.vocab_size, (rows, 64), device="cuda")
    positions = torch.arange(0, rows * 64, 7, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(ids, mlm_select=positions).logits.float().logsumexp(-1).mean()
    loss.backward()
    assert torch.isfinite(loss)


def test_a_pretraining_with_cuda_graphs_learns_like_one_without(tmp_path):
    """train.cuda_graphs on one GPU (compiled, reduce-overhead, masked counts padded to 128): the same run's losses
    as without graphs, to bf16-and-kernel tolerance, and the opening line says the graphs are on."""
    import json

    from conftest import cli_process, repeated_corpus

    corpus = repeated_corpus(tmp_path / "corpus.txt", 30)
    losses = {}
    for graphs in ("false", "true"):
        run = tmp_path / graphs
        done = cli_process("pretrain", "--recipe", "tiny", "--corpus", corpus, "--out", run, "--max-steps", "12",
                           "--set", "model.vocab_size=400", "--set", "tokenizer.min_frequency=1", "--set",
                           "train.log_every=2", "--set", "train.compile=on", "--set", f"train.cuda_graphs={graphs}",
                           "--set", "model.dropout=0.0", "--set", "model.attention_dropout=0.0", "--no-progress")
        assert ("CUDA graphs: on" in " ".join(done.stderr.split())) == (graphs == "true")
        losses[graphs] = [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
                          if "loss" in r]
    assert len(losses["true"]) == len(losses["false"]) == 6
    assert losses["true"] == pytest.approx(losses["false"], rel=0.05)


def test_training_on_a_gpu_takes_q_k_v_in_one_product_by_default_and_it_equals_three(monkeypatch):
    """bertkit.nn.attention.FUSE_QKV None: one stacked q/k/v product where gradients are taken on a GPU; its
    outputs and gradients equal three products' (the switch forced off) in fp32."""
    from bertkit.nn.attention import Attention

    torch.manual_seed(0)
    attention = Attention(tiny(n_kv_heads=2)).cuda().train()
    x = torch.randn(2, 9, 32, device="cuda")
    calls, original = [], Attention._fused_qkv
    monkeypatch.setattr(Attention, "_fused_qkv", lambda self, x: calls.append(1) or original(self, x))
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # fp32 products, not TF32 (a training run may have set it)
    try:
        results = qkv_runs(monkeypatch, attention, x, (None, False))
    finally:
        torch.set_float32_matmul_precision(precision)
    assert calls == [1]  # the default on a GPU, not the forced-off pass
    (fused, fused_grads), (plain, plain_grads) = results
    torch.testing.assert_close(fused, plain, rtol=1e-4, atol=1e-5)
    for a, b in zip(fused_grads, plain_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
