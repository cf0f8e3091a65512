"""Hugging Face BERT <-> bertkit: same last hidden states (fp32, max abs diff <= 1e-5) both ways, on padded batches,
for random BertModels of several shapes and for the real all-MiniLM-L6-v2 weights."""

import json
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import BertConfig, BertForMaskedLM, BertModel  # noqa: E402

from bertkit.config import Config  # noqa: E402
from bertkit.errors import BertkitError  # noqa: E402
from bertkit.interop import import_hf  # noqa: E402
from bertkit.interop.hf import export_hf, model_from_hf  # noqa: E402
from bertkit.nn.heads import HeadInput  # noqa: E402
from bertkit.nn.model import Model  # noqa: E402
from bertkit.run.directory import save_run  # noqa: E402
from conftest import heads, tiny  # noqa: E402

ATOL = 1e-5
SHAPES = [
    dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64),
    dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=3, intermediate_size=100, type_vocab_size=1),
    dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=1, intermediate_size=256, layer_norm_eps=1e-5,
         max_position_embeddings=40),
]


def _batch(vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (3, 11), generator=g)
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 2:] = 0
    ids[mask == 0] = 0
    types = torch.zeros_like(ids)
    types[0, 5:] = 1
    return ids, mask, types


def _max_diff_on_real_tokens(a, b, mask):
    return ((a - b).abs() * mask[..., None]).max().item()


def _random_bert(**shape):
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=120, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **shape)
    model = BertModel(cfg).eval()
    with torch.no_grad():  # HF initialises LayerNorms to (1, 0): perturb them so the mapping is really tested
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['num_hidden_layers']}x{s['hidden_size']}")
def test_random_bert_gives_the_same_hidden_states(tmp_path, shape):
    hf = _random_bert(**shape)
    hf.save_pretrained(tmp_path)
    ours, skipped = model_from_hf(tmp_path)
    assert skipped == []
    ids, mask, types = _batch(120)
    if hf.config.type_vocab_size == 1:
        types = torch.zeros_like(types)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
        got = ours(ids, mask, token_type_ids=types).last_hidden_state
        pooled = ours.heads["pooler"](HeadInput(got))
    assert _max_diff_on_real_tokens(got, expected.last_hidden_state, mask) <= ATOL
    assert (pooled - expected.pooler_output).abs().max().item() <= ATOL


def test_pytorch_bin_with_prefix_and_mlm_head(tmp_path):
    """BertForMaskedLM saved as pytorch_model.bin: 'bert.' prefixes are stripped, the MLM head comes along and
    gives HF's prediction logits."""
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    mlm = BertForMaskedLM(cfg).eval()
    cfg.save_pretrained(tmp_path)
    with torch.no_grad():
        for name, p in mlm.named_parameters():  # non-trivial head norm and bias
            if name.startswith("cls.") and "decoder" not in name:
                p.add_(torch.randn_like(p) * 0.1)
    torch.save(mlm.state_dict(), tmp_path / "pytorch_model.bin")
    ours, skipped = model_from_hf(tmp_path)
    assert skipped == [] and ours.head_config.names == ("mlm",)
    ids, mask, _ = _batch(120, seed=1)
    with torch.no_grad():
        expected = mlm(input_ids=ids, attention_mask=mask)
        hidden = ours(ids, mask).last_hidden_state
        logits = ours.mlm_logits(hidden[mask.bool()])
    assert _max_diff_on_real_tokens(hidden, mlm.bert(input_ids=ids, attention_mask=mask).last_hidden_state,
                                    mask) <= ATOL
    assert (logits - expected.logits[mask.bool()]).abs().max().item() <= ATOL


def test_an_untied_mlm_decoder_leaves_the_head_out_and_says_so(tmp_path):
    """tie_word_embeddings false: the decoder is a matrix of its own, which bertkit's tied MLM head cannot hold;
    imported tied, the logits were wrong (max diff 9.5, argmax agreement 0) with nothing said."""
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, tie_word_embeddings=False)
    mlm = BertForMaskedLM(cfg).eval()
    cfg.save_pretrained(tmp_path)
    torch.save(mlm.state_dict(), tmp_path / "pytorch_model.bin")
    assert not torch.equal(mlm.cls.predictions.decoder.weight, mlm.bert.embeddings.word_embeddings.weight)
    ours, skipped = model_from_hf(tmp_path)
    assert ours.head_config.names == () and "not tied to the word embeddings" in skipped[0]
    ids, mask, _ = _batch(120, seed=1)
    with torch.no_grad():  # the encoder itself is imported
        assert _max_diff_on_real_tokens(ours(ids, mask).last_hidden_state,
                                        mlm.bert(input_ids=ids, attention_mask=mask).last_hidden_state, mask) <= ATOL


def test_real_minilm_weights_give_the_same_hidden_states(minilm_dir):
    hf = BertModel.from_pretrained(str(minilm_dir)).eval()
    ours, _ = model_from_hf(minilm_dir)
    tok = transformers.AutoTokenizer.from_pretrained(str(minilm_dir))
    sentences = ["A man is playing a guitar.", "The quick brown fox jumps over the lazy dog near the river bank.",
                 "Hi"]
    enc = tok(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = hf(**enc).last_hidden_state
        got = ours(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).last_hidden_state
    assert enc["attention_mask"].min() == 0  # the batch really is padded
    assert _max_diff_on_real_tokens(got, expected, enc["attention_mask"]) <= ATOL


def test_import_export_round_trip_reloads_in_transformers(tmp_path, minilm_dir):
    summary = import_hf(minilm_dir, tmp_path / "run")
    assert summary["tokenizer"] and (tmp_path / "run" / "tokenizer.json").is_file()
    export_hf(tmp_path / "run", tmp_path / "hf")
    reloaded = BertModel.from_pretrained(str(tmp_path / "hf")).eval()
    original = BertModel.from_pretrained(str(minilm_dir)).eval()
    ids, mask, types = _batch(30000, seed=2)
    with torch.no_grad():
        a = reloaded(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        b = original(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    assert torch.equal(a, b)  # the same tensors, bit for bit
    original_state, reloaded_state = original.state_dict(), reloaded.state_dict()
    for key, value in original_state.items():
        assert torch.equal(value, reloaded_state[key]), key


@pytest.mark.parametrize("type_vocab_size", [2, 0])
def test_bertkit_trained_model_exports_to_transformers(tmp_path, type_vocab_size):
    cfg = tiny(n_heads=2, type_vocab_size=type_vocab_size)
    model = Model(cfg).eval()
    save_run(tmp_path / "run", model, Config(model=cfg))
    export_hf(tmp_path / "run", tmp_path / "hf")
    hf = BertModel.from_pretrained(str(tmp_path / "hf")).eval()
    ids, mask, types = _batch(101, seed=3)
    with torch.no_grad():  # pairs (token type 1) work even when bertkit has no segment embeddings
        got = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        expected = model(ids, mask, token_type_ids=types if type_vocab_size else None).last_hidden_state
    assert _max_diff_on_real_tokens(got, expected, mask) <= ATOL


@pytest.mark.parametrize("overrides, key", [(dict(positions="rotary"), "model.positions"),
                                             (dict(norm_position="pre"), "model.norm_position"),
                                             (dict(n_kv_heads=2), "model.n_kv_heads"),
                                             (dict(architecture="decoder"), "model.architecture"),
                                             (dict(scale_embeddings=True), "model.scale_embeddings")])
def test_export_refuses_what_bert_cannot_express(tmp_path, overrides, key):
    from bertkit.interop.sentence_transformers import export_sentence_transformers

    cfg = tiny(**overrides)
    save_run(tmp_path / "run", Model(cfg), Config(model=cfg))
    with pytest.raises(BertkitError, match=f"export --format hf: {key}"):
        export_hf(tmp_path / "run", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    if key != "model.architecture":  # the sentence-transformers export names itself (it said "--format hf")
        with pytest.raises(BertkitError, match=f"export --format sentence-transformers: {key}"):
            export_sentence_transformers(tmp_path / "run", tmp_path / "st")


@pytest.mark.parametrize("head, num_labels", [("classifier", 3), ("tagger", 5)])
def test_export_of_a_finetuned_run_names_its_head(tmp_path, head, num_labels):
    """BERT's folder has no place for a task head: the error names the head and the exports that take the run (it
    named one tensor of the head); the sentence-transformers export, one of them, writes the finetuned encoder."""
    from bertkit.interop.sentence_transformers import export_sentence_transformers

    cfg = tiny()
    heads_cfg = heads(head, num_labels=num_labels)
    save_run(tmp_path / "run", Model(cfg, heads_cfg), Config(model=cfg, heads=heads_cfg))
    with pytest.raises(BertkitError, match=f"no place for this run's {head} head: --format onnx exports the whole "
                                           "model, --format sentence-transformers its finetuned encoder"):
        export_hf(tmp_path / "run", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    export_sentence_transformers(tmp_path / "run", tmp_path / "st")
    assert BertModel.from_pretrained(str(tmp_path / "st")).config.hidden_size == cfg.d_model


def test_import_refuses_non_bert_and_bad_folders(tmp_path):
    with pytest.raises(BertkitError, match="no config.json"):
        model_from_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(BertkitError, match="not BERT"):
        model_from_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_act": "relu"}))
    with pytest.raises(BertkitError, match="hidden_act"):
        model_from_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "is_decoder": True}))
    with pytest.raises(BertkitError, match="is_decoder"):
        model_from_hf(tmp_path)
    # a bertkit run given to import-hf: it said "config.json lacks vocab_size"
    cfg = tiny()
    save_run(tmp_path / "run", Model(cfg), Config(model=cfg))
    with pytest.raises(BertkitError, match="a bertkit run directory already, not a Hugging Face folder"):
        import_hf(tmp_path / "run", tmp_path / "imported")
    assert not (tmp_path / "imported").exists()


@pytest.mark.parametrize("settings", [{}, {"do_lower_case": True, "strip_accents": False},
                                      {"do_lower_case": False}, {"tokenize_chinese_chars": False}])
def test_a_folder_with_only_vocab_txt_tokenizes_as_transformers_does(tmp_path, settings):
    """Without a tokenizer.json the WordPiece tokenizer is built from vocab.txt and tokenizer_config.json: its
    strip_accents and tokenize_chinese_chars were ignored, so "café" was "cafe" where transformers gave [UNK]
    (a review, 2026-11-28)."""
    from tokenizers import Tokenizer
    from transformers import BertTokenizer

    from bertkit.interop.hf import copy_tokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "cafe", "café", "Cafe", "naive", "北", "京", "resume",
             "the", "##s"]
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    (tmp_path / "hf" / "tokenizer_config.json").write_text(json.dumps(settings))
    (tmp_path / "out").mkdir()
    assert copy_tokenizer(tmp_path / "hf", tmp_path / "out")
    ours = Tokenizer.from_file(str(tmp_path / "out" / "tokenizer.json"))
    theirs = BertTokenizer(str(tmp_path / "hf" / "vocab.txt"), **settings)
    for text in ("Café résumé naïve", "北京 the cafes", "CAFE Cafe café"):
        assert ours.encode(text).ids == theirs(text)["input_ids"], (settings, text)


def test_imported_minilm_finetunes_through_the_same_path(tmp_path, minilm_dir):
    """An imported Hugging Face BERT is just another run directory: finetune, predict (its WordPiece tokenizer,
    whose tokenizer.json pads to 128, is re-set to per-batch padding)."""
    from typer.testing import CliRunner

    from bertkit.cli import app

    runner = CliRunner()
    run = tmp_path / "minilm"
    assert runner.invoke(app, ["import-hf", str(minilm_dir), str(run)]).exit_code == 0
    data = Path(__file__).resolve().parents[2] / "data" / "samples" / "sentiment.tsv"
    out = tmp_path / "clf"
    result = runner.invoke(app, ["finetune", "classify", "--model", str(run), "--train", str(data), "--text-column",
                                 "sentence", "--max-steps", "3", "--no-progress", "--set", "batch_size=4",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["d_model"] == 384 and config["heads"]["names"] == ["classifier"]
    predicted = runner.invoke(app, ["predict", "--model", str(out)], input="a wonderful film\n")
    assert json.loads(predicted.stdout.strip().splitlines()[-1])["label"] in ("negative", "positive")
