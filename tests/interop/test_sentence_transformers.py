"""sentence-transformers interop: all-MiniLM-L6-v2 imported into bertkit embeds like `SentenceTransformer.encode`
(real weights, real STS-B sentences, one longer than its 256-token window), gives the same STS-B correlation, and a
bertkit run exported with `--format sentence-transformers` loads in sentence-transformers and embeds like bertkit."""

import json

import numpy as np
import pytest

st = pytest.importorskip("sentence_transformers")

from conftest import cli_ok  # noqa: E402

from bertkit.embedding import SentenceEncoder  # noqa: E402
from bertkit.errors import BertkitError  # noqa: E402
from bertkit.interop import import_hf  # noqa: E402
from bertkit.interop.sentence_transformers import export_sentence_transformers  # noqa: E402
from bertkit.jobs.sts import StsJob, run as evaluate_sts  # noqa: E402
from bertkit.metrics import correlation_metrics  # noqa: E402
from bertkit.paths import find_dataset  # noqa: E402

FALLBACK = ["A man is playing a guitar.", "A woman is slicing an onion.", "Hi", "The cat sat on the mat.",
            "Stocks fell sharply on Monday after the announcement.", "Two dogs run through a field of snow."]


def _sts_pairs(n):
    """(sentence1, sentence2, score) from STS-B test, or a few hand-written pairs without the data."""
    try:
        lines = (find_dataset("stsb") / "sts-test.csv").read_text().splitlines()[:n]
        return [(f[5], f[6], float(f[4])) for f in (line.split("\t") for line in lines)]
    except Exception:
        return [(a, b, float(i)) for i, (a, b) in enumerate(zip(FALLBACK, FALLBACK[1:] + FALLBACK[:1]))]


def _cosine(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_imported_minilm_embeds_like_sentence_transformers(minilm_dir, minilm_run):
    pairs = _sts_pairs(40)
    sentences = [p[0] for p in pairs] + [p[1] for p in pairs] + ["a long review, " * 120]  # > 256 tokens
    reference = st.SentenceTransformer(str(minilm_dir), device="cpu").encode(sentences, batch_size=16)
    encoder = SentenceEncoder(minilm_run, batch_size=16)
    ours = encoder.encode(sentences)
    assert encoder.truncated == 1 and encoder.max_length == 256  # max_seq_length came from the ST config
    assert _cosine(ours, reference).min() >= 0.99999
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)  # its Normalize module


def test_the_same_sts_spearman_as_sentence_transformers(minilm_dir, minilm_run, tmp_path):
    pairs = _sts_pairs(300)
    data = tmp_path / "pairs.tsv"
    data.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{s}\n" for a, b, s in pairs))
    ours = evaluate_sts(StsJob(minilm_run, data))
    model = st.SentenceTransformer(str(minilm_dir), device="cpu")
    u, v = model.encode([p[0] for p in pairs]), model.encode([p[1] for p in pairs])
    theirs = correlation_metrics([p[2] for p in pairs], _cosine(u, v))
    assert abs(ours.spearman - theirs["spearman"]) * 100 <= 0.1  # ±0.1 Spearman points


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_exported_bertkit_run_loads_in_sentence_transformers(tmp_path, base, pooling):
    config = json.loads((base / "config.json").read_text())
    config["sentence"] = {"pooling": pooling, "normalize": pooling == "mean", "max_seq_length": 48}
    (base / "config.json").write_text(json.dumps(config))
    cli_ok("export", base, "--format", "sentence-transformers", "-o", tmp_path / "st")
    sentences = ["a short one", "a much longer sentence about films and the people who make them " * 4, "x"]
    loaded = st.SentenceTransformer(str(tmp_path / "st"), device="cpu")
    assert loaded.max_seq_length == 48
    theirs = loaded.encode(sentences)
    ours = SentenceEncoder(base).encode(sentences)
    assert _cosine(ours, theirs).min() >= 0.99999
    if pooling == "mean":  # normalised on both sides
        np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_minilm_round_trips_through_export(minilm_run, tmp_path):
    export_sentence_transformers(minilm_run, tmp_path / "st")
    again = import_hf(tmp_path / "st", tmp_path / "again")
    assert again["sentence"] == SentenceEncoder(minilm_run).sentence
    sentences = [p[0] for p in _sts_pairs(8)]
    np.testing.assert_array_equal(SentenceEncoder(tmp_path / "again").encode(sentences),
                                  SentenceEncoder(minilm_run).encode(sentences))


def test_without_max_seq_length_the_window_is_sentence_transformers(minilm_dir, tmp_path):
    """No max_seq_length: sentence-transformers embeds within min(max_position_embeddings, the tokenizer's
    model_max_length); bertkit took the model's 512 and embedded long texts otherwise (cosine 0.83)."""
    import shutil

    folder = shutil.copytree(minilm_dir, tmp_path / "st")
    for name in ("sentence_bert_config.json",):
        (folder / name).unlink(missing_ok=True)
    tokenizer = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**tokenizer, "model_max_length": 128}))
    import_hf(folder, tmp_path / "run")
    assert json.loads((tmp_path / "run" / "config.json").read_text())["sentence"]["max_seq_length"] == 128
    (folder / "tokenizer_config.json").write_text(json.dumps({**tokenizer, "model_max_length": 1000000}))
    import_hf(folder, tmp_path / "longer")  # the tokenizer's limit is not the shorter: the model's own window
    assert json.loads((tmp_path / "longer" / "config.json").read_text())["sentence"]["max_seq_length"] is None


def test_unsupported_modules_are_refused_by_name(minilm_dir, tmp_path):
    import shutil

    folder = shutil.copytree(minilm_dir, tmp_path / "st")
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({**pooling,
                                                                  "pooling_mode_mean_sqrt_len_tokens": True}))
    with pytest.raises(BertkitError, match=r"pooling pooling_mode_mean_sqrt_len_tokens \+ mean is not supported"):
        import_hf(folder, tmp_path / "a")
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    modules = json.loads((folder / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(BertkitError, match="models.Dense. is not supported"):
        import_hf(folder, tmp_path / "b")
