"""Hugging Face BERT <-> bertkit: same last hidden states (fp32, max abs diff <= 1e-5) both ways, on padded batches,
for random BertModels of several shapes and for the real all-MiniLM-L6-v2 weights."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

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


def _task_run(tmp_path, tokenizer, head, labels, kind, pooling="cls", **task):
    """A finetuned-shaped run (random weights, the sample tokenizer, labels.json) of `kind`; `task`: its [task]
    settings (columns, max_length)."""
    from bertkit.config import TaskConfig
    from bertkit.run.directory import write_labels

    cfg = tiny(vocab_size=tokenizer.get_vocab_size())
    heads_cfg = heads(head, num_labels=len(labels), pooling=pooling)
    model = Model(cfg, heads_cfg).eval()
    with torch.no_grad():  # LayerNorms and biases away from (1, 0), so a mapping that drops one shows
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    config = Config(model=cfg, heads=heads_cfg, task=TaskConfig(kind=kind, **task))
    run = save_run(tmp_path / "run", model, config, tmp_path / "tokenizer.json")
    write_labels(run, kind, labels)
    return run


TEXTS = ["a wonderful film", "the plot is dull and slow, a waste of time", "ok"]
PAIRS = ["it was great", "nothing", "the acting is fine but the script is not"]


@pytest.mark.parametrize("kind, labels", [("classify", ["negative", "neutral", "positive"]), ("regress", ["score"])])
def test_a_classifier_or_regressor_exports_as_bert_for_sequence_classification(tmp_path, sample_tokenizer, kind,
                                                                                labels):
    """transformers' AutoModelForSequenceClassification + AutoTokenizer give bertkit's probabilities (or scores) on
    single texts and pairs, and its pipeline names bertkit's labels (a regressor's score unsquashed)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    from bertkit.inference import TaskModel

    run = _task_run(tmp_path, sample_tokenizer, "classifier", labels, kind, text_pair_column="pair")  # reads pairs
    export_hf(run, tmp_path / "hf")
    hf, loading = AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    hf, tokenizer = hf.eval(), AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert type(hf).__name__ == "BertForSequenceClassification"
    assert not loading["missing_keys"] and not loading["unexpected_keys"]  # nothing left to transformers' init
    ours = TaskModel(run)
    for pairs in (None, PAIRS):
        expected, _ = ours.classify(TEXTS, pairs, digits=None)
        with torch.no_grad():
            logits = hf(**tokenizer(TEXTS, pairs, padding=True, return_tensors="pt")).logits
        if kind == "regress":
            assert hf.config.problem_type == "regression"
            assert logits[:, 0].tolist() == pytest.approx([row["score"] for row in expected], abs=ATOL)
        else:
            got = logits.softmax(-1)
            for row, probabilities in zip(expected, got):
                assert probabilities.tolist() == pytest.approx([row["scores"][name] for name in labels], abs=ATOL)
    answers = pipeline("text-classification", model=hf, tokenizer=tokenizer)(TEXTS)
    expected, _ = ours.classify(TEXTS, digits=None)
    for answer, row in zip(answers, expected):
        if kind == "regress":  # no sigmoid: the score itself
            assert answer["label"] == "score" and answer["score"] == pytest.approx(row["score"], abs=ATOL)
        else:
            assert answer["label"] == row["label"] and answer["score"] == pytest.approx(row["score"], abs=ATOL)


def test_a_tagger_exports_as_bert_for_token_classification(tmp_path, sample_tokenizer):
    """The tagger's token logits from AutoModelForTokenClassification equal bertkit's at every real token, and the
    tags are its id2label."""
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from bertkit.inference import TaskModel, batched_logits

    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    run = _task_run(tmp_path, sample_tokenizer, "tagger", tags, "ner")
    export_hf(run, tmp_path / "hf")
    hf, loading = AutoModelForTokenClassification.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    hf, tokenizer = hf.eval(), AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert type(hf).__name__ == "BertForTokenClassification" and hf.config.id2label == dict(enumerate(tags))
    assert not loading["missing_keys"] and not loading["unexpected_keys"]
    ours = TaskModel(run)
    encoded = ours.encoder.texts(TEXTS)
    expected = batched_logits(ours.model, encoded, "tagger", ours.pad_id)
    batch = tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        got = hf(**batch).logits
    for row, (example, logits) in enumerate(zip(encoded, expected)):
        assert batch["input_ids"][row, :len(example.input_ids)].tolist() == example.input_ids
        assert (got[row, :len(example.input_ids)] - torch.as_tensor(logits)).abs().max().item() <= ATOL


@pytest.mark.parametrize("head, kind, labels", [("classifier", "classify", ["neg", "pos"]),
                                               ("classifier", "regress", ["score"]),
                                               ("tagger", "ner", ["O", "B-ORG", "I-ORG"])])
def test_an_exported_task_run_imports_back_unchanged(tmp_path, sample_tokenizer, head, kind, labels):
    """export --format hf, then import-hf: the same tensors bit for bit, the same labels.json, the same [task]
    inputs (columns, a pair column, task.max_length: lost until a review, so a run finetuned at 8 tokens read 64
    after the round trip and answered otherwise), the same answers; a second export writes the same files."""
    from bertkit.inference import TaskModel
    from bertkit.run.directory import load_run, read_labels

    task = dict(text_column="a", label_column="y", max_length=8)
    if kind != "ner":
        task["text_pair_column"] = "b"
    run = _task_run(tmp_path, sample_tokenizer, head, labels, kind, **task)
    export_hf(run, tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text())["model_max_length"] == 8
    summary = import_hf(tmp_path / "hf", tmp_path / "back")
    assert (summary["task"], summary["labels"], summary["skipped"], summary["head_left_out"]) == (kind, labels, [],
                                                                                                   None)
    assert read_labels(tmp_path / "back") == (kind, labels)
    (config, model), (config_back, model_back) = load_run(run), load_run(tmp_path / "back")
    assert config_back.heads == config.heads and config_back.task == config.task
    back = model_back.state_dict()
    assert back.keys() == model.state_dict().keys()
    for key, value in model.state_dict().items():
        assert torch.equal(value, back[key]), key
    if kind != "ner":  # texts past 8 tokens, cut alike
        assert TaskModel(tmp_path / "back").classify(TEXTS, PAIRS)[0] == TaskModel(run).classify(TEXTS, PAIRS)[0]
    export_hf(tmp_path / "back", tmp_path / "hf2")
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "hf" / name).read_bytes() == (tmp_path / "hf2" / name).read_bytes(), name
    first, second = (load_file(tmp_path / folder / "model.safetensors") for folder in ("hf", "hf2"))
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


def test_the_cli_imports_an_exported_classifier_that_predict_takes(tmp_path, sample_tokenizer):
    """`bertkit export --format hf`, `bertkit import-hf` (which says what it imported), `bertkit predict` on it."""
    from conftest import cli_ok

    run = _task_run(tmp_path, sample_tokenizer, "classifier", ["neg", "pos"], "classify")
    assert "hf, 41 tensors" in cli_ok("export", str(run), "--format", "hf", "-o", str(tmp_path / "hf")).output
    imported = cli_ok("import-hf", str(tmp_path / "hf"), str(tmp_path / "back")).output
    assert "a finetuned classifier (neg, pos): predict, evaluate and export take it" in imported
    from typer.testing import CliRunner

    from bertkit.cli import app

    answer = CliRunner().invoke(app, ["predict", "--model", str(tmp_path / "back")], input="a wonderful film\n").stdout
    assert json.loads(answer.strip().splitlines()[-1])["label"] in ("neg", "pos")


def _hf_task_folder(folder, architecture, **config):
    """A random transformers task model (perturbed LayerNorms) saved to `folder`."""
    import transformers as tf

    torch.manual_seed(0)
    config = {"vocab_size": 120, **config}
    hf_config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                           hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **config)
    model = getattr(tf, architecture)(hf_config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    return model


@pytest.mark.parametrize("architecture, config, kind, labels", [
    ("BertForSequenceClassification", dict(id2label={0: "contradiction", 1: "entailment", 2: "neutral"}), "classify",
     ["contradiction", "entailment", "neutral"]),
    ("BertForSequenceClassification", dict(num_labels=1), "regress", ["score"]),
    ("BertForSequenceClassification", dict(num_labels=2), "classify", ["LABEL_0", "LABEL_1"]),
    ("BertForTokenClassification", dict(id2label={0: "O", 1: "B-PER", 2: "I-PER"}), "ner", ["O", "B-PER", "I-PER"])])
def test_a_transformers_task_model_imports_as_a_finetuned_run(tmp_path, architecture, config, kind, labels):
    """A BertForSequenceClassification (pooler + classifier) or BertForTokenClassification folder becomes a run
    whose task head gives transformers' logits on every real token, with id2label as its labels.json."""
    from bertkit.run.directory import read_labels

    hf = _hf_task_folder(tmp_path / "hf", architecture, **config)
    summary = import_hf(tmp_path / "hf", tmp_path / "run")
    assert (summary["task"], summary["skipped"]) == (kind, [])
    assert read_labels(tmp_path / "run") == (kind, labels)
    from bertkit.run.directory import load_run

    run_config, ours = load_run(tmp_path / "run")
    head = "tagger" if kind == "ner" else "classifier"
    assert run_config.heads.names == (head,) and run_config.heads.num_labels == len(labels)
    ids, mask, types = _batch(120)
    with torch.no_grad():
        expected = hf(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
        hidden = ours(ids, mask, token_type_ids=types).last_hidden_state
        got = ours.heads[head](HeadInput(hidden, mask))
    if kind == "ner":
        assert _max_diff_on_real_tokens(got, expected, mask) <= ATOL
    else:
        assert (got - expected).abs().max().item() <= ATOL


def test_a_one_output_classifier_without_a_problem_type_keeps_its_meaning(tmp_path):
    """A cross-encoder's shape (one output, no problem_type): imported as a regressor of its raw logit, said so, and
    exported again without a problem_type, so transformers' pipeline gives the sigmoid it gave (a re-export wrote
    "regression" and the same model's pipeline answer changed)."""
    from transformers import AutoModelForSequenceClassification

    from conftest import cli_ok

    hf = _hf_task_folder(tmp_path / "hf", "BertForSequenceClassification", num_labels=1)
    assert hf.config.problem_type is None
    said = cli_ok("import-hf", tmp_path / "hf", tmp_path / "run").output
    assert "a finetuned regressor (one score: the classifier's raw logit, to which transformers' pipeline applies a " \
           "sigmoid)" in " ".join(said.split())
    assert json.loads((tmp_path / "run" / "labels.json").read_text())["hf_problem_type"] is None
    export_hf(tmp_path / "run", tmp_path / "again")
    assert "problem_type" not in json.loads((tmp_path / "again" / "config.json").read_text())
    assert AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "again")).config.problem_type is None
    assert cli_ok("import-hf", tmp_path / "again", tmp_path / "run", "--overwrite").exit_code == 0  # its own import


def test_an_imported_pair_model_reads_pairs_when_told(tmp_path, sample_tokenizer):
    """A transformers pair classifier (MRPC's shape) says nothing of its inputs: `predict` and `evaluate` take
    --text-pair-column for it (predict refused it as "finetuned on single texts" and evaluate had no such option,
    scoring the first text alone), and score the pairs as the model does; a bertkit run finetuned on single texts
    still refuses it."""
    from typer.testing import CliRunner

    from bertkit.cli import app
    from bertkit.inference import TaskModel
    from conftest import cli_error, cli_ok

    _hf_task_folder(tmp_path / "hf", "BertForSequenceClassification", vocab_size=sample_tokenizer.get_vocab_size(),
                    id2label={0: "different", 1: "same"})
    sample_tokenizer.save(str(tmp_path / "hf" / "tokenizer.json"))
    cli_ok("import-hf", tmp_path / "hf", tmp_path / "imported")
    rows = tmp_path / "pairs.csv"
    rows.write_text("a,b,label\n" + "".join(f"{t},{p},{'same' if i % 2 else 'different'}\n"
                                             for i, (t, p) in enumerate(zip(TEXTS[:1] + TEXTS[2:], PAIRS[:2]))))
    expected, _ = TaskModel(tmp_path / "imported").classify([TEXTS[0], TEXTS[2]], PAIRS[:2])
    got = CliRunner().invoke(app, ["predict", "--model", str(tmp_path / "imported"), str(rows), "--text-column", "a",
                                   "--text-pair-column", "b"]).stdout
    records = [json.loads(line) for line in got.splitlines() if line.startswith("{")]
    assert [r["pair"] for r in records] == PAIRS[:2]
    assert [r["scores"] for r in records] == [e["scores"] for e in expected]
    cli_ok("evaluate", "--model", tmp_path / "imported", "--data", rows, "--text-column", "a", "--text-pair-column",
           "b", "-o", tmp_path / "ev.json")
    gold = ["different", "same"]
    accuracy = sum(e["label"] == g for e, g in zip(expected, gold)) / 2
    assert json.loads((tmp_path / "ev.json").read_text())["accuracy"] == accuracy
    # without the option each input is one text, and a warning says why (Spearman -0.03 against 0.43 with it, on a
    # review's STS-B probe, without a word)
    alone = CliRunner().invoke(app, ["predict", "--model", str(tmp_path / "imported"), str(rows), "--text-column",
                                     "a"])
    assert "whose config does not say whether it reads text pairs" in " ".join(alone.output.split())
    # a bertkit run finetuned on single texts refuses a second text, and so does its export imported back (its
    # record says so: an imported run took one)
    single = _task_run(tmp_path, sample_tokenizer, "classifier", ["neg", "pos"], "classify", train_file="t.csv")
    export_hf(single, tmp_path / "single-hf")
    cli_ok("import-hf", tmp_path / "single-hf", tmp_path / "single-back")
    for run in (single, tmp_path / "single-back"):
        assert "was finetuned on single texts" in cli_error("evaluate", "--model", run, "--data", rows,
                                                            "--text-column", "a", "--text-pair-column", "b")
    assert "whose config does not say" not in cli_ok("evaluate", "--model", tmp_path / "single-back", "--data", rows,
                                                     "--text-column", "a").output


@pytest.mark.parametrize("architecture, config, reason", [
    ("BertForSequenceClassification", dict(num_labels=3, problem_type="multi_label_classification"), "multi-label"),
    ("BertForSequenceClassification", dict(num_labels=2, problem_type="regression"), "regresses 2 scores"),
    ("BertForTokenClassification", dict(id2label={0: "NOUN", 1: "VERB"}), "are not IOB tags"),
    ("BertForTokenClassification", dict(id2label={0: "O", 1: "I-PER", 2: "B-LOC", 3: "I-LOC"}),
     "I- tags without their B- tag (PER)"),
    ("BertForSequenceClassification", dict(id2label={0: "yes", 1: "yes"}), "names a label twice"),
    ("BertForSequenceClassification", dict(num_labels=2, pooler=False), "no pooler weights")])
def test_a_task_head_bertkit_cannot_decode_is_left_out_and_said(tmp_path, architecture, config, reason):
    """A multi-label classifier, a regressor of two scores, a tagger whose labels are not IOB tags or are IOB1 (I-
    without B-: bertkit's IOB2 decoding found no entity where transformers found them), a label named twice, a
    classifier without the pooler it reads: the encoder is imported, the head left out, and the summary says why
    (it would have answered otherwise than transformers); the head's tensors are not "skipped"."""
    from conftest import cli_ok

    pooler = config.pop("pooler", True)
    _hf_task_folder(tmp_path / "hf", architecture, **config)
    if not pooler:
        from safetensors.torch import save_file

        weights = load_file(tmp_path / "hf" / "model.safetensors")
        save_file({k: v for k, v in weights.items() if "pooler" not in k}, tmp_path / "hf" / "model.safetensors")
    summary = import_hf(tmp_path / "hf", tmp_path / "run")
    assert summary["task"] is None and reason in summary["head_left_out"] and summary["skipped"] == []
    assert not (tmp_path / "run" / "labels.json").exists()
    assert json.loads((tmp_path / "run" / "config.json").read_text())["heads"]["names"] in ([], ["pooler"])
    said = cli_ok("import-hf", tmp_path / "hf", tmp_path / "run2").output
    assert f"left its task head out ({summary['head_left_out']}): the encoder is imported" in said


@pytest.mark.parametrize("head, pooling, message", [
    ("pair_classifier", "cls", "no place for this run's pair_classifier head: --format onnx exports the whole model, "
                               "--format sentence-transformers its finetuned encoder"),
    ("classifier", "mean", "heads.classifier_pooling='mean' cannot be expressed as BertForSequenceClassification")])
def test_export_refuses_a_head_bert_cannot_hold(tmp_path, sample_tokenizer, head, pooling, message):
    """SBERT's pair classifier (a training objective) and a classifier that pools by mean have no BERT class: the
    error names the head or the key and the exports that take the run; the sentence-transformers export, one of
    them, writes the finetuned encoder."""
    from bertkit.interop.sentence_transformers import export_sentence_transformers

    run = _task_run(tmp_path, sample_tokenizer, head, ["0", "1", "2"], "classify", pooling=pooling)
    with pytest.raises(BertkitError, match=message):
        export_hf(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    export_sentence_transformers(run, tmp_path / "st")
    assert BertModel.from_pretrained(str(tmp_path / "st")).config.hidden_size == 32


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
