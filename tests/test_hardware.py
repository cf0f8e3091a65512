"""The peak rate MFU is measured against: a CPU's measured GEMM (kept at its best, never touching a run's RNG), a
known GPU's datasheet."""

import json

import pytest
import torch

from bertkit import hardware
from bertkit.paths import cache_root


def test_a_cpu_peak_is_measured_once_and_leaves_the_rng_alone(monkeypatch):
    monkeypatch.setattr(hardware, "_MEMO", {})
    state = torch.get_rng_state()
    peak = hardware.peak_flops(torch.device("cpu"), "fp32")
    assert torch.equal(torch.get_rng_state(), state)  # a resumed run's random stream is not shifted
    assert peak.flops > 1e8 and peak.source.startswith("measured:") and "fp32" in peak.source
    calls = []
    monkeypatch.setattr(hardware, "gemm_flops", lambda *a, **k: calls.append(a) or 1.0)
    assert hardware.peak_flops(torch.device("cpu"), "fp32") == peak and not calls  # memoised in the process


def test_the_machine_file_keeps_the_best_measurement(monkeypatch):
    device = torch.device("cpu")
    key = f"{hardware.describe_device(device)} fp32"
    file = cache_root() / "peak_flops.json"
    file.write_text(json.dumps({key: {"flops": 5e12, "source": "measured: earlier, on a quiet machine"}}))
    monkeypatch.setattr(hardware, "_MEMO", {})
    monkeypatch.setattr(hardware, "gemm_flops", lambda *a, **k: 1e9)  # a probe beside other work: slower
    assert hardware.peak_flops(device, "fp32").flops == 5e12
    monkeypatch.setattr(hardware, "_MEMO", {})
    monkeypatch.setattr(hardware, "gemm_flops", lambda *a, **k: 9e12)  # a faster probe replaces it
    assert hardware.peak_flops(device, "fp32").flops == 9e12
    assert json.loads(file.read_text())[key]["flops"] == 9e12


def test_known_gpus_use_their_datasheet(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    sheet = hardware._datasheet(torch.device("cuda"), "bf16")
    assert sheet.flops == pytest.approx(989.4e12) and "datasheet" in sheet.source
    assert hardware._datasheet(torch.device("cuda"), "fp32").flops == pytest.approx(66.9e12)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    assert hardware._datasheet(torch.device("cuda"), "bf16").flops == pytest.approx(756e12)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    assert hardware._datasheet(torch.device("cuda"), "bf16") is None  # measured instead
