"""Will the training state fit? A model that cannot be trained in this machine's memory is refused before its run
directory is written (a `--set max_len=1000000000` would otherwise die allocating, leaving a run with no
checkpoint).

The estimate is a lower bound, so that it never refuses a run that would fit: fp32 weights, their gradients and
AdamW's two moments (16 bytes a parameter), the buffers (rotary and sinusoidal tables), and the activations a
micro-batch keeps for the backward pass, counted as four (tokens, d_model) fp32 tensors a layer — far fewer than a
real block keeps.
"""

from __future__ import annotations

import os

import torch

from bertkit.config import HeadsConfig, ModelConfig
from bertkit.errors import BertkitError
from bertkit.nn.model import meta_model

_STATE_BYTES = 16  # fp32 weight + gradient + AdamW exp_avg + exp_avg_sq


def training_bytes(cfg: ModelConfig, heads: HeadsConfig, tokens: int, shards: int = 1) -> tuple[int, int]:
    """(a lower bound on the bytes one process needs to train, the parameter count) for a model built from `cfg` /
    `heads` taking micro-batches of `tokens` tokens, its state split over `shards` processes (FSDP); the model is
    built on the meta device (nothing allocated)."""
    model = meta_model(cfg, heads)
    params = model.parameter_counts()["total"]
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    layers = cfg.n_layers + (cfg.n_decoder_layers if cfg.architecture == "encoder-decoder" else 0)
    activations = 4 * tokens * cfg.d_model * layers * 4
    return params * _STATE_BYTES // max(1, shards) + buffers + activations, params


def available_bytes(device: torch.device) -> int | None:
    """Memory free for this process: the GPU's free memory, else the machine's MemAvailable (None if unknown)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def check_fits(cfg: ModelConfig, heads: HeadsConfig, tokens: int, device: torch.device, shards: int = 1) -> None:
    """Refuse, with one line, a model whose training state cannot fit in `device`'s free memory (`tokens`: a
    micro-batch's, at most; `shards`: the processes an FSDP run splits the state over)."""
    needed, params = training_bytes(cfg, heads, tokens, shards)
    free = available_bytes(device)
    if free is not None and needed > free:
        raise BertkitError(f"the model cannot be trained here: {params / 1e6:,.1f} M parameters need at least "
                           f"{needed / 2**30:,.1f} GiB for weights, gradients, AdamW state and activations, and "
                           f"{'the GPU' if device.type == 'cuda' else 'this machine'} has {free / 2**30:,.1f} GiB "
                           "free; make it smaller (model.max_len, model.vocab_size, model.d_model, model.n_layers) "
                           "or the batch")
