"""Attention as onnxruntime's fused MultiHeadAttention operator in an export (`bertkit.deploy.onnx_attention`):
used wherever it covers the model (multi-head, learned or rotary positions) with the run's outputs, left out where
it does not (grouped keys/values, relative positions), and an SDPA call it cannot take falls back to torch's own
translation instead of failing the export."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

onnx = pytest.importorskip("onnx", reason="pip install 'bertkit[onnx]'")
pytest.importorskip("onnxruntime", reason="pip install 'bertkit[onnx]'")

from bertkit.config import Config  # noqa: E402
from bertkit.deploy import export as export_module  # noqa: E402
from bertkit.deploy.export import export_onnx  # noqa: E402
from bertkit.deploy.onnx_attention import Unsupported, attention_in, refused, translation_table  # noqa: E402
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
    ({"positions": "sinusoidal", "bias": False}, True),
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


@pytest.mark.parametrize("error, quiet", [(Unsupported, True), (TypeError, False)])
def test_a_translation_that_fails_falls_back_to_torchs(tmp_path, sample_tokenizer, monkeypatch, error, quiet):
    """A call the operator refuses (Unsupported) falls back quietly; any other failure of the translation (API
    drift, say) falls back with one line."""
    run = _encoder(tmp_path, sample_tokenizer)
    table = translation_table(Config(model=tiny()))
    assert list(table) and not translation_table(Config(model=tiny(n_kv_heads=1)))

    def fail(*args, **kwargs):
        raise error("the translation cannot take this call")

    monkeypatch.setattr(export_module, "translation_table", lambda config: {key: fail for key in table})
    said = []
    summary = export_onnx(run, tmp_path / "onnx", say=said.append)
    assert _operators(tmp_path / "onnx") == 0 and summary["parity"]["min_cosine"] >= 0.9999
    assert json.loads((tmp_path / "onnx" / "manifest.json").read_text())["details"]["attention"] == "decomposed"
    assert quiet == (not any("attention as one operator failed" in line for line in said))


def test_a_graph_onnxruntime_cannot_run_falls_back_to_torchs_translation(tmp_path, sample_tokenizer, monkeypatch):
    """An onnxruntime without the operator (or one that rejects it) cannot load the graph: the export tries the
    graph with torch's translation of attention before it gives up."""
    run = _encoder(tmp_path, sample_tokenizer)
    real_parity = export_module.parity

    def no_operator(folder, *args):
        if attention_in(folder / "model.onnx") == "MultiHeadAttention":
            raise export_module.BertkitError(f"{folder}/model.onnx: onnxruntime cannot load it (no such operator)")
        return real_parity(folder, *args)

    monkeypatch.setattr(export_module, "parity", no_operator)
    said = []
    export_onnx(run, tmp_path / "onnx", say=said.append)
    assert _operators(tmp_path / "onnx") == 0 and any("cannot load it" in line for line in said)
    assert json.loads((tmp_path / "onnx" / "manifest.json").read_text())["details"]["attention"] == "decomposed"


class _Sdpa(torch.nn.Module):
    """SDPA alone, called as a test says: the translation's unit."""

    def __init__(self, mask_form: str = "padding", causal: bool = False):
        super().__init__()
        self.mask_form, self.causal = mask_form, causal

    def forward(self, q, k, v, real):  # (B, H, T, dh) x 3, (B, T) bool
        mask = {"padding": real[:, None, None, :], "float": torch.where(real, 0.0, float("-inf"))[:, None, None, :],
                "broadcast": real[:1, None, None, :]}[self.mask_form]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=self.causal)


def _export_sdpa(module: torch.nn.Module, inputs, path) -> None:
    table = translation_table(Config(model=tiny(n_heads=1)))
    program = torch.onnx.export(module, inputs, input_names=["q", "k", "v", "real"], dynamo=True, verbose=False,
                                opset_version=export_module.OPSET, custom_translation_table=table)
    program.save(str(path))


def test_a_padding_key_never_outscores_a_real_one(tmp_path):
    """The operator's default gives a masked key -10000; a padding key whose score beats a real key's by more than
    that would take the weight. The translation gives masked keys float32's lowest value, as SDPA's -inf."""
    import onnxruntime

    q = torch.tensor([[[[100.0, 0, 0, 0], [100.0, 0, 0, 0]]]]).repeat(1, 1, 1, 8)  # (1, 1, 2, 32)
    k = torch.tensor([[[[1.0, 0, 0, 0], [300.0, 0, 0, 0]]]]).repeat(1, 1, 1, 8)  # key 1 (padding): score ~1.7e5
    v = torch.tensor([[[[1.0] * 4, [-9.0] * 4]]]).repeat(1, 1, 1, 8)
    real = torch.tensor([[True, False]])
    _export_sdpa(_Sdpa(), (q, k, v, real), tmp_path / "sdpa.onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "sdpa.onnx"), providers=["CPUExecutionProvider"])
    feed = {name: t.numpy() for name, t in zip(("q", "k", "v", "real"), (q, k, v, real))}
    got = session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})[0]
    assert attention_in(tmp_path / "sdpa.onnx") == "MultiHeadAttention"
    np.testing.assert_allclose(got, _Sdpa()(q, k, v, real).numpy(), atol=1e-5)  # every row reads v[0]: 1.0


@pytest.mark.parametrize("form, causal", [("padding", True), ("float", False), ("broadcast", False)])
def test_an_sdpa_call_of_another_form_is_refused_not_mistranslated(tmp_path, form, causal):
    q = torch.randn(2, 1, 3, 32)
    real = torch.tensor([[True, True, False], [True, True, True]])
    with pytest.raises(Exception) as caught:
        _export_sdpa(_Sdpa(form, causal), (q, q, q, real), tmp_path / "sdpa.onnx")
    assert refused(caught.value)
