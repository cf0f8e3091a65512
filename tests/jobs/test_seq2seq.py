"""The encoder-decoder path end to end: `finetune seq2seq` learns a word-by-word translation through
cross-attention, `translate` (greedy and beam) and `evaluate-seq2seq` agree with it, separate vocabularies work,
label smoothing is what it says, and every bad input is one line that damages nothing."""

import json
import random
from pathlib import Path

import pytest
import torch

from bertkit.tasks.seq2seq import Seq2SeqObjective
from conftest import cli_error, cli_ok, interrupted, merged

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples"
LEXICON = {"red": "rot", "blue": "blau", "green": "grün", "dog": "Hund", "cat": "Katze", "house": "Haus",
           "tree": "Baum", "car": "Auto", "big": "groß", "small": "klein", "runs": "läuft", "sleeps": "schläft"}
TINY = ["--set", "d_model=32", "--set", "n_layers=2", "--set", "n_decoder_layers=2", "--set", "n_heads=4",
        "--set", "d_ff=64", "--set", "max_len=32", "--set", "batch_size=16", "--set", "log_every=10",
        "--set", "min_frequency=1", "--set", "positions=learned", "--set", "scale_embeddings=false",
        "--no-progress"]


def _lexicon_pairs(folder: Path, name: str, n: int, seed: int) -> tuple[Path, Path]:
    """Sentences of 3-6 words and their word-by-word translations: learnable only by reading the source."""
    rng = random.Random(seed)
    words = list(LEXICON)
    source = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 6))) for _ in range(n)]
    src, tgt = folder / f"{name}.en", folder / f"{name}.de"
    src.write_text("".join(s + "\n" for s in source))
    tgt.write_text("".join(" ".join(LEXICON[w] for w in s.split()) + "\n" for s in source))
    return src, tgt


@pytest.fixture(scope="module")
def mt(tmp_path_factory):
    """A tiny encoder-decoder trained for 300 steps on the lexicon task: once for the module."""
    folder = tmp_path_factory.mktemp("mt")
    train_src, train_tgt = _lexicon_pairs(folder, "train", 600, 0)
    val_src, val_tgt = _lexicon_pairs(folder, "val", 40, 1)
    cli_ok("finetune", "seq2seq", "--train-source", train_src, "--train-target", train_tgt,
           "--validation-source", val_src, "--validation-target", val_tgt, "--out", folder / "run",
           "--max-steps", "400", *TINY, "--set", "vocab_size=360", "--set", "learning_rate=3e-3",
           "--set", "eval_every=100", "--set", "bleu_examples=40", "--set", "model.dropout=0.0",
           "--set", "warmup_ratio=0.05")
    return folder / "run", (val_src, val_tgt)


@pytest.mark.slow
def test_seq2seq_learns_through_cross_attention(mt):
    run, _ = mt
    results = json.loads((run / "results.json").read_text())
    assert results["metric"] == "bleu" and results["validation"]["bleu"] > 80, results
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["architecture"] == "encoder-decoder" and config["heads"]["names"] == ["lm"]
    assert not (run / "target").exists()  # one joint vocabulary by default


@pytest.mark.slow
def test_translate_greedy_and_beam_and_evaluate_agree(mt, tmp_path):
    run, (val_src, val_tgt) = mt
    output = cli_ok("translate", run, "red dog runs", "small cat sleeps", "--beam", "1").output.splitlines()
    assert output == ["rot Hund läuft", "klein Katze schläft"]
    assert cli_ok("translate", run, "red dog runs", "--beam", "4").output.strip() == "rot Hund läuft"
    hyps = tmp_path / "hyps.de"
    result = json.loads(cli_ok("evaluate-seq2seq", run, "--source", val_src, "--target", val_tgt, "--beam", "3",
                               "--hypotheses", hyps, "--json").output)
    assert result["sentences"] == 40 and result["bleu"] > 80 and "tok:13a" in result["bleu_signature"]
    assert len(hyps.read_text().splitlines()) == 40
    translated = tmp_path / "out.de"
    cli_ok("translate", run, "--input", val_src, "-o", translated, "--beam", "3")
    assert translated.read_text() == hyps.read_text()  # the same path, file in and file out


@pytest.mark.slow
def test_hypotheses_line_up_with_the_source_when_pairs_are_skipped(mt, tmp_path):
    """A pair with an empty side is skipped from the score; --hypotheses wrote only the kept pairs' translations,
    so every line after a skipped one sat against the wrong reference (review, 2026-11-28). One line per source
    line now, a skipped pair's empty, as `translate` writes."""
    run, (val_src, val_tgt) = mt
    source, target = val_src.read_text().splitlines(), val_tgt.read_text().splitlines()
    source[4], target[9] = "", ""
    src, tgt = tmp_path / "holes.en", tmp_path / "holes.de"
    src.write_text("".join(line + "\n" for line in source))
    tgt.write_text("".join(line + "\n" for line in target))
    hyps = tmp_path / "hyps.de"
    done = cli_ok("evaluate-seq2seq", run, "--source", src, "--target", tgt, "--beam", "1", "--hypotheses", hyps,
                  "--precision", "fp32", "--json")
    result = json.loads(done.stdout)
    assert result["sentences"] == 38 and result["skipped"] == 2 and result["precision"] == "fp32"
    assert "skipped 2 pair(s) with an empty side (their lines in --hypotheses are empty)" in done.output
    lines = hyps.read_text().splitlines()
    translated = cli_ok("translate", run, "--input", val_src, "--beam", "1", "--precision", "fp32").stdout
    expected = translated.splitlines()
    expected[4] = expected[9] = ""
    assert len(lines) == 40 and lines == expected
    # more new tokens than the decoder can write was capped without a word: one line now
    assert "--max-new-tokens 40: this model writes at most 31 tokens (max_len=32" in cli_error(
        "translate", run, "red dog", "--max-new-tokens", "40")


@pytest.mark.slow
def test_attention_alignment_for_an_encoder_decoder(mt, tmp_path):
    run, _ = mt
    out = tmp_path / "maps"
    cli_ok("attention", run, "red dog runs", "-o", out)
    names = sorted(p.name for p in out.iterdir())
    assert names == ["alignment.png", "decoder-cross-layer0.png", "decoder-cross-layer1.png",
                     "decoder-self-layer0.png", "decoder-self-layer1.png", "encoder-self-layer0.png",
                     "encoder-self-layer1.png"]
    from bertkit.jobs.attention import collect

    found = collect(run, "red dog runs")
    cross = [m for m in found["maps"] if m[1] == "cross"][-1]
    weights, out_labels, src_labels = cross[3], cross[4], cross[5]
    assert found["output"] == "rot Hund läuft" and src_labels[-1] == "[SEP]" and out_labels[0] == "[CLS]"
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:2]))  # rows are distributions
    # a long output over a short source stays a picture: its height grew with their ratio (5,209 x 51,857 pixels,
    # which Pillow refuses to open; a review, 2026-11-28); at most 40 in x 130 dpi, plus margins
    long_output = " ".join(["Hund"] * 40)
    cli_ok("attention", run, "dog", "--target", long_output, "-o", tmp_path / "long")
    png = (tmp_path / "long" / "alignment.png").read_bytes()
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert width < 6000 and height < 6000, (width, height)


@pytest.mark.slow
def test_separate_vocabularies_and_continuing_from_a_run(mt, tmp_path):
    run, (val_src, val_tgt) = mt
    out = tmp_path / "separate"
    cli_ok("finetune", "seq2seq", "--train-source", val_src, "--train-target", val_tgt, "--out", out,
           "--max-steps", "4", *TINY, "--set", "vocab_size=300", "--no-joint-vocab",
           "--set", "share_embeddings=false", "--set", "bleu_examples=0", "--set", "eval_every=4")
    assert (out / "target" / "tokenizer.json").is_file()
    assert json.loads((out / "results.json").read_text())["metric"] == "val_loss"
    assert cli_ok("translate", out, "red dog").exit_code == 0
    cont = tmp_path / "continued"
    cli_ok("finetune", "seq2seq", "--model", run, "--train-source", val_src, "--train-target", val_tgt,
           "--out", cont, "--max-steps", "2", "--no-progress", "--set", "batch_size=8", "--set", "learning_rate=1e-9",
           "--set", "eval_every=2", "--set", "bleu_examples=20")
    assert json.loads((cont / "results.json").read_text())["validation"]["bleu"] > 80  # the weights came along


def test_label_smoothing_loss_is_the_smoothed_cross_entropy():
    from bertkit.config import TrainConfig
    from bertkit.nn.model import Model
    from tests.conftest import tiny, heads

    model = Model(tiny(architecture="encoder-decoder", type_vocab_size=0), heads("lm")).eval()
    objective = Seq2SeqObjective([[7, 8, 9, 3], [10, 3]], [[11, 12, 3], [13, 14, 15, 3]], [], [], [], 2, 0, 0.2,
                                 TrainConfig(batch_size=2))
    batch = objective.batch(0)
    assert batch["decoder_input_ids"].tolist() == [[2, 11, 12, 0], [2, 13, 14, 15]]
    assert batch["labels"].tolist() == [[11, 12, 3, -100], [13, 14, 15, 3]]
    loss, _ = objective.loss(model, batch)
    logits = model(batch["input_ids"], batch["decoder_input_ids"], attention_mask=batch["attention_mask"],
                   head="lm").logits
    log_p = logits.log_softmax(-1)
    real = batch["labels"] != -100
    nll = -log_p[real].gather(-1, batch["labels"][real][:, None]).squeeze(-1)
    uniform = -log_p[real].mean(-1)
    torch.testing.assert_close(loss, (0.8 * nll + 0.2 * uniform).sum())
    assert objective.normalizer(batch) == 7


@pytest.mark.slow
def test_bad_inputs_are_one_line_and_damage_nothing(mt, tmp_path, base):
    run, (val_src, val_tgt) = mt
    short = tmp_path / "short.de"
    short.write_text("".join(val_tgt.read_text().splitlines(keepends=True)[:39]))
    message = cli_error("finetune", "seq2seq", "--train-source", val_src, "--train-target", short, "--out",
                        tmp_path / "x", *TINY)
    assert "has 40 lines but" in message and "has 39" in message and not (tmp_path / "x").exists()
    assert "give both sides" in cli_error("finetune", "seq2seq", "--train-source", val_src, "--out", tmp_path / "x")
    assert "needs an encoder-decoder" in cli_error("finetune", "seq2seq", "--model", base, "--train-source",
                                                   val_src, "--train-target", val_tgt, "--out", tmp_path / "x")
    assert "set model.share_embeddings = false" in cli_error(
        "finetune", "seq2seq", "--train-source", val_src, "--train-target", val_tgt, "--out", tmp_path / "x",
        "--no-joint-vocab", *TINY)
    message = cli_error("translate", base, "hello")
    assert "needs an encoder-decoder run, this is an encoder (an encoder predicts masked tokens: try `bertkit " \
           "fill-mask`)" in message
    assert "encoder-decoder translates" in cli_error("generate", run, "hello")
    assert "every input is empty" in cli_error("translate", run, " ")
    kept = tmp_path / "kept.de"
    kept.write_text("mine\n")
    assert "already exists" in cli_error("translate", run, "red dog", "-o", kept)
    assert kept.read_text() == "mine\n"
    assert "this command's own input" in cli_error("translate", run, "--input", kept, "-o", kept, "--overwrite")
    assert kept.read_text() == "mine\n"
    assert "already holds a run" in cli_error("finetune", "seq2seq", "--train-source", val_src, "--train-target",
                                              val_tgt, "--out", run)
    assert (run / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_run_killed_before_its_first_checkpoint_restarts_from_the_same_start(tmp_path):
    """Issue 38: a resume before the first checkpoint starts the run again as it began — from its recipe here (a
    run continued from a model restarts from that model: finetune's test) — to the same losses; a --model it did
    not begin from is refused."""
    src, tgt = _lexicon_pairs(tmp_path, "train", 120, 0)
    args = merged(["finetune", "seq2seq", "--train-source", src, "--train-target", tgt, "--max-steps", "4", *TINY,
                   "--set", "vocab_size=300", "--set", "log_every=1", "--set", "eval_every=4",
                   "--set", "save_every=100", "--set", "bleu_examples=4"])
    cli_ok(*args, "--out", tmp_path / "straight")
    interrupted(Seq2SeqObjective, 2, *args, "--out", tmp_path / "killed")
    assert "began from its recipe, not from a model" in cli_error(*args, "--out", tmp_path / "killed", "--resume",
                                                                   "--model", tmp_path / "straight")
    cli_ok(*args, "--out", tmp_path / "killed", "--resume")

    def losses(run):
        return [r.get("loss") for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())]
    assert losses(tmp_path / "killed") == losses(tmp_path / "straight")
