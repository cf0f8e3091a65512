"""The optimiser and its schedule: AdamW with no decay on norms and biases (optionally layer-wise rate decay) and
the warmup + linear / cosine / constant / warmup-stable-decay learning-rate multiplier."""

from __future__ import annotations

import math
import re
from typing import Callable

import torch

from bertkit.config import TrainConfig
from bertkit.train.defaults import DEFAULT_LEARNING_RATE


# a backbone's own blocks and embeddings (an encoder-decoder's under encoder./decoder.), after any wrapper's prefix
# (`_orig_mod.` of torch.compile): a head's blocks (ELECTRA's generator) are not the backbone's
_BLOCK = re.compile(r"(?:^|\.)backbone\.(?:(encoder|decoder)\.)?blocks\.(\d+)\.")
_EMBEDDINGS = re.compile(r"(?:^|\.)backbone\.(?:(?:encoder|decoder)\.)?embeddings\.")


def decayed_layers(config) -> int:
    """L of layer-wise decay: the backbone's blocks, an encoder-decoder's decoder stacked on its encoder."""
    n_layers = getattr(config, "n_layers", 0)
    if getattr(config, "architecture", "encoder") == "encoder-decoder":
        n_layers += config.n_decoder_layers
    return n_layers


def layer_depth(name: str, config) -> int:
    """Depth of a parameter for layer-wise learning-rate decay: 0 the embeddings, 1..L the backbone's blocks (an
    encoder-decoder's decoder blocks numbered on from its encoder's), L + 1 the rest (final norms, heads, and a
    head's own blocks: ELECTRA's generator)."""
    if _EMBEDDINGS.search(name):
        return 0
    found = _BLOCK.search(name)
    if not found:
        return decayed_layers(config) + 1
    below = getattr(config, "n_layers", 0) if found.group(1) == "decoder" else 0
    return below + int(found.group(2)) + 1


def param_groups(model: torch.nn.Module, weight_decay: float, layer_decay: float = 1.0) -> list[dict]:
    """Decay matrices only: biases, norm weights (all 1-d tensors) are left alone. With `layer_decay` < 1 every
    depth gets its own learning-rate scale, layer_decay ** (L + 1 - depth): the heads train at the full rate, the
    embeddings slowest, no parameter faster than the peak (BEiT's exponents; ELECTRA's code decays everything by one
    factor more). A head tied to the token embedding (MLM, LM) has no matrix of its own: the tied matrix trains at the
    embeddings' rate, as one parameter can have one rate."""
    config = getattr(model, "config", None)
    top = decayed_layers(config) + 1
    groups: dict[tuple[int, bool], dict] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        depth = layer_depth(name, config) if layer_decay < 1.0 else top
        decay = p.ndim >= 2
        group = groups.setdefault((depth, decay), {"params": [], "weight_decay": weight_decay if decay else 0.0,
                                                   "lr_scale": layer_decay ** (top - depth)})
        group["params"].append(p)
    return [groups[key] for key in sorted(groups, key=lambda k: (k[0], not k[1]))]  # decayed group first


def lr_factor(step: int, total: int, warmup_ratio: float, schedule: str, decay_ratio: float = 0.2) -> float:
    """Multiplier of the peak learning rate at `step` (0-based) of `total`.

    wsd (warmup-stable-decay; Hu et al. 2024, MiniCPM): the peak is held until the last `decay_ratio` of the steps,
    each of which is below the peak, falling linearly towards 0. A run in its stable phase stays at the peak when a
    time budget's total is re-fitted (or the run is extended): only where the decay starts moves."""
    warmup = round(warmup_ratio * total)
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if schedule == "constant":
        return 1.0
    if schedule == "wsd":
        decay = max(1, min(round(decay_ratio * total), total - warmup))  # never eats into the warmup
        return min(1.0, max(0.0, (total - step) / (decay + 1)))  # decay/(decay+1) ... 1/(decay+1) over its steps
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return max(0.0, 1.0 - progress)


def fast_adamw_kwargs(device: torch.device) -> dict:
    """fused AdamW where PyTorch has it for this device (CUDA, and CPU in recent releases), else foreach."""
    return {"fused": True} if device.type in ("cuda", "cpu") else {"foreach": True}


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig, device: torch.device) -> tuple[torch.optim.AdamW, float]:
    """AdamW over `param_groups` at the run's peak rate (jobs resolve train.learning_rate "auto" first); returns
    (optimizer, peak rate)."""
    groups = param_groups(model, cfg.weight_decay, cfg.layer_decay)
    peak = DEFAULT_LEARNING_RATE if cfg.learning_rate is None else cfg.learning_rate
    for group in groups:
        group["lr"] = peak * group.pop("lr_scale")
    optimizer = torch.optim.AdamW(groups, lr=peak, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                                  **fast_adamw_kwargs(device))
    return optimizer, peak


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig,
                   total_steps: Callable[[], int]) -> torch.optim.lr_scheduler.LambdaLR:
    """The rate multiplier of `lr_factor` over the run's current total (read at every step: a time budget
    re-fits it while the run goes)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: rate_at(cfg, s, total_steps()))


def rate_at(cfg: TrainConfig, step: int, total: int) -> float:
    """The schedule's multiplier of the peak rate at `step` of a `total`-step run (make_scheduler's, and what a
    re-planned resume sets its rates to)."""
    return lr_factor(step, total, cfg.warmup_ratio, cfg.schedule, cfg.decay_ratio)
