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


def test_an_emulated_precision_is_measured_once_per_machine(monkeypatch):
    """AVX2's emulated bf16 takes seconds for one 1024² product: a rate that slow, stored before, is reused (every
    bf16 run and benchmark process on such a CPU paid the seconds again); a fast one is re-measured to keep the best,
    and fp32 always is (a probe slowed by other work is never frozen)."""
    device = torch.device("cpu")
    file = cache_root() / "peak_flops.json"
    calls = []
    monkeypatch.setattr(hardware, "gemm_flops", lambda *a, **k: calls.append(a[1]) or 2e12)
    for precision, stored, measured in (("bf16", 8e8, False), ("bf16", 3e11, True), ("fp32", 8e8, True)):
        key = f"{hardware.describe_device(device)} {precision}"
        file.write_text(json.dumps({key: {"flops": stored, "source": "measured: before"}}))
        monkeypatch.setattr(hardware, "_MEMO", {})
        calls.clear()
        peak = hardware.peak_flops(device, precision)
        assert bool(calls) == measured and peak.flops == (2e12 if measured else stored)


def test_known_gpus_use_their_datasheet(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    # bertkit's own reader of the TF32 switch is patched, never torch's backend object: its attributes are
    # computed (__getattr__), so a monkeypatch undo would delete them (pytest 9.2)
    monkeypatch.setattr(hardware, "tf32_matmuls", lambda: False)
    sheet = hardware._datasheet(torch.device("cuda"), "bf16")
    assert sheet.flops == pytest.approx(989.4e12) and "datasheet" in sheet.source
    assert hardware._datasheet(torch.device("cuda"), "fp32").flops == pytest.approx(66.9e12)
    monkeypatch.setattr(hardware, "tf32_matmuls", lambda: True)  # fp32 matmuls on the tensor cores
    tf32 = hardware._datasheet(torch.device("cuda"), "fp32")
    assert tf32.flops == pytest.approx(494.7e12) and "tf32" in tf32.source
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 PCIe")
    assert hardware._datasheet(torch.device("cuda"), "bf16").flops == pytest.approx(756e12)
    # whole names: an L40 is not an L4, an RTX A1000 not an A100, an NVL not the SXM part (each took the other's)
    for name, bf16 in (("NVIDIA L40", 181.0e12), ("NVIDIA L4", 121.0e12), ("NVIDIA L40S", 362.1e12),
                       ("NVIDIA H100 NVL", 835.5e12), ("NVIDIA H200 NVL", 835.5e12), ("NVIDIA H200", 989.4e12),
                       ("NVIDIA A100-SXM4-80GB", 312e12), ("NVIDIA RTX A1000", None)):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, name=name: name)
        sheet = hardware._datasheet(torch.device("cuda"), "bf16")
        assert (sheet and sheet.flops) == (bf16 and pytest.approx(bf16)), name
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some Future GPU")
    assert hardware._datasheet(torch.device("cuda"), "bf16") is None  # measured instead


def test_a_gpus_measured_fp32_peak_is_kept_apart_under_tf32(monkeypatch):
    # a GPU missing from the datasheet table: a TF32 run's measured peak (tensor cores) was stored as "fp32", and
    # judged a later train.tf32 = false run's MFU (or the other way)
    monkeypatch.setattr(hardware, "describe_device", lambda device: "Some Future GPU")
    monkeypatch.setattr(hardware, "_datasheet", lambda device, precision: None)
    monkeypatch.setattr(hardware, "_MEMO", {})
    rates = {True: 400e12, False: 50e12}
    for tf32 in (True, False):
        monkeypatch.setattr(hardware, "tf32_matmuls", lambda tf32=tf32: tf32)
        monkeypatch.setattr(hardware, "gemm_flops", lambda *a, tf32=tf32, **k: rates[tf32])
        peak = hardware.peak_flops(torch.device("cuda"), "fp32")
        assert peak.flops == rates[tf32] and ("tf32" if tf32 else "fp32") in peak.source
    stored = json.loads((cache_root() / "peak_flops.json").read_text())
    assert stored["Some Future GPU tf32"]["flops"] == 400e12 and stored["Some Future GPU fp32"]["flops"] == 50e12


def test_a_run_puts_the_tf32_switches_back_as_it_found_them(monkeypatch):
    # a CUDA run left TF32 on for its whole process: a benchmark's later fp32 phase, or a notebook's fp32 inference
    # after a finetune, ran TF32
    from bertkit.train import loop

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True
        assert loop._set_tf32(torch.device("cuda"), "fp32", True) is True
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        loop._restore_tf32()
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, True)
        assert loop._set_tf32(torch.device("cpu"), "fp32", True) is False  # a CPU run: nothing set, nothing kept
        loop._restore_tf32()
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, True)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_the_tf32_reader_follows_torchs_switch():
    before = torch.backends.cuda.matmul.allow_tf32
    try:  # set and restored through torch's public API
        torch.backends.cuda.matmul.allow_tf32 = True
        assert hardware.tf32_matmuls() is True
        torch.backends.cuda.matmul.allow_tf32 = False
        assert hardware.tf32_matmuls() is False
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _fake_peaks(monkeypatch, bf16: float, fp32: float):
    monkeypatch.setattr(hardware, "peak_flops",
                        lambda device, precision: hardware.Peak({"bf16": bf16, "fp32": fp32}[precision], "test"))


def test_a_precision_no_command_takes_is_refused_through_the_api_too():
    """The CLI's options allow auto|fp32|bf16|fp16; an API caller's "banana" ran "as configured"."""
    from bertkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"precision: 'banana' is not allowed \(allowed: auto\|fp32\|bf16\|fp16\)"):
        hardware.resolve_precision("banana", "cpu")
    assert hardware.resolve_precision("fp32", "cpu").precision == "fp32"


def test_auto_is_fp32_on_a_cpu_without_native_bf16_and_probes_nothing(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx2", "fma"})
    monkeypatch.setattr(hardware, "peak_flops", lambda *a: pytest.fail("no probe where the flags say emulated"))
    choice = hardware.resolve_precision("auto", "cpu")
    assert choice.precision == "fp32" and "without native bf16" in choice.reason


def test_auto_is_bf16_only_where_the_cpu_has_it_and_the_gemm_confirms_it(monkeypatch):
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    _fake_peaks(monkeypatch, bf16=4e12, fp32=1e12)
    choice = hardware.resolve_precision("auto", "cpu")
    assert choice.precision == "bf16" and "avx512_bf16" in choice.reason and "4.0x" in choice.reason
    _fake_peaks(monkeypatch, bf16=1.2e12, fp32=1e12)  # flagged, but not faster in practice
    choice = hardware.resolve_precision("auto", "cpu")
    assert choice.precision == "fp32" and "only 1.2x" in choice.reason


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_an_explicit_precision_is_kept(monkeypatch, precision):
    monkeypatch.setattr(hardware, "peak_flops", lambda *a: pytest.fail("nothing to measure"))
    assert hardware.resolve_precision(precision, "cpu").precision == precision


def test_auto_on_a_gpu_is_bf16_from_ampere_on(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert hardware.resolve_precision("auto", "cuda").precision == "bf16"
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))  # emulates bf16
    choice = hardware.resolve_precision("auto", "cuda")
    assert choice.precision == "fp32" and "below 8.0" in choice.reason


def test_autocast_runs_matrix_products_at_the_chosen_precision():
    a = torch.randn(8, 8)
    with hardware.autocast("cpu", "bf16"):
        assert (a @ a).dtype == torch.bfloat16
    with hardware.autocast("cpu", "fp32"):
        assert (a @ a).dtype == torch.float32
