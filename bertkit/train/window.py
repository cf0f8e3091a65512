"""The metrics window and log: what the loop sums between log lines, and where the lines go.

The sums of a window stay on the device (`DeviceWindow`): a step adds its loss, statistics and gradient norm
without the host waiting for the device. The loop reads them (`flush`) every few steps — every step on a CPU, where
reading costs nothing; on a GPU every `log_every` steps and wherever it must (an evaluation, a checkpoint, the end)
— into `TrainState.window` (plain floats: a checkpoint keeps a window half-way through, for an exact resume), from
which `log_record` makes a metrics.jsonl line. Non-finite steps add nothing to a window; the device keeps their
count too (`skipped`, `bad_in_row`) until it is read.
"""

from __future__ import annotations

from pathlib import Path

import torch
from accelerate import Accelerator
from rich.console import Console

from bertkit.hardware import Peak
from bertkit.run.metrics import MetricsLog, truncate_metrics
from bertkit.train.state import TrainState

# keys summed per process (reduced over processes when read); the others are the same on every process
_LOCAL_EXTRA = ("flops",)
_GLOBAL = ("norm", "tokens", "time", "grad_norm", "steps")


class DeviceWindow:
    """Window sums and non-finite-step counters on the device, read into a `TrainState` by `flush`."""

    def __init__(self, device: torch.device, bad_in_row: int = 0):
        self.device = device
        self.sums: dict[str, torch.Tensor] = {}
        self.local: list[str] = []  # keys summed per process, in the order they were first seen
        self.skipped = torch.zeros((), device=device)  # non-finite steps since the last flush
        # the run of non-finite steps up to now (a resumed run goes on with its checkpoint's)
        self.bad_in_row = torch.full((), float(bad_in_row), device=device)
        self.pending = 0  # steps added since the last flush

    def add(self, finite: torch.Tensor, local: dict[str, torch.Tensor | float], shared: dict[str, float]) -> None:
        """One step: `finite` () bool on the device; `local` its per-process sums (loss, statistics, FLOPs);
        `shared` what every process has alike (normaliser, tokens, seconds, gradient norm). Added only when
        finite (a where, not a multiplication: 0 × NaN is NaN)."""
        for key, value in {**local, **shared}.items():
            if key in local and key not in self.local:
                self.local.append(key)
            value = torch.where(finite, value, 0.0) if isinstance(value, torch.Tensor) else finite * float(value)
            self.sums[key] = self.sums[key] + value if key in self.sums else value.float()
        bad = (~finite).float()
        self.skipped = self.skipped + bad
        self.bad_in_row = (self.bad_in_row + 1.0) * bad  # reset by a finite step
        self.pending += 1

    def flush(self, state: TrainState, accelerator: Accelerator) -> int:
        """Add the device's sums to `state.window` and its counters to `state` (one read of the device); returns
        the non-finite steps since the last flush."""
        if not self.pending:
            return 0
        local = [key for key in self.local if key in self.sums]
        values = [self.sums[k].reshape(()) for k in local]
        if accelerator.num_processes > 1 and values:
            values = list(accelerator.reduce(torch.stack(values), reduction="sum").unbind())
        shared = [k for k in self.sums if k not in local]
        read = torch.stack([*values, *(self.sums[k].reshape(()) for k in shared), self.skipped,
                            self.bad_in_row]).tolist()  # the one host read
        *sums, skipped, in_row = (round(v) if i >= len(local) + len(shared) else v for i, v in enumerate(read))
        for key, value in zip(local + shared, sums):
            state.window[key] = state.window.get(key, 0.0) + value
        state.skipped_steps += skipped
        state.bad_in_row = in_row
        self.sums, self.pending = {}, 0
        self.skipped = torch.zeros((), device=self.device)
        return skipped

    def reset_bad_run(self) -> None:
        """After a reload (`checkpointing.recover`): the run of bad steps starts again."""
        self.bad_in_row = torch.zeros((), device=self.device)


class MetricsWriter:
    """metrics.jsonl (+ TensorBoard) on the main process; a resumed run first drops lines past its checkpoint (and
    a torn last line, with a warning)."""

    def __init__(self, run_dir: Path, enabled: bool, resume_step: int | None, console: Console):
        self.enabled = enabled
        self.log_file = MetricsLog(run_dir)
        self.writer = None
        if not enabled:
            return
        if resume_step is not None and truncate_metrics(run_dir, resume_step):
            console.print(f"[yellow]{self.log_file.path}: dropped a torn last line (the run was interrupted while "
                          "logging)")
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step)
        except ImportError:  # TensorBoard is optional at run time
            self.writer = None

    def log(self, record: dict) -> None:
        """One line (and TensorBoard scalars) on the main process."""
        if not self.enabled:
            return
        self.log_file.append(record)
        if self.writer is not None:
            for key, value in record.items():
                if key not in ("step", "kind") and isinstance(value, (int, float)):
                    self.writer.add_scalar(f"{record['kind']}/{key}", value, record["step"])

    def close(self) -> None:
        """Flush TensorBoard."""
        if self.writer is not None:
            self.writer.close()


def log_record(state: TrainState, lr: float, peak: Peak | None, world: int) -> dict:
    """The window's means: loss, statistics, throughput (tokens/s; model TFLOP/s and MFU, the share of the
    processes' peak rate, on the main process), and the steps the run is planned to (a time budget re-fits it;
    before its fit, the provisional plan the schedule follows)."""
    w = state.window
    seconds = max(w["time"], 1e-9)
    w.setdefault("flops", 0.0)  # a window resumed from a checkpoint written before FLOPs were counted
    record = {"kind": "train", "step": state.step, "total_steps": state.schedule_steps or state.total_steps,
              "loss": w["loss"] / w["norm"],
              "lr": lr,
              "grad_norm": w["grad_norm"] / w["steps"], "tokens_per_s": w["tokens"] / seconds,
              "tflops": w["flops"] / seconds / 1e12, "elapsed": round(state.elapsed, 2)}
    if peak is not None:
        record["mfu"] = w["flops"] / seconds / (world * peak.flops)
    for key, value in w.items():  # objective statistics normalised like the loss (e.g. masked-token accuracy)
        if key not in ("loss", *_GLOBAL, *_LOCAL_EXTRA):
            record[key] = value / w["norm"]
    return record
