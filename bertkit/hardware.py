"""What the machine can do: the peak matrix-multiply rate a run's model FLOPs are measured against (MFU).

GPUs: the datasheet's dense peak for the precision (known NVIDIA data-centre parts), else a measured GEMM. CPUs: a
measured GEMM at the run's precision and thread count — a datasheet says nothing about 2 shared cores, and whether
bf16 is native (AVX512-BF16, AMX) or emulated (AVX2: ~40x slower) is exactly what the timing shows. A measurement is
cached per machine (CPU model, capability, threads, torch version) in the bertkit cache and in the process.

It also picks the precision `precision = "auto"` means (`resolve_precision`): bf16 where the device computes it
natively — a CUDA GPU with bf16, a CPU with AVX512-BF16 or AMX whose measured bf16 GEMM is really faster than its
fp32 one — else fp32.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import time
import typing
from dataclasses import asdict, dataclass

import torch

from bertkit.config import Precision
from bertkit.errors import ConfigError
from bertkit.paths import cache_root

# Dense (no sparsity: half the datasheets' starred figures) peaks in TFLOP/s by precision, from NVIDIA's datasheets;
# the first name found as whole words in torch.cuda.get_device_name() wins, so "H100 PCIe" comes before "H100".
GPU_PEAKS = (
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2}),
    ("H100 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("H100", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("H200 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("H200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.1, "fp16": 362.1, "tf32": 183.0, "fp32": 91.6}),
    ("L40", {"bf16": 181.0, "fp16": 181.0, "tf32": 90.5, "fp32": 90.5}),
    ("L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("B200", {"bf16": 2250.0, "fp16": 2250.0, "tf32": 1125.0, "fp32": 75.0}),
)
_GEMM_SIZE = 1024  # big enough to reach a core's steady rate, small enough for emulated bf16 (~1 s on AVX2)
# a GPU missing from GPU_PEAKS: a 1024² product takes about as long as its launch there (an H100 does it in ~2 µs),
# so its measured "peak" would be far too low and the MFU several times too high; 8192² runs ~1 ms at the peak
_GPU_GEMM_SIZE = 8192
# a product that takes longer than this is an emulated precision (AVX2's bf16: seconds for 1024²): timed once, and
# measured once per machine (its rate is no peak a run nears, and a re-measurement cost every run seconds)
_EMULATED_S = 0.5
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_MEMO: dict[str, "Peak"] = {}
_NATIVE_BF16_FLAGS = {"avx512_bf16", "amx_bf16"}  # /proc/cpuinfo flags of CPUs that compute bf16 in hardware
_BF16_MIN_GAIN = 1.5  # a CPU's bf16 GEMM must beat its fp32 GEMM by this much for auto to pick it


@dataclass(frozen=True)
class Peak:
    """A peak rate in FLOP/s and where it came from ("datasheet: …" or "measured: …")."""

    flops: float
    source: str


def cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    """The CPU's feature flags (from /proc/cpuinfo; empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def describe_device(device: torch.device) -> str:
    """One line naming the hardware: the GPU, or the CPU with its vector capability and thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return (f"{cpu_name()} ({torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads), "
            f"torch {torch.__version__}")


def gemm_flops(device: torch.device, precision: str, size: int = _GEMM_SIZE, repeats: int = 3) -> float:
    """The best of up to `repeats` timed (size x size) @ (size x size) products at `precision`, in FLOP/s, after a
    warm-up call (a slow, emulated precision is timed once: its warm-up)."""
    dtype = _DTYPES[precision]
    seeded = torch.Generator(device=device).manual_seed(0)  # its own stream: a run's RNG state stays untouched
    a = torch.randn(size, size, device=device, generator=seeded).to(dtype)
    b = torch.randn(size, size, device=device, generator=seeded).to(dtype)
    best, i = float("inf"), 0
    while i <= repeats:  # call 0 warms up (allocations, kernel selection)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
        if i or seconds > _EMULATED_S:
            best = min(best, seconds)
        i = repeats + 1 if seconds > _EMULATED_S else i + 1  # emulated bf16 (seconds a call): one call is enough
    return 2 * size ** 3 / best


def tf32_matmuls() -> bool:
    """Whether CUDA fp32 matrix products run in TF32 on the tensor cores (torch's global switch)."""
    return bool(torch.backends.cuda.matmul.allow_tf32)


def _datasheet(device: torch.device, precision: str) -> Peak | None:
    name = torch.cuda.get_device_name(device)
    if precision == "fp32" and tf32_matmuls():
        precision = "tf32"  # fp32 matmuls then run on the tensor cores
    for part, peaks in GPU_PEAKS:
        # whole words: "L4" is not in "NVIDIA L40", nor "A100" in "RTX A1000" (each took the other's peak)
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(part)}(?![A-Za-z0-9])", name):
            return Peak(peaks[precision] * 1e12, f"datasheet: {name} {precision}")
    return None


def peak_flops(device: torch.device, precision: str) -> Peak:
    """The peak rate a run at `precision` on `device` is measured against (see the module docstring). A CPU is
    measured once per process; the machine's file keeps the best rate ever measured, so a probe that ran beside
    other work (2 cores are easily shared) never lowers the peak."""
    if device.type == "cuda" and (sheet := _datasheet(device, precision)) is not None:
        return sheet
    machine = describe_device(device)
    # a CUDA fp32 product under TF32 runs on the tensor cores: measured and kept apart from plain fp32's (one
    # key for both let a TF32 run's peak judge a train.tf32 = false run, or the other way)
    label = "tf32" if device.type == "cuda" and precision == "fp32" and tf32_matmuls() else precision
    key = f"{machine} {label}"
    if key in _MEMO:
        return _MEMO[key]
    file = cache_root() / "peak_flops.json"
    try:
        known = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    size = _GPU_GEMM_SIZE if device.type == "cuda" else _GEMM_SIZE
    stored = known.get(key)
    emulable = device.type == "cpu" and precision != "fp32"  # a CPU's fp32 is never emulated, whatever its load
    if emulable and isinstance(stored, dict) and 0 < stored.get("flops", 0) < 2 * size ** 3 / _EMULATED_S:
        _MEMO[key] = Peak(**stored)  # an emulated precision's rate, measured before: not again
        return _MEMO[key]
    measured = Peak(gemm_flops(device, precision, size), f"measured: best {size}² {label} GEMM on {machine}")
    peak = Peak(**stored) if isinstance(stored, dict) and stored.get("flops", 0) >= measured.flops else measured
    if peak is measured:
        known[key] = asdict(peak)
        tmp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1) + "\n", encoding="utf-8")
        tmp.replace(file)  # atomic: a concurrent reader sees the old file or the new one
    _MEMO[key] = peak
    return peak


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a job runs at and why (for its opening line and the run's record)."""

    precision: str  # fp32 | bf16 | fp16
    reason: str


def resolve_precision(requested: str, device: torch.device | str) -> PrecisionChoice:
    """What `requested` means on `device`: an explicit precision as given; "auto" bf16 where it is native and pays
    — a CUDA device of compute capability 8.0 or later (earlier ones emulate it); a CPU with AVX512-BF16 or AMX (by
    its flags) whose bf16 GEMM measures at least 1.5x its fp32 GEMM (timed once per process, the best rate kept per
    machine: `peak_flops`) — else fp32. AVX2-only CPUs emulate bf16 (~40x slower than fp32): no probe, fp32."""
    device = torch.device(device)
    if requested not in typing.get_args(Precision):  # the API's callers too: "banana" ran as if configured
        raise ConfigError(f"precision: {requested!r} is not allowed (allowed: {'|'.join(typing.get_args(Precision))})")
    if requested != "auto":
        return PrecisionChoice(requested, "as configured")
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if torch.cuda.get_device_capability(device) >= (8, 0):  # Ampere and later: bf16 tensor cores
            return PrecisionChoice("bf16", f"auto: {name} computes bf16 natively")
        return PrecisionChoice("fp32", f"auto: {name} has no native bf16 (compute capability below 8.0)")
    if device.type != "cpu":
        return PrecisionChoice("fp32", f"auto: fp32 on {device.type}")
    native = sorted(_NATIVE_BF16_FLAGS & cpu_flags())
    if not native:
        return PrecisionChoice("fp32", f"auto: {torch.backends.cpu.get_cpu_capability()} CPU without native bf16 "
                                       "(AVX512-BF16 / AMX)")
    gain = peak_flops(device, "bf16").flops / peak_flops(device, "fp32").flops
    if gain < _BF16_MIN_GAIN:
        return PrecisionChoice("fp32", f"auto: the CPU has {', '.join(native)} but its bf16 GEMM is only "
                                       f"{gain:.1f}x fp32")
    return PrecisionChoice("bf16", f"auto: {', '.join(native)}; bf16 GEMM {gain:.1f}x fp32")


def autocast(device: torch.device | str, precision: str):
    """The autocast context for a resolved precision on `device` (a no-op for fp32). Autocast keeps norms,
    softmax and losses in fp32 and runs the matrix products in the low precision. Thread-local: enter it in the
    thread that runs the forward."""
    device = torch.device(device)
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=_DTYPES[precision])
