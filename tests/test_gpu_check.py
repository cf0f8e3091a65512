"""`bash benchmarks/gpu_check.sh --smoke`: the GPU check's every step at tiny sizes on the CPU, so that the script a
CUDA machine runs once cannot rot between the sessions that have one."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertkit.errors import BertkitError
from bertkit.paths import find_dataset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_check import ROWS, THROUGHPUT, break_even  # noqa: E402


@pytest.mark.slow
@pytest.mark.long
@pytest.mark.data
def test_the_smoke_run_fills_every_row_of_the_table_and_nothing_fails(tmp_path):
    try:
        for name in ("wikitext2", "stsb", "sst2", "imdb"):
            find_dataset(name)
    except BertkitError:
        pytest.skip("the --smoke data root is cut from ../shared/data, which is not here")
    # one thread in each of its processes, as every test beside another worker has (tests/conftest.py): at these
    # sizes a second thread buys nothing and took 40 s of CPU time from the other worker
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHON": sys.executable, "OUT": str(tmp_path / "out"),
           "TMPDIR": str(tmp_path), "GPU_CHECK_BUDGET": "540", "OMP_NUM_THREADS": "1"}  # 3 minutes alone
    env.pop("BERTKIT_DATA", None)
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--smoke"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, check=False)
    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| check | status |"), done.stdout + done.stderr
    for label, _ in ROWS:
        assert any(line.startswith(f"| {label} |") for line in table), f"no row {label!r}:\n{done.stdout}"
    rows = json.loads((tmp_path / "out" / "gpu_check.json").read_text())["rows"]
    assert [r["row"] for r in rows] == [label for label, _ in ROWS]
    bad = [r for r in rows if r["status"] != "OK"]
    assert not bad, "\n".join(f"{r['row']}: {r['status']}: {r['result']}" for r in bad) + "\n" + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert {"gpu_check.md", "gpu_check.json", "gpu_check.log"} <= {p.name for p in (tmp_path / "out").iterdir()}
    # every extra file in one archive: the device tool brings back at most 8 files, and the summary must be there
    import tarfile

    assert len(list((tmp_path / "out").iterdir())) <= 8
    with tarfile.open(tmp_path / "out" / "extras.tar.gz") as archive:
        assert "./profile.txt" in archive.getnames()  # loop-profile's tables


def test_break_even_is_the_compile_cost_over_the_time_each_compiled_step_saves():
    # the H200 line of 2026-11-27: 128 x 128 tokens a step, eager 418,573 tok/s, compiled 504,363 after 34.5 s
    line = ("12x768 (110.1M) bf16 batch 128x128 cuda: bertkit compiled (inductor) 504,363 tok/s, transformers "
            "405,005 tok/s, ratio 1.25; bertkit 570.2 MFLOP/token = 288 TFLOP/s, MFU 27% of 989 TFLOP/s "
            "(datasheet: NVIDIA H200 bf16); compile cost 34.5 s (first 3 steps)")
    match = THROUGHPUT.search(line)
    saved = 16384 / 418_573 - 16384 / 504_363  # s per step
    steps = 34.5 / saved
    assert break_even(match, 418_573) == f"; break-even {steps:,.0f} steps ({steps * 16384 / 418_573:.0f} s eager)"
    assert "5,182 steps (203 s" in break_even(match, 418_573)
    assert break_even(match, 600_000) == ""  # compiled slower than eager: it never pays
    assert break_even(match, None) == ""


def test_kernels_are_sorted_into_kinds_by_name():
    from step_profile import kind_of

    assert kind_of("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
                   "false, cutlass::bfloat16_t>>") == "attention"  # a CUTLASS template, but attention
    assert kind_of("nvjet_tst_256x128_64x4_2x1_v_bz_coopA_TNN") == "matmul"
    assert kind_of("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64") == "matmul"
    assert kind_of("triton_tem_fused_addmm_gelu_4") == "matmul"  # max-autotune's GEMM templates
    assert kind_of("triton_per_fused_add_native_layer_norm_native_dropout_3") == "fused"
    assert kind_of("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdam>") == "optimiser"
    assert kind_of("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>") == "loss"
    assert kind_of("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>") == "other"


def test_a_lever_row_reads_dropout_cases_profiles_and_a_peer_out_of_memory():
    from gpu_check import lever_row

    log = ("12x768 (110.1M) bf16 batch 512x128 cuda: bertkit compiled (inductor), select positions, dropout 0 "
           "731,000 tok/s, transformers 500,000 tok/s, ratio 1.46; bertkit 570.2 MFLOP/token = 417 TFLOP/s, MFU 42% "
           "of 989 TFLOP/s (datasheet: NVIDIA H200 bf16); compile cost 30.1 s (first 3 steps)\n"
           "  profile: wall 90.00 ms/step, kernels 88.00 ms/step (98% busy), 900 kernels/step; by kind, ms/step: "
           "matmul 60.0 (68%)\n"
           "12x768 (110.1M) bf16 batch 1024x128 cuda: bertkit compiled (inductor), select positions, dropout 0 "
           "740,000 tok/s, transformers out of device memory at this batch; bertkit 570.2 MFLOP/token = 422 "
           "TFLOP/s, MFU 43% of 989 TFLOP/s (datasheet: NVIDIA H200 bf16)\n")
    row = lever_row(log)
    assert row.startswith("12x768 batch 512x128 compiled (inductor), select positions, dropout 0: 731,000 tok/s, "
                          "MFU 42%, 1.46x BertForMaskedLM (500,000), compile 30.1 s (profile: wall 90.00 ms/step, "
                          "kernels 88.00")
    assert row.endswith("12x768 batch 1024x128 compiled (inductor), select positions, dropout 0: 740,000 tok/s, "
                        "MFU 43%, BertForMaskedLM out of device memory at this batch")


def test_the_peer_running_out_of_device_memory_leaves_bertkits_figures_standing(monkeypatch, tmp_path):
    import pretrain_throughput as pt

    def oom(*args):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(pt, "_hf_step", oom)
    line = pt.run_case(1, 64, "fp32", 2, 2, "cpu", pt.Levers(vocab=200, dropout=0.0), warm=1,
                       profile_dir=tmp_path)
    assert "transformers out of device memory at this batch" in line and "dropout 0 " in line
    assert " tok/s" in line and "ratio" not in line
    assert "\n  profile: wall " in line  # a CPU profile: no kernels, the tables in tmp_path
    assert [p.name for p in tmp_path.iterdir()] == ["1x64-v200-b2-fp32-bertkit-dropout-0.txt"]


def test_a_step_that_ran_out_of_time_says_where_its_process_was(tmp_path):
    from gpu_check import build_rows, stuck_at

    inference, script = ROOT / "bertkit" / "inference.py", ROOT / "benchmarks" / "embed_throughput.py"
    worker = ("Fatal Python error: Aborted\n\nCurrent thread 0x00007d (most recent call first):\n"
              "  File \"/usr/lib/python3.12/multiprocessing/queues.py\", line 103 in get\n"
              "  File \"/usr/lib/python3.12/multiprocessing/process.py\", line 108 in run\n\n")
    main = ("Fatal Python error: Aborted\n\nThread 0x00007f (most recent call first):\n"
            f"  File \"{ROOT / 'bertkit' / 'text' / 'prefetch.py'}\", line 5 in run\n\n"
            "Current thread 0x00007e (most recent call first):\n"
            "  File \"/usr/lib/python3.12/threading.py\", line 327 in wait\n"
            "  File \"/x/site-packages/torch/_dynamo/eval_frame.py\", line 9 in _fn\n"
            f"  File \"{inference}\", line 71 in run_sorted\n"
            f"  File \"{script}\", line 191 in <module>\n\n"
            "Thread 0x00007c (most recent call first):\n  File \"/x/y.py\", line 1 in z\n")
    log = "10,000 STS-B sentences, batch 128\n" + worker + main  # a worker's stacks came first
    assert stuck_at(log) == f"/usr/lib/python3.12/threading.py:327 in wait, called from {inference}:71 in run_sorted"
    assert stuck_at("Traceback (most recent call last):\n  File \"a.py\", line 1 in <module>\n") is None
    assert stuck_at(worker) == "/usr/lib/python3.12/multiprocessing/queues.py:103 in get"  # no dump of the step's
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "lever-embed.log").write_text(log)
    (tmp_path / "logs" / "lever-vocab.log").write_text(main)  # an abort of its own: a crash, not the limit
    (tmp_path / "status.tsv").write_text("lever-embed\tTIMEOUT after 90 s\t90\tpython3 embed_throughput.py\n"
                                         "lever-vocab\tFAILED (exit 134)\t9\tpython3 pretrain_throughput.py\n")
    rows = {r["row"].split(":")[1].split(",")[0].strip(): r for r in build_rows(tmp_path) if r["status"] != "not run"}
    embed = next(r for r in rows.values() if r["status"].startswith("TIMEOUT"))
    assert embed["result"] == (f"/usr/lib/python3.12/threading.py:327 in wait, called from {inference}:71 in "
                               "run_sorted when its time ran out (every thread's stack: its log)")
    crash = next(r for r in rows.values() if r["status"] == "FAILED (exit 134)")
    assert "time ran out" not in crash["result"]


MODULE = "cyl5di6xrr3v5tcynspnqeqot43lcclyfqcnmvhdfgksx6xb2y4d.py"  # as inductor names a graph's module


def test_a_stalled_kernel_compile_names_the_kernels_line_in_inductors_module():
    # what the H100 said of `embed --compile` compiled in-process (TORCHINDUCTOR_COMPILE_THREADS=1): ptxas never
    # returned for one kernel; the module's line is where that kernel's source sits (the module is kept in $OUT)
    from gpu_check import stuck_at

    embedding, script = ROOT / "bertkit" / "embedding.py", ROOT / "benchmarks" / "embed_throughput.py"
    log = ("Fatal Python error: Aborted\n\nCurrent thread 0x00007e (most recent call first):\n"
           "  File \"/usr/lib/python3.12/subprocess.py\", line 2011 in _try_wait\n"
           "  File \"/x/site-packages/triton/backends/nvidia/compiler.py\", line 494 in make_cubin\n"
           "  File \"/x/site-packages/torch/_inductor/async_compile.py\", line 483 in triton\n"
           f"  File \"/tmp/torchinductor_root/yl/{MODULE}\", line 391 in <module>\n"
           "  File \"/x/site-packages/torch/_inductor/codecache.py\", line 3764 in load_by_key_path\n"
           f"  File \"{embedding}\", line 89 in <lambda>\n"
           f"  File \"{script}\", line 191 in <module>\n\n")
    assert stuck_at(log) == (f"/usr/lib/python3.12/subprocess.py:2011 in _try_wait, called from {embedding}:89 in "
                             f"<lambda>, compiling the kernel at inductor's {MODULE}:391")
    # with parallel compile workers the module waits on their futures at its end: not a kernel of its own
    waiting = ("Fatal Python error: Aborted\n\nCurrent thread 0x00007e (most recent call first):\n"
               "  File \"/usr/lib/python3.12/threading.py\", line 355 in wait\n"
               "  File \"/x/site-packages/torch/_inductor/async_compile.py\", line 699 in wait\n"
               f"  File \"/cache/yl/{MODULE}\", line 979 in <module>\n"
               f"  File \"{embedding}\", line 89 in <lambda>\n"
               f"  File \"{script}\", line 191 in <module>\n\n")
    assert stuck_at(waiting).endswith(f"in <lambda>, waiting on inductor's compile workers at {MODULE}:979")


def test_fused_qkv_lines_fill_the_bare_step_rows():
    from gpu_check import throughput_rows

    eager = ("12x768 (98.3M) bf16 batch 128x128 cuda: bertkit fused qkv 400,000 tok/s, transformers 380,000 tok/s, "
             "ratio 1.05; bertkit 535.3 MFLOP/token = 214 TFLOP/s, MFU 22% of 989 TFLOP/s (datasheet: NVIDIA H200 "
             "bf16)\n")
    compiled = eager.replace("bertkit fused qkv 400,000", "bertkit compiled (inductor), fused qkv 500,000").replace(
        "bf16)\n", "bf16); compile cost 30.0 s (first 3 steps)\n")
    assert throughput_rows(eager, "")["bf16"].startswith("12x768 batch 128x128 cuda: bertkit 400,000 tok/s vs "
                                                         "BertForMaskedLM 380,000 (1.05x)")
    assert throughput_rows(compiled, eager)["bf16"].startswith("12x768 batch 128x128 cuda: compiled 500,000 tok/s "
                                                               "= 1.25x eager, 1.32x BertForMaskedLM (380,000)")


def test_the_norm_lever_runs_layernorm_in_autocasts_dtype_and_equals_it_within_bf16():
    """lever-norm: bertkit's LayerNorms bf16 in and out under bf16 autocast (a bf16 residual stream), the same
    parameters, nn.LayerNorm exactly outside autocast."""
    from pretrain_throughput import AutocastLayerNorm, autocast_norms

    from bertkit.nn.model import Model
    from conftest import tiny

    model = Model(tiny())
    reference = [m for m in model.modules() if type(m) is torch.nn.LayerNorm]
    states = [m.state_dict() for m in reference]
    assert autocast_norms(model) == len(reference) > 0
    assert all(type(m) is AutocastLayerNorm for m in reference)
    assert all(m.state_dict().keys() == s.keys() for m, s in zip(reference, states))
    norm = reference[0]
    plain = torch.nn.LayerNorm(32, eps=norm.eps)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    plain.load_state_dict(norm.state_dict())
    x = torch.randn(2, 5, 32) * 3 + 1
    assert torch.equal(norm(x), plain(x))  # outside autocast: nn.LayerNorm
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, high = norm(x), plain(x)
    assert low.dtype == torch.bfloat16 and high.dtype == torch.float32  # autocast keeps LayerNorm in fp32
    torch.testing.assert_close(low.float(), high, atol=0.05, rtol=0.02)  # bf16 input and output rounding


def test_inductor_settings_name_real_settings_and_hold_while_their_case_runs_only(monkeypatch):
    """lever-tuning: `--inductor-config KEY=VALUE,...` names torch._inductor.config settings (dotted for its
    sub-configs) with Python-literal values (tuples and lists too), 'none' the defaults; anything else is an error
    naming it; `run_case` holds the settings while its case runs (and compiles) and undoes them after it."""
    import torch._inductor.config as inductor
    import pretrain_throughput as pt

    pairs = pt.inductor_settings(" coordinate_descent_tuning = True, triton.cudagraphs=False")
    assert pairs == (("coordinate_descent_tuning", True), ("triton.cudagraphs", False))
    # a value may hold commas (a tuple or list): items split only where the next KEY= starts
    assert pt.inductor_settings("multi_kernel_hints=[64, 128],cuda.cutlass_dynamic_cluster_shape=(2, 1, 1)") == (
        ("multi_kernel_hints", [64, 128]), ("cuda.cutlass_dynamic_cluster_shape", (2, 1, 1)))
    assert pt.inductor_settings("none") == pt.inductor_settings("") == ()
    for text, words in (("coordinate_descent_tuning", "is not KEY=VALUE"),
                        ("no_such_setting=1", "'no_such_setting' is not a setting"),
                        ("triton=1", "'triton' is not a setting"),  # a sub-config, not a setting
                        ("patch=1", "'patch' is not a setting"),  # the module's own method
                        ("triton.no_such=1", "'triton.no_such' is not a setting"),
                        ("coordinate_descent_tuning=yes", "coordinate_descent_tuning: 'yes' is not a Python literal")):
        with pytest.raises(ValueError, match=words):
            pt.inductor_settings(text)
    before = inductor.coordinate_descent_tuning
    seen = []
    monkeypatch.setattr(pt, "_timed_case", lambda *args: seen.append(inductor.coordinate_descent_tuning) or "line")
    tuned = pt.inductor_settings(f"coordinate_descent_tuning={not before}")
    levers = pt.Levers(compile_backend="inductor", inductor=tuned)
    assert pt.run_case(2, 32, "fp32", 1, 2, "cpu", levers) == "line"
    assert pt.run_case(2, 32, "fp32", 1, 2, "cpu", pt.Levers(compile_backend="inductor")) == "line"
    assert seen == [not before, before] and inductor.coordinate_descent_tuning is before
    assert f"inductor coordinate_descent_tuning={not before!r}" in levers.label()


def test_an_embed_row_whose_json_never_came_reads_its_repeats(tmp_path):
    # a lever-embed that ran out of time after two repeats reported only a stack, though its figures were printed
    from gpu_check import embed_row

    log = ("10,000 STS-B sentences, batch 128\n  repeat 1: bertkit embed 9,100 sentences/s, sentence-transformers "
           "encode 7,000 sentences/s\n  repeat 2: bertkit embed 9,300 sentences/s, sentence-transformers encode "
           "7,100 sentences/s\nFatal Python error: Aborted\n")
    assert embed_row(tmp_path, "embed-compiled.json", log) == (
        "repeat 1: bertkit embed 9,100/s vs sentence-transformers 7,000/s; repeat 2: bertkit embed 9,300/s vs "
        "sentence-transformers 7,100/s (the repeats done)")
    assert embed_row(tmp_path, "embed-compiled.json", "no repeats") is None
