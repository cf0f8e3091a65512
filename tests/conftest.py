"""Shared test set-up: offline Hugging Face, deterministic torch, tiny configs."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402
import torch  # noqa: E402

from bertkit.config import ModelConfig  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))

POSITIONS = ("learned", "sinusoidal", "relative", "rotary", "none")


def tiny(**overrides) -> ModelConfig:
    """The tests' model: d_model 32, 2 layers, 4 heads, no dropout (so eval == train unless a test wants dropout)."""
    values = dict(vocab_size=101, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_len=64, dropout=0.0,
                  attention_dropout=0.0, max_distance=4)
    values.update(overrides)
    return ModelConfig(**values)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def pytest_collection_modifyitems(config, items):
    """GPU tests run only where CUDA is available (never in CI); they are skipped with the reason elsewhere."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (GPU figures live in benchmarks/)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
