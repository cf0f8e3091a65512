"""Where a window of training steps spends its time: torch.profiler over a few steps, summarised as text.

`loop_overhead.py --profile DIR` profiles a few bare steps and a few steps of the real loop with it: the device's
kernel time per step against the wall time per step (their ratio is how busy the host kept the device), then the
operators with the most device time and the most host time. Steps the loop takes are caught by wrapping
`bertkit.train.step.Stepper.__call__` for the duration (`profile_loop_steps`), so the loop itself is not changed.
Each profile's trace is also written (Chrome trace format, gzipped) for a closer look in chrome://tracing or
Perfetto.
"""

from __future__ import annotations

import contextlib
import gzip
import shutil
import time
from pathlib import Path
from typing import Iterator

import torch
from torch.profiler import ProfilerActivity, profile


def _device_us(event) -> float:
    """An event's own device (kernel) time in µs, across torch versions' names for it."""
    return float(getattr(event, "self_device_time_total", getattr(event, "self_cuda_time_total", 0.0)))


def _kernels(prof: profile) -> list:
    """The profile's device kernels (none in a CPU profile)."""
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def summary(prof: profile, steps: int, wall_s: float, title: str, top: int = 20) -> str:
    """Kernel time vs wall time per step, then the top operators by device time and by host time."""
    kernels = _kernels(prof)
    busy_ms = sum(e.time_range.elapsed_us() for e in kernels) / 1e3 / steps
    wall_ms = wall_s * 1e3 / steps
    head = (f"{title}: {steps} steps, wall {wall_ms:.2f} ms/step, device kernels {busy_ms:.2f} ms/step "
            f"({busy_ms / wall_ms:.0%} busy; the rest is the device waiting for the host), {len(kernels) / steps:.0f} "
            "kernels/step") if kernels else f"{title}: {steps} steps, wall {wall_ms:.2f} ms/step (no device kernels)"
    averages = prof.key_averages()
    sort = "self_device_time_total" if hasattr(next(iter(averages), None), "self_device_time_total") \
        else "self_cuda_time_total"
    parts = [head]
    if kernels:
        parts.append(averages.table(sort_by=sort, row_limit=top, max_name_column_width=60))
    parts.append(averages.table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=60))
    return "\n".join(parts)


# A kernel's kind, by the first of these whose words its (lower-cased) name contains. Attention before matrix
# products: the flash kernels are CUTLASS templates too.
KINDS = (
    ("attention", ("flash", "fmha", "attention")),
    ("matmul", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "matmul", "s16816", "triton_tem")),  # + autotuned
    ("fused", ("triton",)),  # inductor's generated kernels: the norms, activations, dropout, casts it fused
    ("optimiser", ("adam", "multi_tensor")),
    ("loss", ("softmax", "nll_loss", "cross_entropy")),
)


def kind_of(name: str) -> str:
    """The kind (KINDS) of a kernel named `name`, else "other" (eager elementwise ops, copies, casts, fills)."""
    lowered = name.lower()
    return next((kind for kind, words in KINDS if any(w in lowered for w in words)), "other")


def kinds_line(prof: profile, steps: int, wall_s: float) -> str:
    """One line: wall and device kernel ms per step, and the kernel time by kind (ms per step, share of kernels)."""
    kernels = _kernels(prof)
    wall_ms = wall_s * 1e3 / steps
    if not kernels:
        return f"wall {wall_ms:.2f} ms/step; no device kernels (a CPU profile: see the tables)"
    totals: dict[str, float] = {}
    for event in kernels:
        kind = kind_of(event.name)
        totals[kind] = totals.get(kind, 0.0) + event.time_range.elapsed_us() / 1e3 / steps
    busy = sum(totals.values())
    parts = ", ".join(f"{kind} {ms:.1f} ({ms / busy:.0%})" for kind, ms in
                      sorted(totals.items(), key=lambda item: -item[1]))
    return (f"wall {wall_ms:.2f} ms/step, kernels {busy:.2f} ms/step ({busy / wall_ms:.0%} busy), "
            f"{len(kernels) / steps:.0f} kernels/step; by kind, ms/step: {parts}")


def activities(device: torch.device) -> list[ProfilerActivity]:
    """The host, and the device's kernels where it is a GPU."""
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])


def write_trace(prof: profile, path: Path) -> None:
    """The profile as a gzipped Chrome trace at `path` (.json.gz)."""
    raw = path.with_suffix("")  # x.json.gz -> x.json
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


@contextlib.contextmanager
def profile_loop_steps(first: int, count: int, device: torch.device, sync) -> Iterator[dict]:
    """Profile the loop's steps `first` .. `first + count - 1` (counted from 0 at the first call of Stepper in this
    context): yields a dict that receives `prof` and `wall_s` (from the start of step `first` to the end of the
    last profiled one, the device synchronised at both ends)."""
    from bertkit.train.step import Stepper

    original = Stepper.__call__
    found: dict = {}
    calls = {"n": 0}
    prof = profile(activities=activities(device))

    def wrapped(self, batch):
        n = calls["n"]
        if n == first:
            sync()
            prof.__enter__()
            found["start"] = time.perf_counter()
        out = original(self, batch)
        calls["n"] = n + 1
        if n == first + count - 1:
            sync()
            found["wall_s"] = time.perf_counter() - found["start"]
            prof.__exit__(None, None, None)
            found["prof"] = prof
        return out

    Stepper.__call__ = wrapped
    try:
        yield found
    finally:
        Stepper.__call__ = original
        if "start" in found and "prof" not in found:  # the run ended inside the window
            prof.__exit__(None, None, None)
