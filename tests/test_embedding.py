"""Sentence embeddings: pooling over real tokens only, sorted batches that restore the input order, normalisation,
and a model identity that changes exactly when embeddings would."""

import dataclasses

import numpy as np
import pytest
import torch

from bertkit.config import Config, SentenceConfig
from bertkit.embedding import SentenceEncoder, model_identity
from bertkit.nn.heads import pool
from bertkit.nn.model import Model
from bertkit.run.directory import save_run
from conftest import tiny

TEXTS = ["a short one", "", "a much longer sentence about films and actors and plots that goes on",
         "medium length text here", "x"]


@pytest.fixture
def run(tmp_path, sample_tokenizer):
    from bertkit.text.tokenizer import save_tokenizer

    save_tokenizer(sample_tokenizer, tmp_path / "tok")
    cfg = tiny(vocab_size=400)
    return save_run(tmp_path / "run", Model(cfg), Config(model=cfg), tmp_path / "tok" / "tokenizer.json")


@pytest.mark.parametrize("mode", ["mean", "max", "cls"])
def test_pooling_ignores_padding(mode):
    hidden = torch.randn(2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    padded = hidden.clone()
    padded[0, 3:] = 1e4  # garbage at padded positions must not leak into the summary
    expected = {"mean": hidden[0, :3].mean(0), "max": hidden[0, :3].amax(0), "cls": hidden[0, 0]}[mode]
    assert torch.allclose(pool(padded, mask, mode)[0], expected, atol=1e-5)


def test_sorted_batches_give_each_text_its_own_embedding_in_input_order(run):
    encoder = SentenceEncoder(run, batch_size=2)
    together = encoder.encode(TEXTS)
    alone = np.stack([SentenceEncoder(run, batch_size=1).encode([t])[0] for t in TEXTS])
    assert together.shape == (len(TEXTS), 32) and together.dtype == np.float32
    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)  # normalised by default
    # the order is the input's, not the sorted one
    np.testing.assert_allclose(encoder.encode(TEXTS[::-1]), together[::-1], atol=1e-5)


def test_pooling_and_normalisation_follow_the_run(run, tmp_path):
    config, model = Config(model=tiny(vocab_size=400)), None
    from bertkit.run.directory import load_run

    config, model = load_run(run)
    raw = SentenceEncoder(run, model=(dataclasses.replace(config, sentence=SentenceConfig(normalize=False)), model))
    vectors = raw.encode(TEXTS[:1])
    ids = raw.encoder.texts(TEXTS[:1])[0].input_ids
    with torch.no_grad():
        hidden = model(torch.tensor([ids])).last_hidden_state[0]  # (T, D)
    np.testing.assert_allclose(vectors[0], hidden.mean(0).numpy(), atol=1e-5)
    cls = SentenceEncoder(run, model=(dataclasses.replace(config, sentence=SentenceConfig(pooling="cls")), model))
    np.testing.assert_allclose(cls.encode(TEXTS[:1])[0], (hidden[0] / hidden[0].norm()).numpy(), atol=1e-5)


def test_similarity_is_the_cosine_of_the_embeddings(run):
    encoder = SentenceEncoder(run)
    a, b = encoder.encode(["one text"])[0], encoder.encode(["another one"])[0]
    assert encoder.similarity(["one text"], ["another one"])[0] == pytest.approx(float(a @ b), abs=1e-5)
    # one string is one text (D,), as sentence-transformers' encode takes it, not a text per character
    single = encoder.encode("one text")
    assert single.shape == a.shape and np.allclose(single, a, atol=1e-6)
    # spaces and line breaks around a text are not the text, as `embed`, `index` and `search` read it (a byte-level
    # tokenizer took them for tokens: `similarity` and `encode` differed from `embed`'s vector; a review, 2026-11-28)
    assert np.array_equal(encoder.encode([" one text \n"]), encoder.encode(["one text"]))
    assert encoder.similarity(["one text "], ["\nanother one"])[0] == \
        encoder.similarity(["one text"], ["another one"])[0]
    assert np.array_equal(encoder.encode_layers(["one text  "], [0, -1]), encoder.encode_layers(["one text"], [0, -1]))


def test_a_job_given_one_path_as_a_string_reads_that_one_file(tmp_path):
    """EmbedJob(inputs="file.txt") iterated the string: one path per character ('/' first, then /proc ...)."""
    from bertkit.jobs.embed import EmbedJob
    from bertkit.jobs.search import IndexAddJob, IndexBuildJob
    from bertkit.jobs.tokenizer import TokenizerJob

    texts = tmp_path / "texts.txt"
    assert EmbedJob(tmp_path, str(texts), tmp_path / "v.npy").inputs == (str(texts),)
    assert EmbedJob(tmp_path, [texts, "b.txt"], tmp_path / "v.npy").inputs == (str(texts), "b.txt")
    assert IndexBuildJob(tmp_path, texts, tmp_path / "idx").corpus == (str(texts),)
    assert IndexAddJob(tmp_path, "a.txt").corpus == ("a.txt",)
    assert TokenizerJob("a.txt", 100, tmp_path / "tok").corpus == ("a.txt",)


def test_identity_changes_exactly_when_embeddings_would(run, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from bertkit.run.directory import load_config

    config = load_config(run)
    same = shutil.copytree(run, tmp_path / "copy")
    assert model_identity(run, config) == model_identity(same, config)
    with_sentence = lambda **kw: dataclasses.replace(config, sentence=SentenceConfig(**kw))  # noqa: E731
    assert model_identity(run, config) != model_identity(run, with_sentence(pooling="cls"))
    # an explicit max_length equal to the model's window is the same embedding; dropout never matters at inference
    assert model_identity(run, config) == model_identity(run, with_sentence(max_seq_length=64))
    assert model_identity(run, config) == model_identity(run, dataclasses.replace(
        config, model=dataclasses.replace(config.model, dropout=0.3)))
    # a weight-free switch changes the function, so the identity
    assert model_identity(run, config) != model_identity(run, dataclasses.replace(
        config, model=dataclasses.replace(config.model, activation="relu")))
    weights = load_file(same / "model.safetensors")
    key = next(iter(weights))
    weights[key] = weights[key] + 1e-3
    save_file(weights, same / "model.safetensors", metadata={"format": "pt"})
    assert model_identity(run, config) != model_identity(same, config)


def test_truncation_is_counted(run):
    encoder = SentenceEncoder(run)
    encoder.encode(["word " * 200, "short"])
    assert encoder.truncated == 1 and encoder.max_length == 64


def test_bf16_embeddings_agree_with_fp32_on_real_weights(minilm_run):
    """`precision = "auto"` may run inference in bf16 (where it is native): the vectors must stay what fp32
    gives (cosine >= 0.999 per text, the bar the README states), here on all-MiniLM-L6-v2's real weights."""
    texts = ["A man is playing a guitar.", "Two dogs run through a field of tall grass in the sun.",
             "The stock market fell sharply on Tuesday after the announcement.", "ok"]
    fp32 = SentenceEncoder(minilm_run, precision="fp32")
    bf16 = SentenceEncoder(minilm_run, precision="bf16")
    assert (fp32.precision, bf16.precision) == ("fp32", "bf16")
    a, b = fp32.encode(texts), bf16.encode(texts)
    assert b.dtype == np.float32
    cosine = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cosine.min() >= 0.999, cosine
    assert not np.array_equal(a, b)  # bf16 really ran


def test_bucketed_shapes_give_a_compiled_model_a_few_static_shapes_and_the_same_embeddings(run, monkeypatch):
    """`--compile-shapes buckets` (auto's choice on a GPU, where the dynamic-shape graph's compile stalled in
    ptxas): every batch is padded to full rows (copies of a real row, dropped again) and a power-of-two width
    within the window, compiled for static shapes; the embeddings are eager's."""
    import bertkit.inference as inference
    from bertkit.embedding import compile_shapes_for
    from bertkit.errors import BertkitError

    assert compile_shapes_for("auto", torch.device("cuda")) == "buckets"
    assert compile_shapes_for("auto", torch.device("cpu")) == "dynamic"
    assert compile_shapes_for("buckets", torch.device("cpu")) == "buckets"
    with pytest.raises(BertkitError, match="--compile-shapes must be one of auto, buckets, dynamic, not 'static'"):
        SentenceEncoder(run, compile_shapes="static")
    texts = TEXTS * 6 + ["word " * 20] * 4 + ["word " * 40]  # 35 texts: 9 batches of 4 (the last of 3)
    eager = SentenceEncoder(run, batch_size=4, precision="fp32").encode(texts)
    compiles = []

    def eager_backend(self, **kwargs):  # as compile=True does, without inductor's codegen
        compiles.append(kwargs)
        torch.nn.Module.compile(self, backend="eager", **kwargs)

    monkeypatch.setattr(Model, "compile", eager_backend)
    shapes, real_pad = [], inference.pad_batch
    monkeypatch.setattr(inference, "pad_batch", lambda *a: shapes.append(real_pad(*a)[0].shape) or real_pad(*a))
    with torch._dynamo.config.patch(recompile_limit=8):  # dynamo's default; the process's own value restored after
        encoder = SentenceEncoder(run, batch_size=4, precision="fp32", compile=True, compile_shapes="buckets")
        assert torch._dynamo.config.recompile_limit >= 3 * 3  # widths 16, 32, 64 x rows 1, 2, 4: none runs eagerly
    assert compiles == [{"dynamic": False}] and encoder.bucket_window == encoder.max_length == 64
    np.testing.assert_allclose(encoder.encode(texts), eager, rtol=1e-5, atol=1e-6)
    longest = max(len(e.input_ids) for e in encoder.encoder.texts(texts))
    assert 32 < longest < 64 and len(shapes) == 9
    assert set(shapes) == {(4, 16), (4, 32), (4, 64)}  # 3 static shapes for 9 batches; the last 3 rows padded to 4
    shapes.clear()
    np.testing.assert_allclose(encoder.encode(["a short one"]), eager[:1], rtol=1e-5, atol=1e-6)
    assert shapes == [(1, 16)]  # one query runs one row, not a batch of its copies
    with pytest.raises(BertkitError, match="--compile-shapes applies with --compile"):
        SentenceEncoder(run, compile_shapes="dynamic")
    shapes.clear()
    SentenceEncoder(run, batch_size=4, precision="fp32", compile=True, compile_shapes="dynamic").encode(texts)
    # dynamic: each batch as long as its longest text, the last one 3 rows
    assert compiles[-1] == {"dynamic": True} and len(set(shapes)) > 3 and shapes[-1][0] == 3


def test_a_compiled_encoder_runs_one_batch_at_a_time_and_embeds_as_eager(run, monkeypatch):
    """A compiled model (`embed --compile`) runs one batch at a time: two threads in a compiled module at once
    deadlocked bf16 `embed --compile` on a 2-core CPU (one thread tracing, the other leaving autocast). Its
    embeddings equal eager's, which runs concurrent batches."""
    import bertkit.inference as inference

    pools, real_pool = [], inference.ThreadPoolExecutor
    monkeypatch.setattr(inference, "ThreadPoolExecutor", lambda *a, **k: pools.append(a) or real_pool(*a, **k))
    monkeypatch.setattr(inference, "inference_workers", lambda device: 2)
    texts = TEXTS * 8
    eager = SentenceEncoder(run, batch_size=4, precision="fp32").encode(texts)
    assert pools == [(2,)]  # eager: two batches in flight
    encoder = SentenceEncoder(run, batch_size=4, precision="fp32")
    encoder.model.compile(dynamic=True, backend="eager")  # as compile=True does, without inductor's codegen
    compiled = encoder.encode(texts)
    assert pools == [(2,)]  # no pool for the compiled model
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-6)
    encoder = SentenceEncoder(run, batch_size=4, precision="fp32")
    encoder.model = torch.compile(encoder.model, dynamic=True, backend="eager")  # the wrapper form
    np.testing.assert_allclose(encoder.encode(texts), eager, rtol=1e-5, atol=1e-6)
    assert pools == [(2,)]


def test_under_several_processes_batches_run_one_at_a_time(run, monkeypatch):
    """A training run's evaluation under several processes: a sharded model's forward gathers its weights, and two
    threads' forwards at once issued those collectives out of order (gloo aborted on a collective mismatch under
    FSDP with two threads a process; review, 2026-11-28). No pool there; the embeddings are the same."""
    import bertkit.inference as inference

    pools, real_pool = [], inference.ThreadPoolExecutor
    monkeypatch.setattr(inference, "ThreadPoolExecutor", lambda *a, **k: pools.append(a) or real_pool(*a, **k))
    monkeypatch.setattr(inference, "inference_workers", lambda device: 2)
    texts = TEXTS * 8
    alone = SentenceEncoder(run, batch_size=4, precision="fp32").encode(texts)
    assert pools == [(2,)]
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 2)
    np.testing.assert_allclose(SentenceEncoder(run, batch_size=4, precision="fp32").encode(texts), alone,
                               rtol=1e-5, atol=1e-6)
    assert pools == [(2,)]  # no second pool
