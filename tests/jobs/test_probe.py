"""`bertkit probe`: per-layer word states are the model's own (batched = one at a time), the control task is a fixed
random label per word type, scores are computed as defined, real CoNLL-2003 probes on all-MiniLM-L6-v2 find what the
literature finds, and bad inputs are one line."""

import csv

import numpy as np
import pytest
import torch

from conftest import cli_error, cli_ok, heads, tiny

from bertkit.config import Config
from bertkit.nn.model import Model
from bertkit.paths import data_roots
from bertkit.probing import control_labels, score, split_by_sentence, word_features
from bertkit.text.features import TaskEncoder, join_words
from bertkit.text.tokenizer import special_ids

SENTENCES = [("Peter", "Blackburn", "lives", "in", "Brussels", "."), ("The", "European", "Commission", "said"),
             ("He", "said", "it", "was", "a", "very", "long", "sentence", "indeed", ",", "really", ".")]


@pytest.mark.parametrize("architecture", ["encoder", "decoder", "encoder-decoder"])
def test_layer_states_are_every_layer_of_the_reading_stack(architecture):
    model = Model(tiny(architecture=architecture, norm_position="pre")).eval()
    ids = torch.randint(5, 101, (2, 7))
    states = model.layer_states(ids, torch.ones_like(ids))
    assert states.shape == (2, 7, model.layer_count, 32) and model.layer_count == 3
    stack = model.backbone.encoder if architecture == "encoder-decoder" else model.backbone
    out = stack(ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
    torch.testing.assert_close(states[:, :, -1], out.last_hidden_state)  # after the pre-norm final norm
    torch.testing.assert_close(states[:, :, 0], stack.embeddings(ids))


def test_word_features_are_first_subword_states_batched_or_alone(sample_tokenizer):
    model = Model(tiny(vocab_size=400)).eval()
    encoder = TaskEncoder(sample_tokenizer, 64)
    pad = special_ids(sample_tokenizer).pad
    batched = word_features(model, encoder, SENTENCES, pad, batch_size=2)
    assert batched.states.shape == (sum(map(len, SENTENCES)), 3, 32) and batched.truncated == 0
    row = 0
    for words in SENTENCES:  # one sentence at a time, no padding, by hand
        text, spans = join_words(words)
        enc = encoder.words([text], [spans])[0]
        with torch.no_grad():
            alone = model.layer_states(torch.tensor([enc.input_ids]))[0]  # (T, L+1, D)
        np.testing.assert_allclose(batched.states[row:row + len(words)], alone[enc.first_token].numpy(), atol=1e-5)
        row += len(words)
    short = word_features(model, TaskEncoder(sample_tokenizer, 6), SENTENCES, pad)
    assert short.truncated >= 2 and not all(short.kept[2]) and len(short.states) == sum(map(sum, short.kept))


def test_control_task_is_one_seeded_label_per_word_type():
    words = ["a", "b", "a", "c", "b", "a"] * 50
    labels = ["X"] * 200 + ["Y"] * 100
    control = control_labels(words, labels, seed=3)
    assert set(control) == {"a", "b", "c"} and set(control.values()) <= {"X", "Y"}
    assert control == control_labels(words, labels, seed=3)
    many = control_labels([f"w{i}" for i in range(3000)], labels, seed=0)
    assert abs(sum(v == "X" for v in many.values()) / 3000 - 2 / 3) < 0.05  # the task's label distribution


def test_scores_follow_their_definitions():
    gold = [["B-PER", "I-PER", "O"], ["O", "B-LOC"]]
    kept = [[True, True, True], [True, False]]  # the last word was cut off: scored as O
    assert split_by_sentence(["B-PER", "I-PER", "O", "O"], kept) == [["B-PER", "I-PER", "O"], ["O", "O"]]
    result = score("ner", gold, ["B-PER", "I-PER", "O", "O"], kept)
    assert result["accuracy"] == 1.0  # over words with a state
    assert result["f1"] == pytest.approx(2 / 3)  # PER found, LOC missed: P 1, R 1/2
    assert score("pos", [["DT", "NN"]], ["DT", "VB"], [[True, True]]) == {"accuracy": 0.5}


def _conll(tmp_path):
    """A CoNLL-2003-shaped file where POS is a function of the word and NER of the word's capital letter."""
    rng = np.random.default_rng(0)
    lexicon = {"the": "DT", "a": "DT", "cat": "NN", "dog": "NN", "runs": "VBZ", "sleeps": "VBZ", "Paris": "NNP",
               "Berlin": "NNP", "big": "JJ", "small": "JJ"}
    lines = ["-DOCSTART- -X- O O", ""]
    for _ in range(120):
        for word in rng.choice(list(lexicon), size=rng.integers(3, 8)):
            ner = "I-LOC" if word[0].isupper() else "O"
            chunk = "I-VP" if lexicon[word] == "VBZ" else "I-NP"
            lines.append(f"{word} {lexicon[word]} {chunk} {ner}")
        lines.append("")
    path = tmp_path / "toy.conll"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_probe_writes_csv_and_plot_with_selectivity(tmp_path, base):
    data = _conll(tmp_path)
    out = tmp_path / "probe"
    result = cli_ok("probe", "--model", base, "--task", "pos", "--task", "ner", "--task", "chunk", "--data", data,
                    "--control", "--max-iter", "100", "-o", out, "--no-progress")
    with (out / "probe.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["task"], r["layer"]) for r in rows] == [(t, str(layer)) for t in ("pos", "ner", "chunk")
                                                       for layer in range(3)]
    assert {r["metric"] for r in rows} == {"accuracy", "f1"}
    pos0 = rows[0]
    # the embeddings layer holds the word's first subword, and POS here is a function of the word: far above the
    # majority class (each of the 5 tags is about a fifth of the words; some words share a first subword)
    assert float(pos0["score"]) > 0.7 and int(pos0["train_words"]) > 300
    for r in rows:
        assert float(r["selectivity"]) == pytest.approx(float(r["accuracy"]) - float(r["control_accuracy"]))
        assert 0 <= float(r["control_accuracy"]) <= 1
    # eval words of types seen in training: the control labels are a function of the word, so the embeddings layer
    # learns them too (selectivity near 0 here); the held-out split has 20% of the 120 sentences
    assert int(pos0["eval_words"]) > 60 and float(pos0["control_accuracy"]) > 0.5
    assert (out / "probe.png").read_bytes()[:4] == b"\x89PNG"
    assert f"pos   layer  0: accuracy {100 * float(pos0['score']):.1f}" in result.output


def _conll_2003():
    for root in data_roots():
        if (root / "conll2003" / "train.txt").is_file():
            return root / "conll2003"
    pytest.skip("CoNLL-2003 is not in any data root (../shared/data/conll2003)")


@pytest.mark.slow
@pytest.mark.long
def test_minilm_layers_encode_pos_and_entities(tmp_path, minilm_run):
    """all-MiniLM-L6-v2 on real CoNLL-2003: POS is linearly readable from every layer (> 80%), and entities are
    read better from the middle layers than from the embeddings (the pattern Tenney et al. 2019 report for BERT)."""
    folder = _conll_2003()
    out = tmp_path / "probe"
    cli_ok("probe", "--model", minilm_run, "--task", "pos", "--task", "ner", "--data", folder / "train.txt",
           "--eval-data", folder / "dev.txt", "--max-train-sentences", 250, "--max-eval-sentences", 80,
           "-o", out, "--no-progress")
    with (out / "probe.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    pos = [float(r["score"]) for r in rows if r["task"] == "pos"]
    ner = [float(r["score"]) for r in rows if r["task"] == "ner"]
    assert len(pos) == len(ner) == 7
    assert max(pos) > 0.8
    assert max(ner[2:5]) > ner[0] + 0.1


def test_probe_bad_inputs_are_one_line(tmp_path, base):
    data = _conll(tmp_path)
    out = tmp_path / "probe"
    assert "--task 'srl'" in cli_error("probe", "-m", base, "--task", "srl", "--data", data, "-o", out)
    assert "one --task" in cli_error("probe", "-m", base, "--task", "pos", "--task", "ner", "--column", 1,
                                     "--data", data, "-o", out)
    assert "no such file" in cli_error("probe", "-m", base, "--task", "pos", "--data", tmp_path / "nope.txt",
                                       "-o", out)
    assert "not O or PREFIX-TYPE" in cli_error("probe", "-m", base, "--task", "ner", "--column", 1, "--data", data,
                                               "-o", out)
    assert not out.exists()
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert "already exists" in cli_error("probe", "-m", base, "--task", "pos", "--data", data, "-o", out)
    assert (out / "keep.txt").read_text() == "mine"
    assert "config.json" in cli_error("probe", "-m", tmp_path, "--task", "pos", "--data", data, "-o", tmp_path / "p")


def test_probe_reads_decoders(tmp_path, sample_tokenizer):
    """Any run: a decoder's (causal) states are probed the same way."""
    from bertkit.text.tokenizer import save_tokenizer
    from bertkit.run.directory import save_run

    save_tokenizer(sample_tokenizer, tmp_path / "tok")
    cfg, lm = tiny(vocab_size=400, architecture="decoder"), heads("lm")
    run = save_run(tmp_path / "gpt", Model(cfg, lm), Config(model=cfg, heads=lm), tmp_path / "tok" / "tokenizer.json")
    cli_ok("probe", "-m", run, "--task", "pos", "--data", _conll(tmp_path), "--max-iter", 50, "-o",
           tmp_path / "p", "--no-progress")
    assert len((tmp_path / "p" / "probe.csv").read_text().splitlines()) == 1 + 3
