"""ELECTRA's replaced-token detection (`--objective rtd`): the loss is the paper's objective written out by hand,
samples are seeded, no gradient flows through the sampling, and a run is an ordinary encoder run directory that
resumes exactly, fills masks with its generator and finetunes."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bertkit.config import ConfigError, ModelConfig
from bertkit.nn.electra import generator_config, sample_tokens
from bertkit.nn.heads import HeadInput
from bertkit.nn.model import Model
from bertkit.text.collate import IGNORE_INDEX
from bertkit.tasks.rtd import rtd_loss
from conftest import cli_error, cli_process, repeated_corpus, tiny, heads

TINY = ["--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set", "batch_size=4",
        "--set", "min_frequency=1", "--set", "log_every=2", "--set", "eval_every=10", "--no-progress",
        "--objective", "rtd"]


def _model(**overrides) -> Model:
    torch.manual_seed(0)
    return Model(tiny(**overrides), heads("rtd", "generator"))


def _batch(b: int = 3, t: int = 12) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    original = torch.randint(5, 101, (b, t), generator=g)
    select = torch.rand(b, t, generator=g) < 0.3
    select[:, 1] = True  # every row has a masked token
    labels = torch.where(select, original, torch.full_like(original, IGNORE_INDEX))
    inputs = torch.where(select, torch.full_like(original, 4), original)  # 4: the [MASK] id here
    share = float(select.sum()) / select.numel()
    return {"input_ids": inputs, "labels": labels, "seed": torch.full((b,), 123),
            "masked_share": torch.full((b,), share)}


def test_loss_is_electras_objective_written_out():
    model, batch = _model(), _batch()
    loss_sum, stats = rtd_loss(model, batch, 50.0)
    # by hand: generator on the masked input, its seeded samples in place, the discriminator on the result
    select = batch["labels"] != IGNORE_INDEX
    gen_logits = model.generator_logits(batch["input_ids"], select)  # (N, V)
    targets = batch["labels"][select]
    sampled = sample_tokens(gen_logits, 123)
    original = torch.where(select, batch["labels"], batch["input_ids"])
    corrupted = original.clone()
    corrupted[select] = sampled
    states = model.backbone(corrupted).last_hidden_state
    disc_logits = model.heads["rtd"](HeadInput(states))  # (B, T)
    replaced = (corrupted != original).float()
    n_masked = int(select.sum())
    gen_mean = F.cross_entropy(gen_logits, targets)
    disc_mean = F.binary_cross_entropy_with_logits(disc_logits, replaced)
    # the loop divides by the masked-token count: that gives ELECTRA's  gen + 50 * disc  (means)
    assert float(loss_sum.detach()) / n_masked == pytest.approx(float((gen_mean + 50.0 * disc_mean).detach()), rel=1e-5)
    assert float(stats["rtd_loss"]) / n_masked == pytest.approx(float(disc_mean.detach()), rel=1e-5)
    assert float(stats["replaced"]) / n_masked == pytest.approx(float(replaced.mean()), rel=1e-5)
    assert float(stats["gen_loss"]) / n_masked == pytest.approx(float(gen_mean.detach()), rel=1e-5)
    # only masked positions can be replaced, and a sample equal to the original is "original"
    out = model(batch["input_ids"], rtd_labels=batch["labels"], rtd_seed=123)
    assert not out.replaced[~select].any()
    assert torch.equal(out.replaced[select], out.sampled != targets)


def test_the_sampler_draws_from_the_softmax():
    logits = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, -1.0]]).repeat_interleave(50_000, dim=0)  # (100k, 3)
    drawn = sample_tokens(logits, 3)
    for row, half in enumerate((drawn[:50_000], drawn[50_000:])):
        share = torch.bincount(half, minlength=3).float() / len(half)
        assert torch.allclose(share, logits[row * 50_000].softmax(-1), atol=0.01)  # ~5 standard errors
    assert torch.equal(drawn, sample_tokens(logits, 3)) and not torch.equal(drawn, sample_tokens(logits, 4))
    # a uniform draw of exactly 0 (one in ~2^24) took the first token even at probability 0 (a review, 2026-11-28)
    zeros = torch.zeros(2, 1)
    original = torch.rand
    torch.rand = lambda *shape, **kwargs: zeros  # noqa: E731
    try:
        assert sample_tokens(torch.tensor([[float("-inf"), 0.0, 1.0], [0.0, 0.0, 0.0]]), 0).tolist() == [1, 0]
    finally:
        torch.rand = original


def test_samples_are_seeded_and_carry_no_gradient():
    model, batch = _model(), _batch()
    first = model(batch["input_ids"], rtd_labels=batch["labels"], rtd_seed=5).sampled
    assert torch.equal(first, model(batch["input_ids"], rtd_labels=batch["labels"], rtd_seed=5).sampled)
    out = model(batch["input_ids"], rtd_labels=batch["labels"], rtd_seed=5)
    F.binary_cross_entropy_with_logits(out.rtd_logits, out.replaced.float()).backward()
    generator = [p for n, p in model.named_parameters() if n.startswith("heads.generator.")]
    assert generator and all(p.grad is None or not p.grad.any() for p in generator)  # the sample is a wall
    assert model.heads["rtd"].dense.weight.grad.abs().sum() > 0
    # the shared token embeddings learn from both losses
    model.zero_grad()
    loss_sum, _ = rtd_loss(model, batch, 50.0)
    loss_sum.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in generator if p.ndim > 1)


def test_generator_shape_and_bad_sizes():
    cfg = tiny()
    small = generator_config(cfg)
    assert (small.d_model, small.n_heads, small.d_ff) == (8, 1, 32)  # a quarter of 32, one head of 8
    assert generator_config(ModelConfig(d_model=256, n_heads=4)).n_heads == 1  # ELECTRA-Small: 64 = one head of 64
    with pytest.raises(ConfigError, match="model.generator_d_model: the generator .64. must be between 1 and"):
        tiny(generator_d_model=64)
    with pytest.raises(ConfigError, match="model.generator_d_model: 17 does not split into 2 heads of equal size"):
        tiny(generator_d_model=17)
    assert generator_config(tiny(generator_d_model=12)).n_heads == 1  # narrower than two heads: one of 12
    ModelConfig(d_model=36, n_heads=2, positions="rotary")  # no generator, no generator checks (its 9 would be odd)
    with pytest.raises(ConfigError, match="needs an encoder"):
        Model(tiny(architecture="decoder"), heads("rtd", "generator"))
    model = Model(dataclasses.replace(cfg, generator_d_model=16), heads("rtd", "generator"))
    assert model.heads["generator"].project.out_features == 16


_cli = cli_process


def _records(run: Path) -> list[dict]:
    """metrics.jsonl without its clock readings."""
    return [{k: v for k, v in json.loads(line).items() if k not in ("tokens_per_s", "tflops", "mfu", "elapsed")}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_rtd_run_resumes_exactly_fills_masks_and_finetunes(tmp_path):
    corpus = repeated_corpus(tmp_path / "corpus.txt", 30)
    args = [*TINY, "--corpus", corpus, "--max-steps", "20", "--set", "save_every=10"]
    straight = tmp_path / "straight"
    _cli("pretrain", *args, "--out", straight)
    config = json.loads((straight / "config.json").read_text())
    assert config["heads"]["names"] == ["rtd", "generator"] and config["train"]["objective"] == "rtd"
    results = json.loads((straight / "results.json").read_text())["evaluation"]
    assert {"val_loss", "val_accuracy", "val_rtd_accuracy", "val_rtd_loss", "val_rtd_baseline"} <= set(results)
    assert 0.7 < results["val_rtd_baseline"] < 0.95  # ~15% masked, most of them replaced by the generator's samples
    train = [r for r in _records(straight) if r["kind"] == "train"]
    assert len(train) == 10 and {"gen_loss", "rtd_loss", "rtd_accuracy", "replaced"} <= set(train[0])
    assert 0.0 < train[-1]["replaced"] <= 0.2  # at most the masked share (15% of non-special tokens) is replaced
    assert train[-1]["loss"] < train[0]["loss"]

    # killed in the middle (after its step-10 checkpoint), resumed: every logged number equals the straight run's
    killed = tmp_path / "killed"
    died = _cli("pretrain", *args, "--out", killed, env={"BERTKIT_FAULT": "metrics-append@8"}, check=False)
    assert died.returncode != 0 and not (killed / "results.json").exists()
    _cli("pretrain", *args, "--out", killed, "--resume")
    assert _records(killed) == _records(straight)

    filled = json.loads(_cli("fill-mask", straight, "The film [MASK] good.", "--json", "--top-k", "3").stdout)
    assert len(filled[0]) == 3 and filled[0][0]["score"] >= filled[0][1]["score"]

    _cli("export", straight, "--format", "hf", "-o", tmp_path / "hf")  # the discriminator as a plain BertModel
    from safetensors.torch import load_file
    exported = load_file(tmp_path / "hf" / "model.safetensors")
    assert "embeddings.word_embeddings.weight" in exported and not any("generator" in k for k in exported)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["BertModel"]

    sst = tmp_path / "sst.tsv"
    sst.write_text("sentence\tlabel\n" + "".join(f"good film {i}\t1\nbad film {i}\t0\n" for i in range(20)))
    tuned = tmp_path / "tuned"
    _cli("finetune", "classify", "--model", straight, "--train", sst, "--text-column", "sentence", "--out", tuned,
         "--max-steps", "3", "--no-progress", "--set", "batch_size=8")
    heads = json.loads((tuned / "config.json").read_text())["heads"]["names"]
    assert heads == ["classifier"]  # the discriminator's backbone under a fresh head; ELECTRA's heads are gone


@pytest.mark.slow
def test_rtd_bad_inputs_are_one_line(tmp_path):
    corpus = repeated_corpus(tmp_path / "corpus.txt", 3)

    def fails(*args, match):  # in-process (2.4 s less a case than a subprocess): exit 2, one error line
        line = cli_error("pretrain", *args, "--corpus", corpus, "--out", tmp_path / "a")
        assert match in line, line

    # one in a real process: stderr holds the one line and no traceback
    result = _cli("pretrain", "--recipe", "decoder-mini", "--objective", "rtd", "--no-progress", "--corpus", corpus,
                  "--out", tmp_path / "a", check=False)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-2000:]
    assert "replaced-token detection (ELECTRA) (--objective rtd) needs an encoder" in errors[0]
    assert "Traceback" not in result.stderr
    fails(*TINY, "--set", "generator_d_model=64", match="model.generator_d_model: the generator (64) must be")
    fails(*TINY, "--set", "mlm_probability=1.5", match="data.mlm_probability: must be in (0, 1)")
    fails(*TINY, "--set", "mlm_probability=0", match="data.mlm_probability: must be in (0, 1)")
    fails(*TINY, "--set", "rtd_weight=-1", match="train.rtd_weight: must be >= 0")
    assert not (tmp_path / "a").exists()
