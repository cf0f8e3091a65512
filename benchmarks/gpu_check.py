"""The Python half of benchmarks/gpu_check.sh: the --smoke data root, and the one summary table.

    python benchmarks/gpu_check.py --tiny-data DIR              # a tiny data root cut from the real one (--smoke)
    python benchmarks/gpu_check.py --work WORK [--out OUT]      # the table of a gpu_check.sh run's WORK folder

The table has one row per measured figure (ROWS), each with the step's status (OK, FAILED, TIMEOUT, SKIPPED and
why) and what it measured, read from the step's log, JSON or run directory. It is printed, and with --out written
to OUT/gpu_check.md (table, machine, commands), OUT/gpu_check.json (the rows) and OUT/gpu_check.log (every step's
log). Exits 1 when a row FAILED or timed out.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import importlib
import json
import platform
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

# (row label, the step that produces it); `bare-*` steps give one row per precision
ROWS = [
    ("dependencies (datasets, seqeval, faiss)", "deps"),
    ("CUDA tests (pytest -m gpu)", "cuda-tests"),
    ("bare MLM step, eager, bf16, vs BertForMaskedLM", "bare-eager"),
    ("bare MLM step, eager, fp32, vs BertForMaskedLM", "bare-eager"),
    ("bare MLM step, compiled, bf16", "bare-compiled"),
    ("bare MLM step, compiled, fp32", "bare-compiled"),
    ("issue 33's goal: BERT-base (vocab 30522), bf16, compiled, batch 512, dropout 0, vs BertForMaskedLM "
     "(goal: MFU >= 40%, >= 1.6x)", "goal"),
    ("bertkit pretrain, time budget", "pretrain"),
    ("training loop vs bare step (loop_overhead.py)", "loop"),
    ("embed vs sentence-transformers", "embed"),
    ("bertkit demo, time budget per stage", "demo"),
    ("lever: bare MLM step, compiled, bf16, batch 256 (32k tokens/step)", "bare-b256"),
    ("bare MLM step at the mini shape (4x256), bf16, eager and compiled", "bare-mini"),
    ("lever: masked tokens counted on the host (positions), then bucketed to 128 (compiled, batch 256)",
     "lever-select"),
    ("lever: three q/k/v matrix products instead of one (bertkit's GPU default; compiled, positions, batch 256)",
     "lever-qkv"),
    ("lever: CUDA graphs (compile mode reduce-overhead, bucketed), base batch 256 and mini", "lever-graphs"),
    ("lever: bertkit embed --compile, static shapes (buckets: auto's choice on a GPU) vs sentence-transformers "
     "(each call compiles, from the warm-up's on-disk cache)", "lever-embed"),
    ("lever: bertkit embed --compile, one dynamic-shape graph, compiled in-process, vs sentence-transformers",
     "lever-embed-dynamic"),
    ("lever: batch 512 x 128 (64k tokens/step; compiled, bucketed) vs BertForMaskedLM", "lever-b512"),
    ("lever: compile mode max-autotune-no-cudagraphs, batch 512, positions, vs BertForMaskedLM", "lever-autotune"),
    ("lever: vocabulary 30522 (BERT's) vs 30528 (a multiple of 64), compiled, batch 512, vs BertForMaskedLM",
     "lever-vocab"),
    ("lever: dropout 0.1 (BERT's) vs 0 (bertkit's budget recipes), compiled, batch 512, vs BertForMaskedLM; "
     "kernel time by kind", "lever-dropout"),
    ("lever: batch 1024 x 128 (128k tokens/step), dropout 0, compiled, positions, vs BertForMaskedLM", "lever-b1024"),
    ("lever: LayerNorms in bf16 (a bf16 residual stream) vs fp32, the goal's case (vocab 30522, batch 512, dropout "
     "0), bertkit alone", "lever-norm"),
    ("lever: inductor's coordinate-descent tuning of the fused kernels, the goal's case with bf16 LayerNorms, bertkit "
     "alone (untuned: lever-norm's autocast line)", "lever-tuning"),
    ("bertkit pretrain, train.batch_size = auto, compile on, time budget", "pretrain-auto"),
    ("bertkit pretrain, mini shape, batch 128, compile on, train.cuda_graphs = true", "pretrain-graphs"),
    ("where a step's time goes: bare step vs the loop's (loop_overhead.py --profile)", "loop-profile"),
    ("where a step's time goes with CUDA graphs: mini shape, batch 128, compiled (loop_overhead.py --profile)",
     "loop-graphs"),
]
THROUGHPUT = re.compile(
    r"^(?P<case>\d+x\d+) \((?P<params>[\d.]+)M\) (?P<precision>\w+) batch (?P<batch>\d+x\d+) (?P<device>\w+): "
    r"(?P<who>bertkit[^;]*?) (?P<ours>[\d,]+) tok/s, transformers (?P<hf>[\d,]+) tok/s, "
    r"ratio (?P<ratio>[\d.]+); .*?MFU (?P<mfu>\d+)% of (?P<peak>[\d.e+]+) TFLOP/s"
    r"(?:.*?compile cost (?P<cost>-?[\d.]+) s)?", re.MULTILINE)
LEVER = re.compile(  # any pretrain_throughput.py line, levers and --no-peer included
    r"^(?P<case>\d+x\d+) \([\d.]+M\)(?: vocab (?P<vocab>\d+))? (?P<precision>\w+) batch (?P<batch>\d+x\d+) \w+: "
    r"(?P<who>bertkit[^;]*?) (?P<ours>[\d,]+) tok/s, (?:transformers (?P<hf>[\d,]+) tok/s, ratio (?P<ratio>[\d.]+)|"
    r"transformers (?:not run|out of device memory)[^;]*); .*?MFU (?P<mfu>\d+)%"
    r"(?:[^\n]*?compile cost (?P<cost>-?[\d.]+) s)?[^\n]*"
    r"(?:\n  profile: (?P<profile>[^\n]*))?", re.MULTILINE)
PROFILED = re.compile(r"^(bare step|bertkit pretrain's loop): \d+ steps, wall ([\d.]+) ms/step, device kernels "
                      r"([\d.]+) ms/step \((\d+)% busy", re.MULTILINE)
FIT = re.compile(r"train\.max_time (\S+): ([\d,]+) steps fit the budget")
PYTEST = re.compile(r"^(?:=+ )?((?:\d+ (?:passed|failed|skipped|errors?|deselected|xfailed|xpassed)(?:, )?)+)"
                    r"(?: in [\d.]+s)?", re.MULTILINE)


def tiny_data(dest: Path) -> None:
    """A data root of a few hundred lines of each dataset the check reads (wikitext2, stsb, sst2, imdb), cut from
    the real root: the --smoke steps run the real code paths on it in seconds."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bertkit.paths import find_dataset

    def head(source: Path, target: Path, lines: int) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(source, encoding="utf-8") as f:
            target.write_text("".join(line for _, line in zip(range(lines), f)), encoding="utf-8")

    head(find_dataset("wikitext2") / "wiki.test.raw", dest / "wikitext2" / "wiki.test.raw", 800)
    for split, lines in (("train", 400), ("dev", 200), ("test", 200)):
        head(find_dataset("stsb") / f"sts-{split}.csv", dest / "stsb" / f"sts-{split}.csv", lines)
    head(find_dataset("sst2") / "train.tsv", dest / "sst2" / "train.tsv", 1500)
    head(find_dataset("sst2") / "dev.tsv", dest / "sst2" / "dev.tsv", 200)
    (dest / "imdb").mkdir(parents=True, exist_ok=True)
    with gzip.open(find_dataset("imdb") / "train.jsonl.gz", "rt", encoding="utf-8") as f:
        reviews = [line for _, line in zip(range(1000), f)]
    with gzip.open(dest / "imdb" / "train.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(reviews)
    print(f"wrote a tiny data root in {dest}")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_status(work: Path) -> dict[str, dict]:
    """status.tsv: name → {status, seconds, detail} (the command, or why it was skipped)."""
    steps = {}
    for line in _read(work / "status.tsv").splitlines():
        name, status, seconds, detail = (line.split("\t") + ["", "", ""])[:4]
        steps[name] = {"status": status, "seconds": int(seconds or 0), "detail": detail}
    return steps


def budget_of(run: Path) -> dict:
    """A budgeted run's steps and time from its latest checkpoint's state.json (the loop's state) and results.json:
    done and planned steps, training seconds and the budget's seconds."""
    states = sorted(run.glob("checkpoints/step-*/state.json"), key=lambda p: int(p.parent.name.split("-")[-1]))
    state = _json(states[-1]) if states else None
    results = _json(run / "results.json") or {}
    done = results.get("step", results.get("steps", (state or {}).get("step")))
    return {"done": done, "planned": (state or {}).get("total_steps"), "elapsed": (state or {}).get("elapsed"),
            "budget": (state or {}).get("max_seconds"), "precision": results.get("precision")}


def _budget_text(b: dict) -> str:
    text = f"{b['done']:,}" if isinstance(b["done"], int) else "?"
    if isinstance(b["planned"], int):
        text += f"/{b['planned']:,} steps"
    else:
        text += " steps"
    if b["elapsed"] and b["budget"]:
        text += f", {b['elapsed'] / b['budget']:.0%} of {b['budget']:g} s"
    return text


def windows(run: Path) -> list[dict]:
    """The train windows of a run's metrics.jsonl."""
    records = []
    for line in _read(run / "metrics.jsonl").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("kind") == "train":
            records.append(record)
    return records


def importable(name: str) -> bool:
    """Whether `import name` works here (found, and its own imports work: e.g. datasets with the pyarrow there)."""
    try:
        importlib.import_module(name)
        return True
    except Exception:  # ImportError, or whatever a half-compatible package raises while importing
        return False


def deps_row(step: dict) -> str:
    """Which of the three optional modules import here, and what the deps step did."""
    found = {name: importable(name) for name in ("datasets", "seqeval", "faiss")}
    # the image's own pyarrow and fsspec: a carried datasets asks for versions of them (5.2: pyarrow >= 24)
    versions = [f"{name} {version}" for name in ("pyarrow", "fsspec") if (version := _version(name))]
    return (", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in found.items()) + f" ({step['detail']})"
            + (f"; {', '.join(versions)}" if versions else ""))


def _version(name: str) -> str | None:
    """An installed distribution's version, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def tests_row(log: str) -> str | None:
    """pytest's summary line ('11 passed, 4 failed'), or None."""
    found = PYTEST.findall(log)
    return found[-1] if found else None


def throughput_rows(log: str, eager_log: str) -> dict[str, str]:
    """precision → result text, from pretrain_throughput.py's lines (compiled ones compared with the eager log)."""
    eager = {m["precision"]: _number(m["ours"]) for m in THROUGHPUT.finditer(eager_log) if "compiled" not in m["who"]}
    rows = {}
    for m in THROUGHPUT.finditer(log):
        ours, hf = _number(m["ours"]), _number(m["hf"])
        text = f"{m['case']} batch {m['batch']} {m['device']}: "
        if "compiled" in m["who"]:
            base = eager.get(m["precision"])
            vs_eager = f" = {ours / base:.2f}x eager" if base else ""
            text += (f"compiled {ours:,.0f} tok/s{vs_eager}, {ours / hf:.2f}x BertForMaskedLM ({hf:,.0f}), MFU "
                     f"{m['mfu']}% of {float(m['peak']):g} TFLOP/s; compile cost {m['cost']} s")
            text += break_even(m, base)
        else:
            text += (f"bertkit {ours:,.0f} tok/s vs BertForMaskedLM {hf:,.0f} ({m['ratio']}x), MFU {m['mfu']}% of "
                     f"{float(m['peak']):g} TFLOP/s")
        rows[m["precision"]] = text
    return rows


def break_even(m: re.Match, eager_tps: float | None) -> str:
    """'; break-even N steps (S s)': the steps (and eager seconds) after which a compiled run has won back its
    compile cost, from one compiled THROUGHPUT line and the eager tokens/s of the same shape; '' if it never pays."""
    ours = _number(m["ours"])
    if not eager_tps or not m["cost"] or ours <= eager_tps:
        return ""
    rows, seq = (int(x) for x in m["batch"].split("x"))
    saved = rows * seq / eager_tps - rows * seq / ours  # seconds each compiled step saves
    steps = float(m["cost"]) / saved
    return f"; break-even {steps:,.0f} steps ({steps * rows * seq / eager_tps:.0f} s eager)"


def _mini_rows(log: str) -> dict[str, str]:
    """The bare-mini step's eager and compiled lines as one row per precision: 'eager …; compiled …'."""
    eager_log = "\n".join(line for line in log.splitlines() if "compiled" not in line)
    compiled_log = "\n".join(line for line in log.splitlines() if "compiled" in line)
    eager, compiled = throughput_rows(eager_log, ""), throughput_rows(compiled_log, eager_log)
    rows = {}
    for precision in set(eager) | set(compiled):
        parts = [eager.get(precision), compiled.get(precision)]
        if parts[0] and parts[1]:
            parts[1] = parts[1].split(": ", 1)[1]  # the shape is said once
        rows[precision] = "; ".join(part for part in parts if part)
    return rows


def lever_row(log: str) -> str | None:
    """Every pretrain_throughput.py line of a lever step, condensed: 'case batch who: tok/s, MFU[, ratio]'."""
    found = []
    for m in LEVER.finditer(log):
        vocab = f" vocab {m['vocab']}" if m["vocab"] else ""
        who = m["who"].removeprefix("bertkit").strip(" ,") or "eager"
        text = f"{m['case']}{vocab} batch {m['batch']} {who}: {_number(m['ours']):,.0f} tok/s, MFU {m['mfu']}%"
        if m["ratio"]:
            text += f", {m['ratio']}x BertForMaskedLM ({_number(m['hf']):,.0f})"
        elif "out of device memory" in m.group(0):
            text += ", BertForMaskedLM out of device memory at this batch"
        if m["cost"]:  # what a compile-time lever costs beside what it buys
            text += f", compile {m['cost']} s"
        if m["profile"]:
            text += f" (profile: {m['profile']})"
        found.append(text)
    return "; ".join(found) or None


def profile_row(log: str) -> str | None:
    """loop_overhead.py --profile's summary lines: wall and kernel ms per step, busy share; the loop/bare ratio."""
    parts = [f"{who}: {wall} ms/step wall, {busy} ms kernels ({share}% busy)"
             for who, wall, busy, share in PROFILED.findall(log)]
    if m := re.search(r"ratio CLI/bare ([\d.]+)", log):
        parts.append(f"loop/bare {m.group(1)} unprofiled")
    return "; ".join(parts) or None


def pretrain_row(work: Path, log: str, name: str = "pretrain") -> str | None:
    """The budgeted pretraining: shape, done vs planned steps, share of the budget, steady tokens/s, MFU."""
    run = work / "runs" / name
    config = _json(run / "config.json") or {}
    model, train = config.get("model", {}), config.get("train", {})
    b = budget_of(run)
    if b["done"] is None:
        return None
    fits = FIT.findall(log)
    kept = windows(run)[1:]  # the first window holds the warm-up
    rates = [w["tokens_per_s"] for w in kept]
    mfu = [w["mfu"] for w in kept if "mfu" in w]
    compiled = re.search(r"torch\.compile: ([^\n;]+)", log)
    text = (f"{model.get('n_layers')}x{model.get('d_model')} vocab {model.get('vocab_size', 0):,}, batch "
            f"{train.get('batch_size')}x{(config.get('data') or {}).get('block_size')}, {b['precision']}: "
            f"{_budget_text(b)} (done/planned, share of the budget trained; goal 90-105%)")
    if fits:
        text += f"; first fit {fits[0][1]} steps"
    if rates:
        text += f"; {statistics.median(rates):,.0f} tok/s (median window after the first; last {rates[-1]:,.0f})"
    if mfu:
        text += f", MFU {statistics.median(mfu):.1%}"
    if compiled:
        text += f"; torch.compile {compiled.group(1).strip()}"
    return text


def loop_row(work: Path) -> str | None:
    """loop_overhead.py's --json: the bare step, the CLI loop and their ratio."""
    data = _json(work / "loop.json")
    if not data:
        return None
    return (f"{data['layers']}x{data['width']} batch {data['batch_size']}x{data['block_size']} {data['precision']}: "
            f"bare {data['bare_tokens_per_s']:,.0f} tok/s, CLI {data['cli_tokens_per_s']:,.0f} (wall "
            f"{data['cli_wall_tokens_per_s']:,.0f}): ratio {data['ratio']:.2f} (goal >= 0.90; wall "
            f"{data['wall_ratio']:.2f}, medians {data['median_ratio']:.2f}), MFU {data['cli_mfu']:.1%}")


def embed_row(work: Path, name: str = "embed.json", log: str = "") -> str | None:
    """embed_throughput.py's --json: both libraries' sentences/s and their ratio; where it never came (the step ran
    out of time), the repeats its log printed."""
    data = _json(work / name)
    if not data:
        repeats = re.findall(r"repeat (\d+): bertkit embed ([\d,]+) sentences/s, sentence-transformers encode "
                             r"([\d,]+) sentences/s", log)
        return None if not repeats else "; ".join(f"repeat {r}: bertkit embed {a}/s vs sentence-transformers {b}/s"
                                                  for r, a, b in repeats) + " (the repeats done)"
    command = "bertkit embed --compile" if data.get("compile") else "bertkit embed"
    if data.get("compile_shapes"):
        command += f" --compile-shapes {data['compile_shapes']}"
    return (f"{data['weights']}, {data['precision']}, {data['sentences']:,} STS-B sentences: {command} "
            f"{data['bertkit_per_s']:,.0f}/s vs sentence-transformers {data['st_per_s']:,.0f}/s, "
            f"{data['ratio']:.2f}x (min cosine {data['min_cosine']:.5f})")


def demo_row(work: Path, log: str) -> str | None:
    """The demo: every training stage's done/planned steps and budget share, then its scores (from its output)."""
    demo = work / "runs" / "demo"
    parts = []
    stages = [(name, budget_of(demo / folder)) for name, folder in
              (("pretrain", "pretrain"), ("classifier", "classifier"), ("SBERT", "sentence"))]
    done = [f"{name} {_budget_text(b)}" for name, b in stages if b["done"] is not None]
    if done:
        parts.append("; ".join(done))
    if m := re.search(r"validation masked-token accuracy ([\d.]+)", log):
        parts.append(f"MLM val accuracy {float(m.group(1)):.1%}")
    if m := re.search(r"(SST-2 dev|sample) accuracy ([\d.]+)% on ([\d,]+) sentences \(always the majority label: "
                      r"([\d.]+)%\)", log):
        parts.append(f"{m.group(1)} accuracy {m.group(2)}% (majority class {m.group(4)}%)")
    if m := re.search(r"Spearman(?: \(cosine similarity\))?: ([\d.]+) before(?: SBERT training)?, ([\d.]+) after",
                      log):
        parts.append(f"STS-B test Spearman {m.group(1)} -> {m.group(2)}")
    return "; ".join(parts) or None


def machine() -> str:
    """The machine in one line: bertkit's device description, torch, the driver where nvidia-smi answers."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    try:
        import torch

        from bertkit.hardware import describe_device

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        text = describe_device(device)
        text += ("" if torch.__version__ in text else f", torch {torch.__version__}") + \
            f", Python {platform.python_version()}"
    except Exception as exc:  # the summary must come out whatever broke
        text = f"(torch/bertkit not importable: {exc})"
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False)
        if smi.returncode == 0 and smi.stdout.strip():
            text += f", {smi.stdout.strip().splitlines()[0]} (driver)"
    return text


INDUCTOR_MODULE = re.compile(r"/[a-z0-9]{2}/c[a-z0-9]{20,}\.py$")  # inductor's cache: DIR/xy/cxy....py
STACK_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)', re.MULTILINE)
CHECKOUT = Path(__file__).resolve().parents[1]


def _ours(path: str) -> bool:
    """Whether a stack frame's file is bertkit's or the benchmarks' own (not an installed package)."""
    resolved = Path(path).resolve()
    return "site-packages" not in resolved.parts and any(
        resolved.is_relative_to(CHECKOUT / part) for part in ("bertkit", "benchmarks"))


def stuck_at(log: str) -> str | None:
    """Where a step's process was when its limit's SIGABRT made faulthandler write the stacks: of the dumps in the
    log (worker processes write theirs too), the one whose current thread runs the step's own script; its
    innermost frame and the innermost of bertkit's or the benchmarks' own, as 'file:line in function'."""
    best = None
    for dump in log.split("Fatal Python error: Aborted")[1:]:
        if "Current thread" not in dump:
            continue
        block = re.split(r"\n\s*\n|\nThread 0x", dump.split("Current thread", 1)[1], maxsplit=1)[0]
        frames = [(m["file"], f"{m['file']}:{m['line']} in {m['func']}") for m in STACK_FRAME.finditer(block)]
        if not frames:
            continue
        ours = next((text for file, text in frames if _ours(file)), None)
        where = frames[0][1] if ours in (None, frames[0][1]) else f"{frames[0][1]}, called from {ours}"
        module = next((f"{Path(m['file']).name}:{m['line']}" for m in STACK_FRAME.finditer(block)
                       if INDUCTOR_MODULE.search(m["file"])), None)
        if module is not None and any(f.endswith(("in make_cubin", "in triton")) for _, f in frames):
            where += f", compiling the kernel at inductor's {module}"  # its source: stuck/ in extras.tar.gz
        elif module is not None:  # parallel compile: the module waits on its workers' kernels
            where += f", waiting on inductor's compile workers at {module}"
        if frames[-1][1].endswith("in <module>") and _ours(frames[-1][0]):
            return where  # the step's own process: its script is the outermost frame
        best = best or where
    return best


def build_rows(work: Path) -> list[dict]:
    """Every row of ROWS with its status and result, from the steps' status, logs, JSON files and run folders."""
    steps = read_status(work)
    logs = {name: _read(work / "logs" / f"{name}.log") for name in steps}
    eager, compiled = (throughput_rows(logs.get(name, ""), logs.get("bare-eager", ""))
                       for name in ("bare-eager", "bare-compiled"))
    # bare-b256: no eager line at batch 256 to compare with; bare-mini: its eager and compiled lines in one log
    extra = {"bare-b256": throughput_rows(logs.get("bare-b256", ""), ""),
             "bare-mini": _mini_rows(logs.get("bare-mini", ""))}
    rows = []
    for label, name in ROWS:
        step = steps.get(name)
        if step is None:
            rows.append({"row": label, "status": "not run", "result": "(not among --only)", "seconds": 0})
            continue
        status, log = step["status"], logs.get(name, "")
        if status == "SKIPPED":
            rows.append({"row": label, "status": "SKIPPED", "result": step["detail"], "seconds": 0})
            continue
        if name == "deps":
            result = deps_row(step)
        elif name == "cuda-tests":
            result = tests_row(log)
        elif name == "lever-embed":
            result = embed_row(work, "embed-compiled.json", log)
        elif name == "lever-embed-dynamic":
            result = embed_row(work, "embed-dynamic.json", log)
        elif name.startswith("lever-") or name == "goal":
            result = lever_row(log)
        elif name in ("loop-profile", "loop-graphs"):
            result = profile_row(log)
        elif name.startswith("bare-"):
            found = extra[name] if name in extra else eager if name == "bare-eager" else compiled
            result = found.get("bf16" if "bf16" in label else "fp32")
            if result is not None and status != "OK":
                status = "OK"  # this precision's line came out before the step failed or ran out of time
        elif name in ("pretrain", "pretrain-auto", "pretrain-graphs"):
            result = pretrain_row(work, log, name)
            if result and (m := re.search(r"train\.batch_size auto: (\d+) rows", log)):
                result += f"; batch_size auto chose {m.group(1)} rows"
            if result and (m := re.search(r"CUDA graphs: (on|off) \(([^)]*)\)", " ".join(log.split()))):
                result += f"; CUDA graphs {m.group(1)} ({m.group(2)})"
        elif name == "loop":
            result = loop_row(work)
        elif name == "embed":
            result = embed_row(work)
        else:
            result = demo_row(work, log)
            if result is not None and status != "OK":
                result = f"(partial) {result}"
        where = stuck_at(log) if result is None and status.startswith("TIMEOUT") else None
        if where is not None:
            result = f"{where} when its time ran out (every thread's stack: its log)"
        elif result is None:
            tail = [line for line in log.splitlines() if line.strip()][-1:] or ["(empty log)"]
            status = status if status != "OK" else "FAILED (no result in its output)"
            result = tail[0][:200]
        elif status != "OK" and name not in ("demo",):
            result = f"{result} ({status})"
        rows.append({"row": label, "status": status, "result": result, "seconds": step["seconds"]})
    return rows


def table(rows: list[dict]) -> str:
    """The rows as one Markdown table."""
    lines = ["| check | status | result | s |", "|---|---|---|---|"]
    for r in rows:
        result = r["result"].replace("|", "/")
        lines.append(f"| {r['row']} | {r['status']} | {result} | {r['seconds']} |")
    return "\n".join(lines)


def report(work: Path, out: Path | None, budget: int, smoke: bool) -> int:
    """Print the summary; with `out`, write gpu_check.md, .json and .log there. 1 when a row failed."""
    rows = build_rows(work)
    steps = read_status(work)
    spent = sum(s["seconds"] for s in steps.values())
    when = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    head = (f"gpu_check{' --smoke (tiny sizes, CPU)' if smoke else ''} on {machine()}; {when}; steps took "
            f"{spent} s of the {budget} s budget")
    text = f"{head}\n\n{table(rows)}\n"
    print("\n" + text, flush=True)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        commands = "\n".join(f"- `{name}`: {s['status']} in {s['seconds']} s: `{s['detail']}`"
                             for name, s in steps.items())
        (out / "gpu_check.md").write_text(f"{text}\nSteps:\n\n{commands}\n", encoding="utf-8")
        (out / "gpu_check.json").write_text(json.dumps({"machine": head, "rows": rows, "steps": steps}, indent=2)
                                            + "\n", encoding="utf-8")
        with open(out / "gpu_check.log", "w", encoding="utf-8") as log:
            for name, s in steps.items():
                log.write(f"\n===== {name}: {s['status']} in {s['seconds']} s: {s['detail']}\n")
                log.write(_read(work / "logs" / f"{name}.log"))
    bad = [r for r in rows if r["status"].startswith(("FAILED", "TIMEOUT"))]
    return 1 if bad else 0


def main() -> None:
    """--tiny-data DIR, or --work WORK [--out OUT]."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny-data", type=Path, default=None, help="write the --smoke data root here")
    parser.add_argument("--work", type=Path, default=None, help="a gpu_check.sh run's work folder")
    parser.add_argument("--out", type=Path, default=None, help="also write gpu_check.md/.json/.log here")
    parser.add_argument("--budget", type=int, default=0, help="the run's overall budget in seconds (for the header)")
    parser.add_argument("--smoke", action="store_true", help="the run was --smoke")
    args = parser.parse_args()
    if args.tiny_data is not None:
        tiny_data(args.tiny_data)
    if args.work is not None:
        sys.exit(report(args.work, args.out, args.budget, args.smoke))


if __name__ == "__main__":
    main()
