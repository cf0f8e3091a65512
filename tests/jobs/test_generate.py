"""The decoder (GPT) path end to end: `pretrain --objective clm`, `generate`, `perplexity`, `attention`, and every
bad input as one line."""

import json
import math

import pytest
import torch

from bertkit.jobs.generate import load_lm
from conftest import SAMPLE_CORPUS, cli_error, cli_invoke, cli_ok

DECODER = ["--objective", "clm", "--set", "vocab_size=400", "--set", "d_model=32", "--set", "n_layers=2",
           "--set", "n_heads=4", "--set", "n_kv_heads=2", "--set", "d_ff=64", "--set", "max_len=64",
           "--set", "block_size=32", "--set", "batch_size=8", "--set", "min_frequency=1", "--set", "log_every=5",
           "--set", "eval_every=20", "--set", "learning_rate=3e-3", "--set", "warmup_ratio=0", "--no-progress"]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """A tiny decoder LM pretrained for 60 steps on the sample corpus (repeated): once for the module."""
    folder = tmp_path_factory.mktemp("lm")
    lines = [line for line in SAMPLE_CORPUS.read_text().splitlines() if line]
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(line for _ in range(20) for line in lines) + "\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BERTKIT_CACHE", str(folder / "cache"))
        cli_ok("pretrain", *DECODER, "--corpus", corpus, "--out", folder / "run", "--max-steps", "60")
    return folder / "run"


def test_clm_pretraining_learns_and_reports_perplexity(lm):
    config = json.loads((lm / "config.json").read_text())
    assert config["model"]["architecture"] == "decoder" and config["heads"]["names"] == ["lm"]
    assert config["train"]["objective"] == "clm"
    results = json.loads((lm / "results.json").read_text())
    evaluation, baseline = results["evaluation"], results["baseline"]
    assert math.isclose(evaluation["val_ppl"], math.exp(evaluation["val_loss"]), rel_tol=1e-6)
    assert evaluation["val_loss"] < baseline["val_loss"]  # beats the unigram model on held-out text


def test_the_clm_loss_is_next_token_cross_entropy(lm):
    from bertkit.tasks.clm import CLMObjective

    model, _, _ = load_lm(lm)
    ids = torch.randint(5, 400, (3, 12))
    loss_sum, stats = CLMObjective.loss(model, {"input_ids": ids})
    logits = model(ids, head="lm").logits
    expected = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 400), ids[:, 1:].reshape(-1),
                                                 reduction="sum")
    torch.testing.assert_close(loss_sum, expected)
    assert CLMObjective.normalizer({"input_ids": ids}) == 3 * 11


def test_generate_samples_reproducibly_and_the_cache_changes_nothing(lm):
    args = ["generate", lm, "The model", "A much longer prompt about the corpus", "--max-new-tokens", "12",
            "--json", "--seed", "3"]
    first = [json.loads(line) for line in cli_ok(*args).stdout.splitlines()]
    assert [r["prompt"] for r in first] == ["The model", "A much longer prompt about the corpus"]
    assert all(0 < r["tokens"] <= 12 or r["continuation"] == "" for r in first)
    assert [json.loads(line) for line in cli_ok(*args).stdout.splitlines()] == first
    assert [json.loads(line) for line in cli_ok(*args, "--no-cache").stdout.splitlines()] == first
    # a prompt's sample depends on the seed and its place in the list, not on --batch-size or the prompts after it
    assert [json.loads(line) for line in cli_ok(*args, "--batch-size", "1").stdout.splitlines()] == first
    alone = [json.loads(line) for line in cli_ok(*args[:3], *args[4:]).stdout.splitlines()]
    assert alone == first[:1]
    greedy = cli_ok("generate", lm, "The model", "--greedy", "--max-new-tokens", "8").output
    assert greedy.startswith("The model") and greedy == cli_ok("generate", lm, "The model", "--greedy",
                                                                "--max-new-tokens", "8", "--seed", "9").output


def test_a_long_prompt_is_cut_from_the_left_with_a_warning(lm):
    long = " ".join(["word"] * 200)
    result = cli_invoke("generate", lm, long + " end", "--max-new-tokens", "10", "--greedy")
    assert result.exit_code == 0 and "kept their last tokens" in result.output
    model, tokenizer, _ = load_lm(lm)
    from bertkit.jobs.generate import prompt_ids

    ids, cut = prompt_ids(tokenizer, [long + " end"], 64 - 10)
    assert cut == 1 and len(ids[0]) == 54 and ids[0][-1] == tokenizer.encode(long + " end",
                                                                              add_special_tokens=False).ids[-1]


def test_perplexity_scores_every_token_once_and_matches_a_hand_computation(lm, tmp_path):
    """By default a text is read as pretraining reads a corpus: a document per non-blank line, stripped, each closed
    by [SEP] (scored); --stream reads it as one stream, line breaks included. A decoder trained on one-line
    documents never saw a line break, and each cost it ~14 nats: a review measured 932 where the run's validation
    read 154 (156 read as documents)."""
    text = tmp_path / "text.txt"
    text.write_text("\ufeffThe sample corpus has a few plain lines.\n\n  It is read as documents. \n")
    from bertkit.jobs.generate import trained_block

    model, tokenizer, config = load_lm(lm)
    assert trained_block(config) == 32  # the fixture's block_size: the default window

    def by_hand(tokens):
        ids = torch.tensor([[2] + tokens])  # [CLS] + the text: shorter than one window, so one pass scores it all
        with torch.no_grad():
            return model(ids, head="lm").logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None]).sum()

    sep = tokenizer.token_to_id("[SEP]")
    lines = ["The sample corpus has a few plain lines.", "It is read as documents."]  # the BOM is not text
    documents = [i for line in lines for i in tokenizer.encode(line, add_special_tokens=False).ids + [sep]]
    stream = tokenizer.encode("The sample corpus has a few plain lines.\n\n  It is read as documents. ",
                              add_special_tokens=False).ids
    for args, tokens in ((), documents), (("--stream",), stream):  # one window of 64 holds the text
        result = json.loads(cli_ok("perplexity", lm, text, "--json", "--window", "64", *args).stdout)
        assert result["tokens"] == len(tokens) < 64 and result["words"] == 13, args
        log_p = by_hand(tokens)
        assert math.isclose(result["token_ppl"], math.exp(-float(log_p) / len(tokens)), rel_tol=1e-4)
        assert math.isclose(result["word_ppl"], math.exp(-float(log_p) / 13), rel_tol=1e-4)
    assert json.loads(cli_ok("perplexity", lm, text, "--json").stdout)["window"] == 32
    long = tmp_path / "long.txt"
    long.write_text(SAMPLE_CORPUS.read_text() * 3)
    n = sum(len(tokenizer.encode(line.strip(), add_special_tokens=False).ids) + 1
            for line in long.read_text().splitlines() if line.strip())
    for stride in ("5", "16", "31"):
        result = json.loads(cli_ok("perplexity", lm, long, "--stride", stride, "--json").stdout)
        assert result["tokens"] == n  # every token scored exactly once, whatever the stride
    tight = json.loads(cli_ok("perplexity", lm, long, "--stride", "31", "--json").output)["token_ppl"]
    overlapping = json.loads(cli_ok("perplexity", lm, long, "--stride", "8", "--json").output)["token_ppl"]
    assert overlapping < tight  # more context per token: a trained LM predicts better
    wide = cli_ok("perplexity", lm, long, "--window", "64")
    assert "--window 64 is longer than the 32-token blocks the run trained on" in " ".join(wide.output.split())
    # a corpus of JSON lines or gzip is read as pretraining reads it (its JSON syntax was scored as text; a .gz file
    # was "not UTF-8 text"); --stream takes text files only, and the JSON says which reading it was
    import gzip

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"text": line}) + "\n" for line in lines))
    zipped = tmp_path / "text.txt.gz"
    zipped.write_bytes(gzip.compress(text.read_bytes()))
    as_text = json.loads(cli_ok("perplexity", lm, text, "--json").stdout)
    for other in (rows, zipped):
        assert json.loads(cli_ok("perplexity", lm, other, "--json").stdout) == {**as_text, "file": str(other)}
    assert as_text["stream"] is False
    assert json.loads(cli_ok("perplexity", lm, text, "--json", "--stream").stdout)["stream"] is True
    assert "--stream: " in cli_error("perplexity", lm, rows, "--stream")


def test_literal_special_tokens_are_text_to_perplexity_and_generate(lm, tmp_path):
    """A text about BERT: its "[SEP]" / "[CLS]" / "[PAD]" are text, as pretraining packed them (perplexity scored
    them as special targets, and a prompt's "[SEP]" was a false document end); generation never draws [CLS], [PAD],
    [MASK] or [UNK] (they close no document and decode to nothing)."""
    from bertkit.generation import Sampling, generate
    from bertkit.text.tokenizer import load_run_tokenizer, special_ids

    about = "In BERT the input is [CLS] tokens [SEP] more tokens and [PAD] fills."
    text = tmp_path / "about.txt"
    text.write_text(about + "\n")
    from bertkit.run.directory import load_config

    plain = load_run_tokenizer(lm, load_config(lm))
    plain.encode_special_tokens = True  # as packing reads a corpus
    expected = len(plain.encode(about, add_special_tokens=False).ids) + 1  # and its [SEP]
    assert json.loads(cli_ok("perplexity", lm, text, "--json").stdout)["tokens"] == expected
    model, tokenizer, _ = load_lm(lm)
    special = special_ids(tokenizer)
    assert special.sep not in tokenizer.encode("the king [SEP] the", add_special_tokens=False).ids
    banned = [special.cls, special.pad, special.mask, special.unk]
    drawn = generate(model, [[special.cls, 7]] * 16, 30, None, special.pad, Sampling(temperature=50.0), 0, True,
                     banned)
    assert all(token not in banned for row in drawn for token in row) and sum(map(len, drawn)) == 16 * 30


def test_axis_labels_show_a_character_split_over_tokens_as_its_bytes():
    """A byte-level BPE splits an emoji (4 bytes) over tokens, each of which decoded alone to "�": the labels show
    each piece's bytes (a leading space as ·), and whole characters as text."""
    from bertkit.jobs.attention import token_labels
    from bertkit.text.tokenizer import train_bpe

    tokenizer = train_bpe(["hello world 😀 café"] * 50 + ["some more text here"] * 50, 290, byte_level=True)
    ids = tokenizer.encode("hello 😀 café").ids
    labels = token_labels(tokenizer, ids)
    assert labels[0] == "[CLS]" and labels[-1] == "[SEP]" and "·café" in labels and "�" not in "".join(labels)
    pieces = [label.lstrip("·").strip("<>").split() for label in labels if "<" in label]
    assert bytes(int(b, 16) for piece in pieces for b in piece) == "😀".encode()


def test_attention_maps_for_a_decoder(lm, tmp_path):
    out = tmp_path / "maps"
    result = cli_ok("attention", lm, "The sample corpus has lines.", "-o", out)
    assert sorted(p.name for p in out.iterdir()) == ["decoder-self-layer0.png", "decoder-self-layer1.png"]
    assert "wrote 2 image(s)" in result.output
    cli_ok("attention", lm, "The sample", "-o", out, "--layer", "1", "--head", "3", "--overwrite")
    assert [p.name for p in out.iterdir()] == ["decoder-self-layer1-head3.png"]
    assert (out / "decoder-self-layer1-head3.png").read_bytes()[:4] == b"\x89PNG"
    # every panel on one 0-1 scale (rows of weights sum to 1): scaled to its own maximum, near-uniform attention
    # drew as bright as a sharp head (a review, 2026-11-28)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bertkit.jobs.attention import _heatmap

    fig, ax = plt.subplots()
    image = _heatmap(ax, torch.full((4, 4), 0.25), list("abcd"), list("abcd"), "uniform")
    assert image.get_clim() == (0.0, 1.0)
    plt.close(fig)


def test_bad_inputs_are_one_line(lm, tmp_path, base):
    # an empty prompt is a document from its start ([CLS] alone), each drawn by its own place's seed
    drawn = [json.loads(line) for line in cli_ok("generate", lm, "", "  ", "--json", "--max-new-tokens", "8")
             .stdout.splitlines()]
    assert [d["prompt"] for d in drawn] == ["", "  "] and all(d["tokens"] > 0 and d["continuation"] for d in drawn)
    assert "leaves no room for a prompt" in cli_error("generate", lm, "hi", "--max-new-tokens", "64")
    # at max_len - 1 no prompt token was kept: every prompt got the same unconditional sample (a review)
    assert "(at most 62)" in cli_error("generate", lm, "hi", "--max-new-tokens", "63")
    assert "reach past the 32-token blocks the run trained on" in " ".join(
        cli_ok("generate", lm, "hi", "--max-new-tokens", "40", "--greedy").output.split())
    assert "--temperature 0.0: must be a finite number > 0" in cli_error("generate", lm, "hi", "--temperature", "0")
    message = cli_error("generate", base, "hi")
    assert "needs a decoder language model" in message and "fill-mask" in message
    assert "perplexity needs a decoder language model" in cli_error("perplexity", base, SAMPLE_CORPUS)
    # fill-mask on a decoder points to generate, not to pretraining an MLM head it cannot have
    assert "fill-mask needs an encoder with an MLM head; this is a decoder (`bertkit generate` continues a " \
           "decoder's text)" in cli_error("fill-mask", lm, "a [MASK] b")
    assert "--stride 99" in cli_error("perplexity", lm, SAMPLE_CORPUS, "--stride", "99")
    assert "no prompt" in cli_error("generate", lm)
    assert "no such file" in cli_error("generate", lm, "--input", tmp_path / "missing.txt")
    # a file's blank lines are skipped and said, as predict skips them (an argument left blank is still an error)
    gaps = tmp_path / "prompts.txt"
    gaps.write_text("The model \n\nA corpus\n\n")
    result = cli_ok("generate", lm, "--input", gaps, "--greedy", "--max-new-tokens", "3", "--json")
    # the other lines stay as written, as an argument does: a trailing space is a token to a byte-level BPE
    assert [json.loads(line)["prompt"] for line in result.stdout.splitlines()] == ["The model ", "A corpus"]
    assert "skipped 1 blank line before or between the texts" in result.output
    from typer.testing import CliRunner

    from bertkit.cli import app

    piped = CliRunner().invoke(app, ["generate", str(lm), "--input", "-", "--greedy", "--max-new-tokens", "2",
                                     "--json"], input="\ufeffThe model\n")  # a BOM on stdin is not the prompt's
    assert json.loads(piped.stdout.splitlines()[0])["prompt"] == "The model"
    gaps.write_text("\n  \n")
    assert "prompts.txt: no prompt (every line is blank)" in cli_error("generate", lm, "--input", gaps)
    assert "--layer 5" in cli_error("attention", lm, "hi", "-o", tmp_path / "a", "--layer", "5")
    assert not (tmp_path / "a").exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    assert "not empty" in cli_error("attention", lm, "hi", "-o", taken)
    assert "did not write (keep.txt)" in cli_error("attention", lm, "hi", "-o", taken, "--overwrite")
    assert (taken / "keep.txt").read_text() == "mine"
    message = cli_error("pretrain", "--objective", "clm", "--recipe", "tiny", "--corpus", SAMPLE_CORPUS,
                        "--out", tmp_path / "x")
    assert "needs a decoder" in message and not (tmp_path / "x").exists()
    assert "allowed: mlm|clm" in cli_error("pretrain", "--objective", "gpt", "--corpus", SAMPLE_CORPUS,
                                          "--out", tmp_path / "y")


def test_sampling_options_seeds_and_windows_out_of_range_are_one_line(lm):
    """Issue 38: a nan temperature and a seed past 2**64 were tracebacks; an infinite temperature (uniform noise)
    and a window of 0 (read as the default) were taken silently."""
    greedy_hint = ("must be a finite number > 0 (lower is more conservative; --greedy always takes the most likely "
                   "token)")
    for value in ("nan", "inf", "-1"):
        assert cli_error("generate", lm, "hi", "--temperature", value) == \
            f"error: --temperature {float(value)}: {greedy_hint}"
    for value in ("0", "1.5", "nan"):
        assert cli_error("generate", lm, "hi", "--top-p", value) == \
            f"error: --top-p {float(value)}: must be in (0, 1] (1: every token)"
    refused = cli_invoke("generate", lm, "hi", "--top-k", "-1")  # Typer's usage error, as for every option's range
    assert refused.exit_code == 2 and "--top-k" in refused.output and "greater than or equal to 0" in refused.output
    for seed in (-1, 2**32, 10**23):
        assert cli_error("generate", lm, "hi", "--seed", seed) == f"error: --seed {seed}: must be in [0, 2**32 - 1]"
    cli_ok("generate", lm, "hi", "--seed", 2**32 - 1, "--max-new-tokens", "2")
    for window in ("0", "1", "65"):
        assert cli_error("perplexity", lm, SAMPLE_CORPUS, "--window", window) == \
            f"error: --window {window}: must be in [2, max_len=64]"
    assert cli_error("perplexity", lm, SAMPLE_CORPUS, "--stride", "0") == \
        "error: --stride 0: must be in [1, window - 1 = 31]"
    assert cli_error("perplexity", lm, SAMPLE_CORPUS, "--window", "8", "--stride", "8") == \
        "error: --stride 8: must be in [1, window - 1 = 7]"
    assert json.loads(cli_ok("perplexity", lm, SAMPLE_CORPUS, "--window", "2", "--json").output)["window"] == 2
