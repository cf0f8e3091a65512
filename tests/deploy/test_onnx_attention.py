"""Attention as onnxruntime's fused MultiHeadAttention operator in an export (`bertkit.deploy.onnx_attention`):
used wherever it covers the model (multi-head, learned or rotary positions) with the run's outputs, left out where
it does not (grouped keys/values, relative positions), and an SDPA call it cannot take falls back to torch's own
translation instead of failing the export."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="pip install 'bertkit[onnx]'")
pytest.importorskip("onnxruntime", reason="pip install 'bertkit[onnx]'")

from bertkit.config import Config  # noqa: E402
from bertkit.deploy import export as export_module  # noqa: E402
from bertkit.deploy.export import export_onnx  # noqa: E402
from bertkit.deploy.onnx_attention import Unsupported, translation_table  # noqa: E402
from bertkit.embedding import SentenceEncoder  # noqa: E402
from bertkit.nn.model import Model  # noqa: E402
from bertkit.run.directory import save_run  # noqa: E402
from bertkit.text.tokenizer import save_tokenizer  # noqa: E402
from conftest import heads, tiny  # noqa: E402

# mixed lengths, so that every batch is padded and the operator's key padding mask matters
TEXTS = ["a good film", "the worst thing I have seen this year, and I have seen a lot of bad things", "fine",
         "an actor walks into the room and nobody notices until the lights go out", "yes", "no no no no"] * 6


def _encoder(tmp_path, sample_tokenizer, **model):
    save_tokenizer(sample_tokenizer, tmp_path / "tok")
    cfg = tiny(vocab_size=400, **model)
    config = Config(model=cfg, heads=heads("mlm"))
    return save_run(tmp_path / "run", Model(cfg, config.heads), config, tmp_path / "tok" / "tokenizer.json")


def _operators(folder) -> int:
    graph = onnx.load(str(folder / "model.onnx")).graph
    return sum(node.op_type == "MultiHeadAttention" and node.domain == "com.microsoft" for node in graph.node)


@pytest.mark.parametrize("model, fused", [
    ({}, True),  # MHA, learned positions
    ({"positions": "rotary"}, True),  # the rotation happens before SDPA: still one operator
    ({"n_kv_heads": 2}, False),  # GQA: the operator takes as many key/value heads as query heads
    ({"positions": "relative"}, False),  # relative positions take the eager path: no SDPA to translate
])
def test_attention_is_one_operator_where_it_covers_the_model_with_the_runs_outputs(tmp_path, sample_tokenizer,
                                                                                  model, fused):
    run = _encoder(tmp_path, sample_tokenizer, **model)
    summary = export_onnx(run, tmp_path / "onnx", say=lambda line: None)
    manifest = json.loads((tmp_path / "onnx" / "manifest.json").read_text())
    assert _operators(tmp_path / "onnx") == (2 if fused else 0)  # one per layer
    assert manifest["details"]["attention"] == ("MultiHeadAttention" if fused else "decomposed")
    assert summary["parity"]["min_cosine"] >= 0.9999
    ours, theirs = SentenceEncoder(tmp_path / "onnx"), SentenceEncoder(run, precision="fp32")
    np.testing.assert_allclose(ours.encode(TEXTS), theirs.encode(TEXTS), atol=1e-5)


def test_int8_keeps_the_operator_in_fp32(tmp_path, sample_tokenizer):
    run = _encoder(tmp_path, sample_tokenizer)
    summary = export_onnx(run, tmp_path / "int8", quantize="int8", say=lambda line: None)
    assert _operators(tmp_path / "int8") == 2 and summary["parity"]["mean_cosine"] >= 0.99


def test_an_sdpa_call_the_operator_cannot_take_falls_back_to_torchs_translation(tmp_path, sample_tokenizer,
                                                                              monkeypatch):
    run = _encoder(tmp_path, sample_tokenizer)
    table = translation_table(Config(model=tiny()))
    assert list(table) and not translation_table(Config(model=tiny(n_kv_heads=1)))

    def refuse(*args, **kwargs):
        raise Unsupported("a form this test says the operator does not cover")

    monkeypatch.setattr(export_module, "translation_table", lambda config: {key: refuse for key in table})
    summary = export_onnx(run, tmp_path / "onnx", say=lambda line: None)
    assert _operators(tmp_path / "onnx") == 0 and summary["parity"]["min_cosine"] >= 0.9999
    assert json.loads((tmp_path / "onnx" / "manifest.json").read_text())["details"]["attention"] == "decomposed"
