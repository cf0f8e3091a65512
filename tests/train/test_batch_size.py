"""`train.batch_size = "auto"`: the rows chosen from two probe peaks, the config that accepts the keyword, and a
pretraining that stores the number it chose (a GPU's probe runs in tests/nn/test_cuda.py)."""

import json

import pytest

from bertkit.config import Config, ConfigError, TrainConfig
from bertkit.errors import BertkitError
from bertkit.train.batch_size import CPU_ROWS, MAX_TOKENS, fit_rows, require_number
from conftest import cli_error, cli_process, repeated_corpus

GIB, MIB = 2**30, 2**20


def test_the_rows_are_the_largest_power_of_two_that_fits_in_the_free_share():
    # 8 rows peak at 1 GiB + 8 x 100 MiB, 16 rows add 8 x 100 MiB more: 100 MiB a row, 1 GiB fixed
    peaks = (GIB + 800 * MIB, GIB + 1600 * MIB)
    fit = fit_rows(peaks, 8, params=0, free=20 * GIB, block_size=4096)  # 0.85 x 20 GiB - 1 GiB = 164 rows
    assert fit.largest == 163 and fit.rows == 16 and fit.capped  # 65,536 tokens a step at 4,096 a row: 16
    fit = fit_rows(peaks, 8, params=0, free=20 * GIB, block_size=128)
    assert fit.rows == 128 and not fit.capped  # 163 fit: the power of two below
    assert fit.per_row == 100 * MIB and fit.fixed == GIB


def test_adams_moments_count_as_fixed_memory_and_the_cap_is_in_tokens():
    peaks = (GIB + 800 * MIB, GIB + 1600 * MIB)
    roomy = fit_rows(peaks, 8, params=0, free=1000 * GIB, block_size=128)
    assert roomy.rows * 128 == MAX_TOKENS
    with_adam = fit_rows(peaks, 8, params=2 * GIB // 8, free=4 * GIB, block_size=128)  # 2 GiB of moments
    assert with_adam.fixed == 3 * GIB and with_adam.rows == 4  # (3.4 - 3) GiB / 100 MiB = 4.1 rows


def test_too_little_memory_for_one_row_is_one_clear_error_and_pairs_stay_even():
    peaks = (GIB + 800 * MIB, GIB + 1600 * MIB)
    with pytest.raises(BertkitError, match="not even 1 row"):
        fit_rows(peaks, 8, params=0, free=GIB, block_size=128)
    assert fit_rows(peaks, 8, params=0, free=GIB * 1.5, block_size=128, even=True).rows == 2


def test_the_config_takes_auto_or_a_number_and_names_the_key_otherwise():
    assert TrainConfig(batch_size="auto").batch_size == "auto"
    assert TrainConfig(batch_size="auto", contrastive_weight=0.1).batch_size == "auto"  # made even when chosen
    with pytest.raises(ConfigError, match=r"train\.batch_size: 'big' is not allowed \(a number or auto\)"):
        TrainConfig(batch_size="big")
    with pytest.raises(ConfigError, match=r"train\.batch_size: must be >= 1"):
        TrainConfig(batch_size=0)
    with pytest.raises(ConfigError, match="auto sizes pretraining batches only; finetuning takes a number"):
        require_number(Config(train=TrainConfig(batch_size="auto")), "finetuning")


def test_a_pretraining_stores_the_rows_auto_chose_and_a_resume_keeps_them(tmp_path):
    corpus = repeated_corpus(tmp_path / "corpus.txt", 30)
    run = tmp_path / "run"
    common = ["pretrain", "--recipe", "tiny", "--corpus", corpus, "--out", run, "--set", "model.vocab_size=400",
              "--set", "tokenizer.min_frequency=1", "--no-progress", "--set", "train.batch_size=auto"]
    done = cli_process(*common, "--max-steps", "2")
    assert f"train.batch_size auto: {CPU_ROWS} rows (on a CPU" in done.stderr
    assert json.loads((run / "config.json").read_text())["train"]["batch_size"] == CPU_ROWS
    cli_process(*common, "--max-steps", "3", "--resume")  # auto again: the stored rows, no "changed" refusal
    assert json.loads((run / "results.json").read_text())["step"] == 3


def test_finetuning_refuses_auto_in_one_line(tmp_path, sample_tokenizer):
    message = cli_error("finetune", "classify", "--model", tmp_path / "none", "--train", tmp_path / "t.tsv",
                        "--out", tmp_path / "out", "--set", "train.batch_size=auto")
    assert "train.batch_size: auto sizes pretraining batches only" in message
