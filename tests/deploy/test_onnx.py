"""ONNX export (`bertkit export RUN --format onnx [--quantize int8]`) and every inference command on an export
folder: parity with the run for each run kind, int8 at its looser bound, nothing left behind by a failed export,
the same outputs from the CLI, one clear line for every bad input, and no training stack on the way."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="pip install 'bertkit[onnx]'")

from bertkit.config import Config, TaskConfig  # noqa: E402
from bertkit.deploy import export as export_module  # noqa: E402
from bertkit.deploy.export import export_onnx  # noqa: E402
from bertkit.embedding import SentenceEncoder  # noqa: E402
from bertkit.errors import BertkitError  # noqa: E402
from bertkit.inference import TaskModel  # noqa: E402
from bertkit.nn.model import Model  # noqa: E402
from bertkit.run.directory import save_run, write_labels  # noqa: E402
from bertkit.text.tokenizer import save_tokenizer  # noqa: E402
from conftest import cli_error, cli_ok, heads, tiny  # noqa: E402

TEXTS = ["a good film", "the worst thing I have seen this year, and I have seen a lot of bad things", "fine",
         "an actor walks into the room and nobody notices until the lights go out", "yes", "no no no no",
         "the end", "it rained all day in the small town by the sea"] * 5  # 40 texts: batches of 32 + 8
TAGS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


def _task_run(tmp_path, sample_tokenizer, kind: str):
    """A tiny run of `kind` (encoder | classify | regress | ner) with random weights and its labels."""
    folder = tmp_path / "tok"
    save_tokenizer(sample_tokenizer, folder)
    cfg = tiny(vocab_size=400)
    names, labels = {"encoder": (("mlm",), []), "classify": (("classifier",), ["neg", "pos", "neutral"]),
                     "regress": (("classifier",), ["score"]), "ner": (("tagger",), TAGS)}[kind]
    head_config = heads(*names, num_labels=len(labels))
    config = Config(model=cfg, heads=head_config, task=TaskConfig(kind="ner" if kind == "ner" else "classify"))
    run = save_run(tmp_path / kind, Model(cfg, head_config), config, folder / "tokenizer.json")
    if labels:
        write_labels(run, kind, labels)
    return run


@pytest.fixture
def runs(tmp_path, sample_tokenizer):
    return {kind: _task_run(tmp_path, sample_tokenizer, kind) for kind in ("encoder", "classify", "regress", "ner")}


def test_every_kind_exports_and_matches_its_run_through_the_python_api(runs, tmp_path):
    for kind, run in runs.items():
        out = tmp_path / f"{kind}-onnx"
        summary = export_onnx(run, out, say=lambda line: None)
        assert summary["kind"] == kind and summary["parity"]["min_cosine"] >= 0.9999
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["precision"] == "fp32" and manifest["details"]["opset"] == export_module.OPSET
        assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.onnx", "tokenizer.json"]
        if kind == "encoder":
            ours, theirs = SentenceEncoder(out), SentenceEncoder(run, precision="fp32")
            assert ours.onnx is not None and ours.identity == theirs.identity  # fp32: an index of the run serves it
            np.testing.assert_allclose(ours.encode(TEXTS), theirs.encode(TEXTS), atol=1e-5)
            continue
        ours, theirs = TaskModel(out, batch_size=32), TaskModel(run, precision="fp32")
        assert ours.onnx is not None and (ours.kind, ours.labels) == (theirs.kind, theirs.labels)
        if kind == "ner":
            spans = [[(0, 1)] + [(i, i + 1) for i in range(2, 2 * min(4, len(t) // 2), 2)] for t in TEXTS]
            (a, _), (b, _) = ours.tag(TEXTS, spans), theirs.tag(TEXTS, spans)
            assert [tags for tags, _ in a] == [tags for tags, _ in b]
            np.testing.assert_allclose([s for _, scores in a for s in scores], [s for _, scores in b for s in scores],
                                       atol=1e-4)
        else:
            (a, _), (b, _) = ours.classify(TEXTS), theirs.classify(TEXTS)
            key = "score" if kind == "regress" else "label"
            assert [r[key] for r in a] == pytest.approx([r[key] for r in b], abs=1e-3) if kind == "regress" \
                else [r[key] for r in a] == [r[key] for r in b]


def test_an_encoder_without_token_types_exports(tmp_path, sample_tokenizer):
    """type_vocab_size 0: onnxruntime's embedding fusion made a node with an empty segment input that aborted the
    process when the parity check ran it (exit 134, the temporary folder left behind)."""
    save_tokenizer(sample_tokenizer, tmp_path / "tok")
    cfg = tiny(vocab_size=400, type_vocab_size=0)
    run = save_run(tmp_path / "run", Model(cfg, heads("mlm")), Config(model=cfg, heads=heads("mlm")),
                   tmp_path / "tok" / "tokenizer.json")
    code = ("import sys; from pathlib import Path; from bertkit.deploy.export import export_onnx; "
            "print(export_onnx(Path(sys.argv[1]), Path(sys.argv[2]), say=lambda line: None)['parity']['min_cosine'])")
    done = subprocess.run([sys.executable, "-c", code, str(run), str(tmp_path / "onnx")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]  # in a process of its own: an abort would end the test run
    assert float(done.stdout.split()[-1]) >= 0.9999
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    ours, theirs = SentenceEncoder(tmp_path / "onnx"), SentenceEncoder(run, precision="fp32")
    np.testing.assert_allclose(ours.encode(TEXTS[:8]), theirs.encode(TEXTS[:8]), atol=1e-5)


@pytest.mark.parametrize("kind, wrong, fp32, int8", [
    ("regress", lambda r: 0.5 * r, False, False),  # halved: the score vector's cosine is 1.0
    ("regress", lambda r: r + 0.5, False, False),  # shifted half a point on a 0-5 scale: cosine 0.998
    ("regress", lambda r: r + 1e-7, True, True),
    ("classify", lambda r: r[:, ::-1].copy(), False, False),  # every decision flipped, cosine ~0.8-1
    ("classify", lambda r: r + 1e-7, True, True),
])
def test_parity_sees_what_a_cosine_cannot(monkeypatch, kind, wrong, fp32, int8):
    """A regressor's scores halved or shifted, a classifier's decisions flipped: the cosine alone passed them."""
    from bertkit.text.features import Encoded

    rng = np.random.default_rng(0)
    batches = [[Encoded([1, 5, 2], [0, 0, 0])] * n for n in export_module.PROBE_BATCHES]
    shape = 1 if kind == "regress" else 2
    reference = [(rng.uniform(0.5, 4.5, (n, 1)) if shape == 1 else
                  rng.normal(0, 1, (n, 2)) + np.array([[3.0, 0.0]])).astype(np.float32)
                 for n in export_module.PROBE_BATCHES]
    got = iter([wrong(r) for r in reference])

    class Graph:  # the export, as onnxruntime would run it
        def __init__(self, folder, threads=1):
            pass

        def forward(self, ids, mask, types, output):
            return next(got)

    monkeypatch.setattr(export_module, "OnnxModel", Graph)
    result = export_module.parity(None, reference, batches, 0, kind)
    assert (export_module.passes(result, "fp32"), export_module.passes(result, "int8")) == (fp32, int8), result


def test_a_regressor_whose_scores_barely_vary_is_measured_against_their_size(monkeypatch):
    """An early checkpoint scores every text ~1.0 (std 2.4e-5): a graph within 2.4e-7 of it was refused as
    0.0097 spreads (a review, 2026-11-28). The spread has a floor of a thousandth of the scores' size; a score
    moved by a tenth of a point is still refused."""
    from bertkit.text.features import Encoded

    batches = [[Encoded([1, 5, 2], [0, 0, 0])] * n for n in export_module.PROBE_BATCHES]
    reference = [(1.0 + 2.4e-5 * np.random.default_rng(n).standard_normal((n, 1))).astype(np.float32)
                 for n in export_module.PROBE_BATCHES]
    for moved, passes in ((2.4e-7, True), (0.1, False)):
        got = iter([r + moved for r in reference])

        class Graph:
            def __init__(self, folder, threads=1):
                pass

            def forward(self, ids, mask, types, output):
                return next(got)

        monkeypatch.setattr(export_module, "OnnxModel", Graph)
        result = export_module.parity(None, reference, batches, 0, "regress")
        assert export_module.passes(result, "fp32") is passes, result
        assert result["spread"] < result["spread_floor"] == pytest.approx(1e-3, rel=1e-3)


def test_a_pair_run_is_checked_on_pairs(tmp_path, sample_tokenizer, monkeypatch):
    """The parity probes were single texts, so a pair model's second segment (token type 1) was never checked
    (a review, 2026-11-28): a run on text pairs is probed with pairs, and its export matches its run on them."""
    run = _task_run(tmp_path, sample_tokenizer, "regress")
    config = json.loads((run / "config.json").read_text())
    config["task"]["text_pair_column"] = "sentence2"
    (run / "config.json").write_text(json.dumps(config))
    seen = []
    checked = export_module.parity

    def parity(folder, reference, batches, pad_id, kind):
        seen.extend(e.type_ids for batch in batches for e in batch)
        return checked(folder, reference, batches, pad_id, kind)

    monkeypatch.setattr(export_module, "parity", parity)
    export_onnx(run, tmp_path / "onnx")
    assert seen and all(1 in types for types in seen)
    ours, theirs = TaskModel(tmp_path / "onnx"), TaskModel(run, precision="fp32")
    texts, pairs = TEXTS[:6], TEXTS[1:7]
    scores = [[row["score"] for row in model.classify(texts, pairs, digits=None)[0]] for model in (ours, theirs)]
    assert scores[0] == pytest.approx(scores[1], abs=1e-5)
    alone = [row["score"] for row in theirs.classify(texts, digits=None)[0]]
    assert max(abs(a - b) for a, b in zip(scores[1], alone)) > 1e-4  # the pairs mattered: compared on them


def test_int8_is_smaller_within_its_bound_and_has_its_own_identity(runs, tmp_path):
    fp32, int8 = tmp_path / "fp32", tmp_path / "int8"
    export_onnx(runs["encoder"], fp32, say=lambda line: None)
    summary = export_onnx(runs["encoder"], int8, quantize="int8", say=lambda line: None)
    assert summary["precision"] == "int8" and summary["parity"]["mean_cosine"] >= 0.99
    assert summary["parity"]["min_cosine"] >= export_module.FLOOR_COSINE
    a, b = SentenceEncoder(fp32), SentenceEncoder(int8)
    assert b.precision == "int8" and a.identity != b.identity
    cosine = (a.encode(TEXTS) * b.encode(TEXTS)).sum(1)  # both normalised in the graph
    assert cosine.mean() >= 0.98
    assert (int8 / "model.onnx").stat().st_size < (fp32 / "model.onnx").stat().st_size


def test_a_failed_parity_check_leaves_nothing_behind(runs, tmp_path, monkeypatch):
    monkeypatch.setitem(export_module.MIN_COSINE, "fp32", 1.1)  # no graph can pass
    with pytest.raises(BertkitError, match="differ from the run's.*nothing was written"):
        export_onnx(runs["classify"], tmp_path / "out", say=lambda line: None)
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]  # no temporary folder either


def test_every_inference_command_runs_on_an_export_folder_with_the_runs_outputs(runs, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS[:8]) + "\n")
    onnx = {kind: tmp_path / f"{kind}-onnx" for kind in runs}
    for kind, run in runs.items():
        cli_ok("export", run, "--format", "onnx", "-o", onnx[kind])
    # embed / similarity / index / search / evaluate-sts
    cli_ok("embed", texts, "--model", onnx["encoder"], "-o", tmp_path / "a.npy")
    cli_ok("embed", texts, "--model", runs["encoder"], "--precision", "fp32", "-o", tmp_path / "b.npy")
    np.testing.assert_allclose(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"), atol=1e-5)
    one = cli_ok("similarity", onnx["encoder"], "a good film", "a bad film").stdout
    two = cli_ok("similarity", runs["encoder"], "a good film", "a bad film").stdout
    assert abs(float(one.split()[-1]) - float(two.split()[-1])) < 1e-3
    cli_ok("index", "build", texts, "--model", onnx["encoder"], "-o", tmp_path / "index")
    extra = tmp_path / "more.txt"
    extra.write_text("a ninth text\n")
    cli_ok("index", "add", tmp_path / "index", extra)
    hits = json.loads(cli_ok("search", tmp_path / "index", "a good film", "-k", "1", "--json").stdout)
    assert "a good film" in json.dumps(hits)
    # an index built from the run takes queries through its fp32 export (same identity)
    cli_ok("index", "build", texts, "--model", runs["encoder"], "-o", tmp_path / "index-run")
    cli_ok("search", tmp_path / "index-run", "a good film", "--model", onnx["encoder"], "-k", "1")
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("sentence1\tsentence2\tscore\n" + "".join(f"{a}\t{b}\t{i % 5}\n" for i, (a, b) in
                                                               enumerate(zip(TEXTS[:8], TEXTS[1:9]))))
    sts = ["--data", pairs, "--sentence1-column", "sentence1", "--sentence2-column", "sentence2", "--score-column",
           "score"]
    one = cli_ok("evaluate-sts", "--model", onnx["encoder"], *sts, "-o", tmp_path / "sts-a.json")
    two = cli_ok("evaluate-sts", "--model", runs["encoder"], *sts, "--precision", "fp32", "-o", tmp_path / "sts-b.json")
    a, b = (json.loads((tmp_path / f"sts-{x}.json").read_text()) for x in "ab")
    assert a["spearman"] == pytest.approx(b["spearman"], abs=1e-6)
    # predict / evaluate for the task kinds
    labelled = tmp_path / "labelled.tsv"
    labelled.write_text("text\tlabel\n" + "".join(f"{t}\t{['neg', 'pos', 'neutral'][i % 3]}\n"
                                                  for i, t in enumerate(TEXTS[:8])))
    for kind in ("classify", "regress", "ner"):
        got = cli_ok("predict", texts, "--model", onnx[kind]).stdout.splitlines()
        want = cli_ok("predict", texts, "--model", runs[kind], "--precision", "fp32").stdout.splitlines()
        a, b = [json.loads(line) for line in got], [json.loads(line) for line in want]
        assert len(a) == len(b) == 8
        if kind == "ner":
            assert [r["entities"] for r in a] == [r["entities"] for r in b] if "entities" in a[0] else a == b
        else:
            assert [r.get("label") for r in a] == [r.get("label") for r in b]
            assert [r["score"] for r in a] == pytest.approx([r["score"] for r in b], abs=1e-3)
    cli_ok("evaluate", "--model", onnx["classify"], "--data", labelled, "--text-column", "text", "--label-column",
           "label", "-o", tmp_path / "eval-a.json")
    cli_ok("evaluate", "--model", runs["classify"], "--data", labelled, "--text-column", "text", "--label-column",
           "label", "--precision", "fp32", "-o", tmp_path / "eval-b.json")
    a, b = (json.loads((tmp_path / f"eval-{x}.json").read_text()) for x in "ab")
    assert a["accuracy"] == b["accuracy"]


def test_a_plain_install_without_the_onnx_extra_gets_one_line_naming_it(runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if not installed (`pip install -e .` has no onnx)
    message = cli_error("export", runs["encoder"], "--format", "onnx", "-o", tmp_path / "out")
    assert "needs onnxscript, not installed" in message and 'pip install -e ".[onnx]"' in message
    assert not (tmp_path / "out").exists()


def test_bad_inputs_are_one_line(runs, tmp_path, sample_tokenizer):
    out = tmp_path / "enc"
    cli_ok("export", runs["encoder"], "--format", "onnx", "-o", out)
    texts = tmp_path / "t.txt"
    texts.write_text("hello\n")
    assert "needs --format onnx" in cli_error("export", runs["encoder"], "--quantize", "int8", "-o", tmp_path / "x")
    assert "already exists" in cli_error("export", runs["encoder"], "--format", "onnx", "-o", out)
    assert "has no task head" in cli_error("predict", texts, "--model", out)
    # a command that reads run directories names what the export is and what takes it (it said "no config.json")
    for command in (["info", out], ["glue", "-m", out, "-o", tmp_path / "g"]):
        assert "an ONNX export (bertkit export --format onnx), not a run directory: the inference commands" in \
            cli_error(*command)
    cli_ok("export", runs["classify"], "--format", "onnx", "-o", tmp_path / "cls")
    assert "need an encoder's export" in cli_error("embed", texts, "--model", tmp_path / "cls", "-o",
                                                   tmp_path / "e.npy")
    assert "pooled output only" in cli_error("embed", texts, "--model", out, "--layers", "all", "-o",
                                             tmp_path / "l.npy")
    assert "own precision" in cli_error("embed", texts, "--model", out, "--precision", "bf16", "-o",
                                        tmp_path / "p.npy")
    # a graph that is not the one the manifest describes
    swapped = tmp_path / "swapped"
    shutil.copytree(out, swapped)
    shutil.copyfile(tmp_path / "cls" / "model.onnx", swapped / "model.onnx")
    assert "not the graph its manifest.json describes" in cli_error("embed", texts, "--model", swapped, "-o",
                                                                    tmp_path / "s.npy")
    # a folder another tool wrote
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    shutil.copyfile(out / "model.onnx", foreign / "model.onnx")
    (foreign / "manifest.json").write_text('{"format": "optimum"}')
    assert "did not write" in cli_error("embed", texts, "--model", foreign, "-o", tmp_path / "f.npy")
    # a decoder run has no ONNX export
    decoder_cfg, lm = tiny(vocab_size=400, architecture="decoder", positions="rotary"), heads("lm")
    folder = tmp_path / "tok"
    decoder = save_run(tmp_path / "decoder", Model(decoder_cfg, lm), Config(model=decoder_cfg, heads=lm),
                       folder / "tokenizer.json")
    assert "covers encoder runs" in cli_error("export", decoder, "--format", "onnx", "-o", tmp_path / "d")
    # --overwrite replaces an ONNX export, never anything else
    cli_ok("export", runs["encoder"], "--format", "onnx", "-o", out, "--overwrite", "--quantize", "int8")
    assert json.loads((out / "manifest.json").read_text())["precision"] == "int8"
    assert "not an ONNX export" in cli_error("export", runs["encoder"], "--format", "onnx", "-o", runs["classify"],
                                             "--overwrite")


def test_the_onnx_path_imports_no_training_stack(runs, tmp_path):
    out = tmp_path / "enc"
    export_onnx(runs["encoder"], out, say=lambda line: None)
    code = ("import sys; from bertkit.embedding import SentenceEncoder; "
            f"v = SentenceEncoder({str(out)!r}).encode(['a text', 'another one']); "
            "heavy = [m for m in ('accelerate', 'bertkit.train.loop', 'bertkit.train.step', 'datasets') "
            "if m in sys.modules]; print(v.shape, heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "(2, 32) []", done.stdout + done.stderr


@pytest.mark.slow
def test_minilm_int8_keeps_its_embeddings_on_real_sentences(minilm_run, tmp_path):
    from bertkit.paths import find_dataset

    try:
        rows = (find_dataset("stsb") / "sts-dev.csv").read_text(encoding="utf-8").splitlines()[:300]
    except BertkitError:
        pytest.skip("STS-B is not in the data root")
    sentences = [row.split("\t")[5] for row in rows if len(row.split("\t")) > 6]
    export_onnx(minilm_run, tmp_path / "int8", quantize="int8", say=lambda line: None)
    a = SentenceEncoder(minilm_run, precision="fp32").encode(sentences)
    b = SentenceEncoder(tmp_path / "int8").encode(sentences)
    cosine = (a * b).sum(1)
    assert cosine.mean() >= 0.99 and cosine.min() >= 0.95, (cosine.mean(), cosine.min())
