"""`bertkit embed`: chunked streaming gives exactly the one-shot embeddings, rows never shift silently, memory is
bounded by the chunk, and outputs are never half-written or overwritten by accident, not even by a full disk."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from bertkit.embedding import SentenceEncoder
from conftest import bertkit_capped as _limited
from conftest import cli_error, cli_invoke, cli_ok

# edge spaces on some lines (WikiText's every line has them): the model gets each text stripped, as every reader
# gives it, so a row is the embedding of its stripped text
LINES = [" the first review ", "", "a second, much longer review about a film and its actors", "third\t",
         "   ", "the fifth line is here", "six", "seven seven seven", "eight is the last one"]


def _corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("\n".join(LINES) + "\n")
    return path


def test_chunked_streaming_equals_one_pass_and_maps_skipped_rows(tmp_path, base, monkeypatch):
    corpus = _corpus(tmp_path)
    expected = SentenceEncoder(base).encode([t.strip() for t in LINES if t.strip()])
    seen = []
    original = SentenceEncoder.encode
    monkeypatch.setattr(SentenceEncoder, "encode", lambda self, texts, on_batch=None: (
        seen.append(len(texts)), original(self, texts, on_batch))[1])
    result = cli_ok("embed", "--model", base, corpus, "-o", tmp_path / "e.npy", "--chunk-size", "3",
                    "--batch-size", "2", "--no-progress")
    assert max(seen) == 3  # never more than a chunk in memory
    np.testing.assert_allclose(np.load(tmp_path / "e.npy"), expected, atol=1e-5)
    assert "skipped 2 empty texts (input positions 1, 4)" in result.output
    rows = np.load(tmp_path / "e.rows.npy")
    assert rows.tolist() == [i for i, t in enumerate(LINES) if t.strip()]

    cli_ok("embed", "--model", base, corpus, "-o", tmp_path / "all.npy", "--keep-empty", "--no-progress")
    everything = np.load(tmp_path / "all.npy")
    assert everything.shape == (len(LINES), 32) and not (tmp_path / "all.rows.npy").exists()
    np.testing.assert_allclose(everything[[i for i, t in enumerate(LINES) if t.strip()]], expected, atol=1e-5)


@pytest.mark.slow
def test_compiled_embeddings_equal_eager(tmp_path, base):
    """--compile runs the encoder through torch.compile (dynamic shapes over the sorted batches): same vectors."""
    from torch._dynamo.utils import counters

    corpus = _corpus(tmp_path)
    expected = SentenceEncoder(base).encode([t.strip() for t in LINES if t.strip()])
    counters.clear()
    cli_ok("embed", "--model", base, corpus, "-o", tmp_path / "c.npy", "--compile", "--batch-size", "2",
           "--no-progress")
    assert counters["stats"]["unique_graphs"] > 0  # dynamo really compiled the encoder
    np.testing.assert_allclose(np.load(tmp_path / "c.npy"), expected, atol=1e-5)
    assert "--compile applies to pooled" in cli_error("embed", "--model", base, corpus, "-o", tmp_path / "l.npy",
                                                     "--compile", "--layers", "all")


def test_compile_shapes_needs_compile_and_names_its_choices(tmp_path, base):
    corpus = _corpus(tmp_path)
    assert "--compile-shapes applies with --compile" in cli_error(
        "embed", "--model", base, corpus, "-o", tmp_path / "a.npy", "--compile-shapes", "buckets")
    bad = cli_invoke("embed", "--model", base, corpus, "-o", tmp_path / "b.npy", "--compile", "--compile-shapes",
                     "static")  # refused by the parser, which lists the choices (as --precision's)
    said = " ".join(bad.output.replace("│", " ").split())  # the parser's box wraps its lines
    assert bad.exit_code == 2 and "'static' is not one of 'auto', 'buckets', 'dynamic'" in said
    assert not (tmp_path / "a.npy").exists() and not (tmp_path / "b.npy").exists()


def test_parquet_rows_carry_file_line_and_id(tmp_path, base):
    records = tmp_path / "docs.jsonl"
    records.write_text("".join(json.dumps({"doc": f"d{i}", "body": t}) + "\n" for i, t in enumerate(LINES)))
    cli_ok("embed", "--model", base, records, "-o", tmp_path / "e.parquet", "--text-field", "body", "--id-field",
           "doc", "--no-progress", "--chunk-size", "4", "--batch-size", "2")
    table = pq.read_table(tmp_path / "e.parquet")
    kept = [i for i, t in enumerate(LINES) if t.strip()]
    assert table.column("id").to_pylist() == [f"d{i}" for i in kept]
    assert table.column("line").to_pylist() == [i + 1 for i in kept]
    vectors = np.array(table.column("embedding").to_pylist(), dtype=np.float32)
    np.testing.assert_allclose(vectors, SentenceEncoder(base).encode([LINES[i].strip() for i in kept]), atol=1e-5)


def test_tsv_quotes_are_text_and_short_rows_are_errors(tmp_path, base):
    tsv = tmp_path / "docs.tsv"
    tsv.write_text('text\tid\n"Quoted title and more\t1\nplain\t2\nthird\t3\n')
    cli_ok("embed", "--model", base, tsv, "-o", tmp_path / "q.parquet", "--id-field", "id", "--no-progress")
    assert pq.read_table(tmp_path / "q.parquet").column("id").to_pylist() == ["1", "2", "3"]
    short = tmp_path / "short.csv"
    short.write_text("text,id\nhello,1\nworld\n")
    assert "short.csv:3: 1 fields, the header has 2" in cli_error("embed", "--model", base, short, "-o",
                                                                  tmp_path / "s.parquet", "--id-field", "id")
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"id": 1.5, "text": "x"}\n')
    assert "odd.jsonl:1: id 1.5 is not a string or an integer" in cli_error(
        "embed", "--model", base, odd, "-o", tmp_path / "o.parquet", "--id-field", "id")


def test_inputs_that_change_while_embedding_write_nothing(tmp_path, base, monkeypatch):
    import bertkit.jobs.embed as embed

    corpus = _corpus(tmp_path)
    original = embed.scan

    def undercount(*args, **kwargs):
        found = original(*args, **kwargs)
        found.rows -= 1
        return found

    monkeypatch.setattr(embed, "scan", undercount)
    for name in ("c.npy", "c.parquet"):
        assert "the inputs changed while being embedded" in cli_error("embed", "--model", base, corpus, "-o",
                                                                      tmp_path / name)
        assert not (tmp_path / name).exists()
    rows = tmp_path / "r.rows.npy"
    rows.write_bytes(b"mine")
    assert "r.rows.npy: already exists" in cli_error("embed", "--model", base, corpus, "-o", tmp_path / "r.npy")
    assert rows.read_bytes() == b"mine" and not (tmp_path / "r.npy").exists()
    assert not list(tmp_path.glob(".*tmp*"))


def test_bad_inputs_are_one_line_and_damage_nothing(tmp_path, base):
    corpus = _corpus(tmp_path)
    kept = tmp_path / "kept.npy"
    np.save(kept, np.zeros(3))
    before = kept.read_bytes()
    assert "already exists" in cli_error("embed", "--model", base, corpus, "-o", kept)
    assert kept.read_bytes() == before
    assert "unknown output format" in cli_error("embed", "--model", base, corpus, "-o", tmp_path / "e.csv")
    dupes = tmp_path / "dupes.jsonl"
    dupes.write_text('{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n{"id": "a", "text": "z"}\n')
    line = cli_error("embed", "--model", base, dupes, "-o", tmp_path / "d.parquet", "--id-field", "id")
    assert "dupes.jsonl:3: duplicate id 'a' (first at" in line and not (tmp_path / "d.parquet").exists()
    assert "ids need a .parquet output" in cli_error("embed", "--model", base, dupes, "-o", tmp_path / "d.npy",
                                                     "--id-field", "id")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n \n")
    assert "no texts to embed (2 empty)" in cli_error("embed", "--model", base, blank, "-o", tmp_path / "b.npy")
    assert "no such file" in cli_error("embed", "--model", base, tmp_path / "nope.txt", "-o", tmp_path / "n.npy")
    assert "not a bertkit run directory" in cli_error("embed", "--model", tmp_path, corpus, "-o", tmp_path / "m.npy")
    assert not list(tmp_path.glob(".*tmp*"))


def test_layers_pool_every_layer_and_the_last_one_is_the_embedding(tmp_path, base):
    """--layers all: (N, L+1, D); the last layer is exactly `embed`'s vector, layer 0 the pooled embeddings
    output; --tokens: every token's states with a sidecar naming the text, position and token of each row."""
    import torch

    from bertkit.run.directory import load_run

    corpus = _corpus(tmp_path)
    texts = [t.strip() for t in LINES if t.strip()]
    cli_ok("embed", "--model", base, corpus, "-o", tmp_path / "plain.npy", "--no-progress")
    cli_ok("embed", "--model", base, corpus, "-o", tmp_path / "layers.npy", "--layers", "all", "--chunk-size", "3",
           "--batch-size", "2", "--no-progress")
    layered, plain = np.load(tmp_path / "layers.npy"), np.load(tmp_path / "plain.npy")
    assert layered.shape == (len(texts), 3, 32)  # tiny: 2 blocks + the embeddings output
    np.testing.assert_allclose(layered[:, -1], plain, atol=1e-5)
    assert np.load(tmp_path / "layers.rows.npy").tolist() == [i for i, t in enumerate(LINES) if t.strip()]

    encoder = SentenceEncoder(base)
    config, model = load_run(base)
    ids = encoder.encoder.texts(texts)
    with torch.no_grad():  # layer 0 of text 2 by hand: the embeddings module, mean-pooled, normalised
        emb = model.backbone.embeddings(torch.tensor([ids[2].input_ids]))[0].mean(0)
    np.testing.assert_allclose(layered[2, 0], (emb / emb.norm()).numpy(), atol=1e-5)

    cli_ok("embed", "--model", base, corpus, "-o", tmp_path / "tok.npy", "--tokens", "--layers", "0,-1",
           "--chunk-size", "4", "--batch-size", "3", "--no-progress")
    states = np.load(tmp_path / "tok.npy")
    assert states.shape == (sum(len(e.input_ids) for e in ids), 2, 32)
    sidecar = [line.split("\t") for line in (tmp_path / "tok.tokens.tsv").read_text().splitlines()[1:]]
    assert [int(r[1]) for r in sidecar if r[2] == "0"] == [i for i, t in enumerate(LINES) if t.strip()]
    assert [int(r[3]) for r in sidecar] == [t for e in ids for t in e.input_ids]
    with torch.no_grad():  # token rows of text 2 = the model's last hidden states for it alone
        last = model(torch.tensor([ids[2].input_ids])).last_hidden_state[0].numpy()
    rows = [int(r[0]) for r in sidecar if r[1] == "3"]  # input position 3 is the third non-empty text
    np.testing.assert_allclose(states[rows, 1], last, atol=1e-5)


def test_layer_flags_bad_inputs_are_one_line(tmp_path, base):
    corpus = _corpus(tmp_path)
    assert "layer 9 does not exist" in cli_error("embed", "--model", base, corpus, "-o", tmp_path / "x.npy",
                                                 "--layers", "0,9")
    assert "expected 'all'" in cli_error("embed", "--model", base, corpus, "-o", tmp_path / "x.npy",
                                         "--layers", "first")
    assert "write a .npy array" in cli_error("embed", "--model", base, corpus, "-o", tmp_path / "x.parquet",
                                             "--layers", "all")
    assert not list(tmp_path.glob("x*"))


def test_layers_of_texts_shorter_than_the_layer_count(tmp_path, base):
    """A pooled (N, L', D) output is not per-token: a 2-token text ([CLS] [SEP]) keeps all its layers."""
    corpus = tmp_path / "short.txt"
    corpus.write_text("a\n\nthe first review\n")
    cli_ok("embed", "--model", base, corpus, "-o", tmp_path / "s.npy", "--layers", "all", "--keep-empty",
           "--no-progress")
    layered = np.load(tmp_path / "s.npy")
    assert layered.shape == (3, 3, 32)
    plain = SentenceEncoder(base).encode(["a", "", "the first review"])
    np.testing.assert_allclose(layered[:, -1], plain, atol=1e-5)
    # the middle layer, by hand for the empty text: [CLS] [SEP] through the embeddings and one block
    encoder = SentenceEncoder(base)
    single = encoder.encode_layers([""], [1])
    np.testing.assert_allclose(layered[1, 1], single[0, 0], atol=1e-5)




def test_a_full_disk_is_one_line_and_keeps_the_previous_output(tmp_path, base):
    """A full disk used to kill `embed` with SIGBUS (a memory map of a sparse file), printing nothing and leaving
    the temporary behind; now: one `error:` line, the previous output (and its sidecar) intact, no temporaries."""
    small = _corpus(tmp_path)
    big = tmp_path / "big.txt"
    big.write_text("".join(f"line {i} of a corpus that outgrows the disk\n" if i % 50 else "\n" for i in range(400)))
    for name, extra, sidecar in (("e.npy", [], "e.rows.npy"), ("e.parquet", [], None),
                                 ("t.npy", ["--tokens"], "t.tokens.tsv")):
        out = tmp_path / name
        cli_ok("embed", "--model", base, small, "-o", out, "--no-progress", *extra)
        before = {p.name: p.read_bytes() for p in (out, tmp_path / (sidecar or name))}
        result = _limited(["embed", "--model", base, big, "-o", out, "--overwrite", "--no-progress", *extra],
                          12_288, tmp_path)
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "no space left" in errors[0], result.stderr
        assert {p.name: p.read_bytes() for p in (out, tmp_path / (sidecar or name))} == before
        if name.endswith(".npy"):
            assert np.load(out).shape[0] > 0
        else:
            assert pq.read_table(out).num_rows == len([t for t in LINES if t.strip()])
        assert not list(tmp_path.glob(".*tmp*"))
