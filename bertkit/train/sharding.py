"""Sharded data parallelism: FSDP2 (PyTorch's `fully_shard`) through Accelerate.

`train.sharding = "none"` is data-parallel (DDP): every process holds the whole model, its gradients and AdamW's two
moments. `"fsdp"` shards all three over the processes (ZeRO-3): each block is its own FSDP unit, gathered for its
forward and backward and freed after; the embeddings, final norm and heads (tied projections included) are the root
unit. The loss, gradients and updates are the data-parallel run's (tested: tests/train/test_sharding.py).

`bertkit.train.accelerator` selects it; what the loop needs besides Accelerate's `prepare` lives here (the shard
files themselves: `bertkit.run.checkpoints.save_shards` / `load_shards`): the full weights for a run's
model.safetensors (gathered to the main process), a plain copy to read one into, and a finiteness check every
process takes part in.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from bertkit.nn.model import Model
from bertkit.run.directory import load_weights


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether `model` was prepared with FSDP2 (its parameters are DTensor shards)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule) or isinstance(getattr(model, "_orig_mod", None), FSDPModule)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def all_finite(model: torch.nn.Module) -> bool:
    """Whether every weight is finite, on every process (each checks its own shards; collective when the model is
    sharded: every process must call it)."""
    # on the parameters' device: a NCCL-only process group cannot reduce a CPU tensor
    # one device read for all of them, not one per parameter (about 200 waits at BERT-base's every checkpoint)
    bad = (~torch.stack([torch.isfinite(_local(p)).all() for p in model.parameters()]).all()).float().reshape(1)
    if is_sharded(model):
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
    return not bad.item()


def plain_copy(model: torch.nn.Module, weights: Path | None = None) -> torch.nn.Module:
    """An unsharded CPU model of `model`'s architecture (with `weights`, a model.safetensors, loaded), built without
    drawing from the random stream (the run's dropout must not depend on whether it is sharded)."""
    with torch.random.fork_rng(devices=[]):
        plain = Model(model.config, model.head_config)
    if weights is not None:
        load_weights(plain, weights)
    return plain


def full_weights(model: torch.nn.Module) -> torch.nn.Module | None:
    """The whole model for writing or reading on one process: `model` itself unless it is sharded; a sharded one is
    gathered (collective) into a plain CPU copy on the main process (None on the others)."""
    if not is_sharded(model):
        return model
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() != 0:
        return None
    plain = plain_copy(model)
    plain.load_state_dict(state)
    return plain


def broadcast_path(path: Path | None) -> Path:
    """The main process's `path` on every process (where the others write their shards)."""
    holder = [str(path) if path is not None else None]
    dist.broadcast_object_list(holder, src=0)
    return Path(holder[0])
