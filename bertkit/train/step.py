"""One optimiser step: the global batch cut into this process's micro-batches, forward and backward under
autocast with gradient accumulation (DDP synchronises on the last micro-batch only), clipping, and the update —
skipped when the loss or the gradient is not finite.

The host does not wait for the device inside a step: losses, statistics and the gradient norm stay device tensors
(the loop's `DeviceWindow` reads them every few steps), and a non-finite step is skipped on the device itself —
fused AdamW takes a `found_inf` flag and leaves weights, moments and its step count untouched where it is set (the
mechanism PyTorch's GradScaler uses). Where that is not available (fp16's loss scaler, which skips by itself; FSDP;
an optimiser without the fused kernel) the flag is read on the host and the update skipped there.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from accelerate import Accelerator

from bertkit.config import TrainConfig


@dataclass
class Prepared:
    """A global batch as this process trains it: its micro-batches (host tensors, pinned for a GPU) and what the
    loop counts from the whole batch."""

    micros: list[dict[str, torch.Tensor]]
    norm: float  # the global batch's loss denominator (Objective.normalizer)
    tokens: int  # tokens in the global batch (Objective.tokens)
    flops: int  # model FLOPs of this process's micro-batches (Objective.flops)


# what an objective reads as a Python number (RTD's sampling seed): left on the host, where on the device each read
# would wait for it and stop the host queueing the next kernels
HOST_KEYS = frozenset({"seed"})


class Stepper:
    """Runs training steps of `objective` on `ddp_model` (see the module docstring)."""

    def __init__(self, objective, cfg: TrainConfig, accelerator: Accelerator, config, ddp_model, optimizer,
                 prepared_optimizer, scheduler, graphs: bool = False):
        self.objective, self.cfg, self.accelerator, self.config = objective, cfg, accelerator, config
        self.ddp_model, self.optimizer, self.prepared, self.scheduler = ddp_model, optimizer, prepared_optimizer, \
            scheduler
        self.device = accelerator.device
        self.pin = self.device.type == "cuda"
        self.graphs = graphs  # the compiled model replays CUDA graphs: each micro-step begins a new replay
        # skip non-finite updates on the device (fused AdamW's found_inf) where nothing else decides about them
        self.on_device = (bool(optimizer.defaults.get("fused")) and accelerator.scaler is None
                          and not accelerator.is_fsdp2)

    def prepare(self, step: int) -> Prepared:
        """Host side of step `step` (thread-safe: the prefetcher runs it ahead): the batch, cut into this process's
        micro-batches, each given the objective's host preparation (`prepare`, where it has one)."""
        objective, cfg, world = self.objective, self.cfg, self.accelerator.num_processes
        batch = objective.batch(step)
        rows = next(iter(batch.values())).shape[0]
        micro_rows = rows // (cfg.accumulation_steps * world)
        micros, flops = [], 0
        for a in range(cfg.accumulation_steps):
            index = a * world + self.accelerator.process_index
            micro = {k: v[index * micro_rows:(index + 1) * micro_rows] for k, v in batch.items()}
            flops += objective.flops(self.config, micro)
            if hasattr(objective, "prepare"):
                micro = objective.prepare(micro)
            micros.append({k: v.pin_memory() if self.pin else v for k, v in micro.items()})
        return Prepared(micros, objective.normalizer(batch), objective.tokens(batch), flops)

    def __call__(self, batch: Prepared) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
        """Train one step; returns (finite: () bool, this process's summed loss and statistics, gradient norm),
        all on the device."""
        accelerator, cfg, world = self.accelerator, self.cfg, self.accelerator.num_processes
        sums: dict[str, torch.Tensor] = {}
        self.ddp_model.train()
        for a, host in enumerate(batch.micros):
            micro = {k: v if k in HOST_KEYS else v.to(self.device, non_blocking=self.pin) for k, v in host.items()}
            sync = a == len(batch.micros) - 1
            if self.graphs:  # the outputs of the last replay are consumed: this one may overwrite them
                torch.compiler.cudagraph_mark_step_begin()
            with (contextlib.nullcontext() if sync else accelerator.no_sync(self.ddp_model)):
                with accelerator.autocast():
                    loss_sum, stats = self.objective.loss(self.ddp_model, micro)
                # DDP averages gradients over processes: scale so the result is sum / global normaliser.
                accelerator.backward(loss_sum * (world / batch.norm))
            for key, value in {"loss": loss_sum.detach().float(), **stats}.items():
                sums[key] = sums[key] + value.detach().float() if key in sums else value.detach().float()
        grad_norm = accelerator.clip_grad_norm_(self.ddp_model.parameters(), cfg.max_grad_norm or float("inf"))
        if hasattr(grad_norm, "full_tensor"):  # FSDP2: a DTensor over the shards
            grad_norm = grad_norm.full_tensor()
        grad_norm = torch.as_tensor(grad_norm, device=self.device).float().reshape(())
        ok = torch.isfinite(sums["loss"]).float().reshape(1)
        if world > 1:  # every process decides alike
            ok = accelerator.reduce(ok, reduction="sum") / world
        finite = (ok.reshape(()) == 1.0) & torch.isfinite(grad_norm)
        if self.on_device:
            self.optimizer.found_inf = (~finite).float()  # fused AdamW skips the whole update where it is 1
            self.prepared.step()
            del self.optimizer.found_inf  # no later caller of step() inherits the flag
        elif bool(finite):  # the host decides (one read of the device)
            self.prepared.step()
        elif accelerator.scaler is not None:  # fp16: the step that would have updated the scale is skipped;
            accelerator.scaler.update()      # lower it now (clipping already unscaled)
        self.prepared.zero_grad(set_to_none=True)
        self.scheduler.step()
        return finite, sums, grad_norm
