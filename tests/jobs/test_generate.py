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

    model, _ = load_lm(lm)
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
    first = [json.loads(line) for line in cli_ok(*args).output.splitlines()]
    assert [r["prompt"] for r in first] == ["The model", "A much longer prompt about the corpus"]
    assert all(0 < r["tokens"] <= 12 or r["continuation"] == "" for r in first)
    assert [json.loads(line) for line in cli_ok(*args).output.splitlines()] == first
    assert [json.loads(line) for line in cli_ok(*args, "--no-cache").output.splitlines()] == first
    # a prompt's sample depends on the seed and its place in the list, not on --batch-size or the prompts after it
    assert [json.loads(line) for line in cli_ok(*args, "--batch-size", "1").output.splitlines()] == first
    alone = [json.loads(line) for line in cli_ok(*args[:3], *args[4:]).output.splitlines()]
    assert alone == first[:1]
    greedy = cli_ok("generate", lm, "The model", "--greedy", "--max-new-tokens", "8").output
    assert greedy.startswith("The model") and greedy == cli_ok("generate", lm, "The model", "--greedy",
                                                                "--max-new-tokens", "8", "--seed", "9").output


def test_a_long_prompt_is_cut_from_the_left_with_a_warning(lm):
    long = " ".join(["word"] * 200)
    result = cli_invoke("generate", lm, long + " end", "--max-new-tokens", "10", "--greedy")
    assert result.exit_code == 0 and "kept their last tokens" in result.output
    model, tokenizer = load_lm(lm)
    from bertkit.jobs.generate import prompt_ids

    ids, cut = prompt_ids(tokenizer, [long + " end"], 64 - 10)
    assert cut == 1 and len(ids[0]) == 54 and ids[0][-1] == tokenizer.encode(long + " end",
                                                                              add_special_tokens=False).ids[-1]


def test_perplexity_scores_every_token_once_and_matches_a_hand_computation(lm, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("The sample corpus has a few plain lines.\nIt is read as one stream.\n")
    model, tokenizer = load_lm(lm)
    tokens = tokenizer.encode("The sample corpus has a few plain lines.\nIt is read as one stream.",
                              add_special_tokens=False).ids
    ids = torch.tensor([[2] + tokens])  # [CLS] + the text: shorter than one window, so one pass scores it all
    with torch.no_grad():
        log_p = model(ids, head="lm").logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None]).sum()
    result = json.loads(cli_ok("perplexity", lm, text, "--json").output)
    assert result["tokens"] == len(tokens) and result["words"] == 14
    assert math.isclose(result["token_ppl"], math.exp(-float(log_p) / len(tokens)), rel_tol=1e-4)
    assert math.isclose(result["word_ppl"], math.exp(-float(log_p) / 14), rel_tol=1e-4)
    long = tmp_path / "long.txt"
    long.write_text(SAMPLE_CORPUS.read_text() * 3)
    n = len(tokenizer.encode("\n".join(long.read_text().splitlines()), add_special_tokens=False).ids)
    for stride in ("5", "31", "63"):
        result = json.loads(cli_ok("perplexity", lm, long, "--stride", stride, "--json").output)
        assert result["tokens"] == n  # every token scored exactly once, whatever the stride
    tight = json.loads(cli_ok("perplexity", lm, long, "--stride", "63", "--json").output)["token_ppl"]
    overlapping = json.loads(cli_ok("perplexity", lm, long, "--stride", "8", "--json").output)["token_ppl"]
    assert overlapping < tight  # more context per token: a trained LM predicts better


def test_attention_maps_for_a_decoder(lm, tmp_path):
    out = tmp_path / "maps"
    result = cli_ok("attention", lm, "The sample corpus has lines.", "-o", out)
    assert sorted(p.name for p in out.iterdir()) == ["decoder-self-layer0.png", "decoder-self-layer1.png"]
    assert "wrote 2 image(s)" in result.output
    cli_ok("attention", lm, "The sample", "-o", out, "--layer", "1", "--head", "3", "--overwrite")
    assert [p.name for p in out.iterdir()] == ["decoder-self-layer1-head3.png"]
    assert (out / "decoder-self-layer1-head3.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_inputs_are_one_line(lm, tmp_path, base):
    assert "prompt 1 is empty" in cli_error("generate", lm, "  ")
    assert "leaves no room for a prompt" in cli_error("generate", lm, "hi", "--max-new-tokens", "64")
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
        "error: --stride 0: must be in [1, window - 1 = 63]"
    assert cli_error("perplexity", lm, SAMPLE_CORPUS, "--window", "8", "--stride", "8") == \
        "error: --stride 8: must be in [1, window - 1 = 7]"
    assert json.loads(cli_ok("perplexity", lm, SAMPLE_CORPUS, "--window", "2", "--json").output)["window"] == 2
