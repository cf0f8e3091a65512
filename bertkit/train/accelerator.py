"""One Accelerator per process: the device, the precision and the parallelism a training job runs with.

Data-parallel (DDP; a gloo group on the CPU) or, with `train.sharding = "fsdp"` or an `accelerate launch` config that
asks for FSDP, Accelerate's FSDP2 plugin (`bertkit.train.sharding` has what the loop needs besides). DeepSpeed is
refused: its engine would take over what the loop owns.
"""

from __future__ import annotations

import dataclasses
import functools
import os

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import DistributedType

from bertkit.config import Config
from bertkit.errors import BertkitError
from bertkit.hardware import resolve_precision

BLOCK_CLASSES = ["Block"]  # the FSDP units below the root: every transformer block (bertkit/nn/block.py)


def _accelerate_asks() -> bool:
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def _one_of_many() -> bool:
    """Whether `accelerate launch` may have asked for several processes and started one: its simple launcher (the
    CPU's) sets MASTER_ADDR for --num_processes > 1 but starts a single Python without MPI, which then trained alone,
    on half the global batch planned, without a word (a review). torchrun sets WORLD_SIZE; MPI its own sizes."""
    env = os.environ
    launcher = "ACCELERATE_USE_CPU" in env and "MASTER_ADDR" in env  # accelerate's simple launcher, N > 1
    return launcher and not any(key in env for key in ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                                       "MV2_COMM_WORLD_SIZE"))


@functools.cache  # once a process: the demo and ablate make an accelerator per job
def _warn_one_process() -> None:
    from rich.console import Console

    # a warning, not a refusal: a job script's own MASTER_ADDR looks the same to a one-process launch
    Console(stderr=True).print(
        "[yellow]warning: MASTER_ADDR is set, yet this is one process: accelerate launch's CPU launcher (--cpu, "
        "or a machine without GPUs) starts one for --num_processes N unless under MPI (--mpirun_hostfile); for "
        "N CPU processes use torchrun --nproc_per_node N -m bertkit … (or accelerate launch --multi_gpu)")


def resolve_sharding(setting: str) -> str:
    """`train.sharding`, or "fsdp" where the launch's `accelerate config` asks for FSDP (`accelerate launch` sets
    ACCELERATE_USE_FSDP)."""
    return "fsdp" if _accelerate_asks() else setting


def with_sharding(config: Config) -> Config:
    """`config` with train.sharding resolved (`resolve_sharding`): what the run records and trains with."""
    return dataclasses.replace(config, train=dataclasses.replace(
        config.train, sharding=resolve_sharding(config.train.sharding)))


def sharding_text(world: int) -> str:
    """The line a sharded run opens with: what is sharded, over how many processes, and where the choice came
    from."""
    version = os.environ.get("FSDP_VERSION", "1")
    source = ""
    if _accelerate_asks():
        source = "; from the accelerate config" + (
            "" if version == "2" else f", whose fsdp_version {version} bertkit does not use: it shards with FSDP2")
    return (f"sharding: fsdp (FSDP2: weights, gradients and AdamW state sharded over {world} processes, "
            f"one unit per block{source})")


def fsdp_plugin():
    """Accelerate's FSDP2 plugin: one unit per block, re-sharded after each forward (ZeRO-3). Settings the plugin
    reads from an `accelerate config` (CPU offload, activation checkpointing, RAM-efficient loading) still apply."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    return FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                          transformer_cls_names_to_wrap=BLOCK_CLASSES, reshard_after_forward=True)


def make_accelerator(precision: str, sharding: str = "none") -> Accelerator:
    """One Accelerator per process: CPU, one GPU or a distributed launch (accelerate launch / torchrun), at the
    precision `precision` resolves to on that device ("auto": `hardware.resolve_precision`), data-parallel or,
    with `sharding` "fsdp", sharded with FSDP2 (`bertkit.train.sharding`; jobs resolve an accelerate config's
    choice first: `resolve_sharding`)."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        raise BertkitError("accelerate config: DeepSpeed is not supported (its engine would take over the "
                           "accumulation, clipping and checkpoints bertkit's loop owns); shard with train.sharding = "
                           '"fsdp" instead (FSDP2: weights, gradients and optimiser state, as ZeRO-3)')
    gpu = torch.cuda.is_available()
    chosen = resolve_precision(precision, "cuda" if gpu else "cpu").precision
    mixed = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[chosen]
    # Accelerate keeps one state per process and refuses a second precision (demo, ablate and in-process callers
    # run several jobs): a single process starts afresh; a distributed launch must keep one precision.
    held = AcceleratorState._shared_state.get("_mixed_precision")
    if held is not None and str(held) != mixed:
        if AcceleratorState().num_processes > 1:
            raise BertkitError(f"train.precision: this launch already trains at {held}, not {chosen}; give every "
                               "job of one distributed launch the same precision")
        AcceleratorState._reset_state(reset_partial_state=True)
    held = AcceleratorState._shared_state.get("distributed_type")
    if held is not None and (held == DistributedType.FSDP) != (sharding == "fsdp"):
        if AcceleratorState().num_processes > 1:
            raise BertkitError(f"train.sharding: this launch already trains with sharding "
                               f"{'fsdp' if held == DistributedType.FSDP else 'none'}; give every job of one "
                               "distributed launch the same train.sharding")
        AcceleratorState._reset_state(reset_partial_state=True)
    if sharding == "fsdp" and (world := PartialState(cpu=not gpu).num_processes) < 2:
        raise BertkitError(f"train.sharding: fsdp shards the model over processes and this launch has {world}; "
                           "launch 2 or more (torchrun --nproc_per_node 2 -m bertkit …) or set train.sharding = "
                           '"none"')
    plugin = fsdp_plugin() if sharding == "fsdp" else None
    asked = os.environ.get("ACCELERATE_USE_FSDP")
    # cpu=True where there is no GPU: Accelerate then runs a torchrun/accelerate launch as a gloo process group
    # (without it, each CPU process would silently train alone).
    accelerator = Accelerator(cpu=not gpu, mixed_precision=mixed, fsdp_plugin=plugin)
    if accelerator.num_processes == 1 and _one_of_many():
        _warn_one_process()
    if asked is None:  # Accelerate sets it when given a plugin: a later job in this process must not read it
        os.environ.pop("ACCELERATE_USE_FSDP", None)
    if plugin is not None and not accelerator.is_fsdp2:
        # Accelerate selects FSDP on accelerators only; FSDP2 itself shards over the CPU processes' gloo group, so
        # a CPU launch takes the same path (how the sharded tests run without a GPU).
        # (Accelerate's own FSDP selection sets both states' type the same way)
        state = AcceleratorState()
        state.distributed_type, state.fsdp_plugin = DistributedType.FSDP, plugin
        PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return accelerator


def run_precision(accelerator: Accelerator) -> str:
    """The precision an Accelerator trains at: fp32, bf16 or fp16."""
    return {"no": "fp32"}.get(str(accelerator.mixed_precision), str(accelerator.mixed_precision))
