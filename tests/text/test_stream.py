"""Streaming corpora (data.streaming): local files read through `datasets`' streaming API give exactly the cached
path's training and validation blocks; a resume seeks to its window instead of replaying the stream; a streamed
pretraining resumes exactly and gives the same losses on 1 and 2 processes; what a stream cannot do is one line."""

from __future__ import annotations

import gzip
import json
import zlib

import numpy as np
import pytest

from bertkit.config import ConfigError, DataConfig
from bertkit.errors import BertkitError
from bertkit.text.corpus import load_corpus
from bertkit.text.packing import pack_corpus
from bertkit.text.stream import _DOCS, BlockStream, Point, StreamedBatches
from bertkit.text.tokenizer import save_tokenizer
from conftest import SAMPLE_CORPUS, cli_error, cli_invoke, cli_process, repeated_corpus, torchrun_process

LINES = [line for line in SAMPLE_CORPUS.read_text().splitlines() if line]


def _jsonl(path, copies=30, field="text"):
    rows = [{field: f"{i}: {line}", "id": i} for i in range(copies) for line in LINES]
    rows.insert(3, {field: "   ", "id": -1})  # an empty document: skipped by both paths
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _tsv(path, copies=30):
    """A TSV corpus with documents pandas would read as missing values ("NA", "null", "nan"): both paths keep them."""
    rows = [f"{i}: {line}\t{i}" for i in range(copies) for line in LINES]
    for at, word in ((3, "NA"), (40, "null"), (90, "nan"), (200, "N/A")):
        rows.insert(at, f"{word}\t-1")
    path.write_text("text\tid\n" + "\n".join(rows) + "\n")
    return path


def _streamed(stream: BlockStream) -> tuple[np.ndarray, np.ndarray]:
    ids, starts = [], []
    for block, start, point in stream.blocks(Point()):
        if point.epoch:  # the stream begins again: one epoch read
            break
        ids.append(block)
        starts.append(start)
    return np.stack(ids), np.stack(starts)


@pytest.mark.parametrize("kind", ["txt", "jsonl", "tsv"])
def test_streamed_blocks_are_the_cached_blocks(tmp_path, sample_tokenizer, kind):
    corpus = (repeated_corpus(tmp_path / "c.txt", 30) if kind == "txt" else _jsonl(tmp_path / "c.jsonl")
              if kind == "jsonl" else _tsv(tmp_path / "c.tsv"))
    dataset, _, key = load_corpus([str(corpus)])
    packed = pack_corpus(dataset, key, sample_tokenizer, block_size=32, validation_fraction=0.05)
    stream = BlockStream([str(corpus)], "text", sample_tokenizer, 32, 0.05)
    ids, starts = _streamed(stream)
    cached = packed.train.with_format("numpy")[:]
    assert len(ids) == len(cached["input_ids"]) > 2 * _DOCS // 10  # more than one batch of documents
    assert np.array_equal(ids, cached["input_ids"]) and np.array_equal(starts, cached["word_start"])
    validation = stream.validation(1000)
    assert len(validation) == len(packed.validation) > 0
    assert np.array_equal(np.array(validation["input_ids"]), packed.validation.with_format("numpy")[:]["input_ids"])


def test_a_resume_seeks_to_its_window_instead_of_replaying_the_stream(tmp_path, sample_tokenizer):
    corpus = repeated_corpus(tmp_path / "c.txt", 400)  # 4,000 documents
    stream = BlockStream([str(corpus)], "text", sample_tokenizer, 16, 0.05)
    batches = StreamedBatches(stream, ["input_ids"], 4, 0, 2)
    straight, point, later = [], None, None
    for step in range(1020):
        straight.append(batches.rows(step)["input_ids"])
        if step == 1000:
            point = json.loads(json.dumps(batches.position(1001)))  # as a checkpoint stores it
        if step == 1002:
            later = json.loads(json.dumps(batches.position(1003)))
    read = []
    documents = stream._documents
    stream._documents = lambda source, first: (read.append(d) or d for d in documents(source, first))
    resumed = StreamedBatches(stream, ["input_ids"], 4, 0, 2)
    resumed.seek(point, 1001)
    again = None
    for step in range(1001, 1020):
        assert np.array_equal(resumed.rows(step)["input_ids"], straight[step]), step
        if step == 1002:  # a checkpoint written after the resume, in the next window
            again = json.loads(json.dumps(resumed.position(1003)))
    # read from the batch of documents step 1001's window starts in (not from the start: ~1,000 documents
    # before), and no further than the batch after it
    assert min(doc for doc, _ in read) == point["doc"] >= 3 * _DOCS
    assert len(read) <= 2 * _DOCS
    assert all(np.array_equal(batches.rows(step)["input_ids"], straight[step]) for step in (3, 1010))  # any order
    # a checkpoint written after a resume (in the next window, read from the seeked batch of documents) resumes
    # exactly too: the stored point is where that window really starts, not the source's start
    assert again == later
    second = StreamedBatches(stream, ["input_ids"], 4, 0, 2)
    second.seek(again, 1003)
    assert all(np.array_equal(second.rows(step)["input_ids"], straight[step]) for step in range(1003, 1020))


def test_a_jsonl_point_of_the_json_builder_resumes_where_its_run_stood(tmp_path, sample_tokenizer):
    """Until 2026-11-29 a streamed JSONL was read by datasets' json builder; the line reader took such a stored state
    as "that chunk is done", and a resume skipped the rest of the file without a word (review, 2026-11-29). A point
    stored without its reader is read again from the start up to its document."""
    import datasets

    corpus = tmp_path / "c.jsonl"
    lines = [line for line in SAMPLE_CORPUS.read_text().splitlines() if line]
    corpus.write_text("".join(json.dumps({"text": f"{i} {line}", "n": i}) + "\n" for i in range(60)
                              for line in lines))
    stream = BlockStream([str(corpus)], "text", sample_tokenizer, 16, 0.05)
    batches = StreamedBatches(stream, ["input_ids"], 4, 0, 2)
    straight = [batches.rows(step)["input_ids"] for step in range(260)]
    point = json.loads(json.dumps(batches.position(241)))  # in the second batch of documents
    assert point["reader"] == "jsonl-lines" and point["doc"] >= _DOCS and point["epoch"] == 0, point
    old = datasets.load_dataset("json", data_files=[str(corpus)], split="train", streaming=True)
    for _ in zip(range(point["doc"]), old):
        pass
    stored = {**point, "source": old.state_dict()}  # what the json-builder stream stored there
    stored.pop("reader")
    resumed = StreamedBatches(stream, ["input_ids"], 4, 0, 2)
    resumed.seek(stored, 241)
    assert all(np.array_equal(resumed.rows(step)["input_ids"], straight[step]) for step in range(241, 260))


@pytest.fixture(scope="module")
def streamed_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("streamed")
    corpus = repeated_corpus(root / "corpus.txt", 30)
    args = ["--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--set", "min_frequency=1",
            "--set", "log_every=1", "--set", "eval_every=4", "--set", "save_every=4", "--set", "dropout=0",
            "--set", "attention_dropout=0", "--streaming", "--set", "shuffle_window=2",
            "--no-progress", "--corpus", str(corpus), "--max-steps", "12"]
    cli_process("pretrain", *args, "--set", "batch_size=4", "--out", root / "straight")
    return root, args


@pytest.mark.slow
def test_streamed_pretraining_resumes_exactly_and_splits_over_processes(streamed_runs):
    root, args = streamed_runs
    straight = root / "straight"
    log = (straight / "metrics.jsonl").read_text().splitlines()
    losses = [r["loss"] for r in map(json.loads, log) if "loss" in r]
    assert len(losses) == 12
    state = json.loads((straight / "checkpoints" / "step-12" / "state.json").read_text())
    assert state["stream"]["source"] is not None  # where step 12's window starts
    killed = root / "killed"  # killed while logging step 7, after checkpoints/step-4
    died = cli_process("pretrain", *args, "--set", "batch_size=4", "--out", killed, check=False,
                       env={"BERTKIT_FAULT": "metrics-append@8"})
    assert died.returncode != 0 and (killed / "checkpoints" / "latest").read_text() == "step-4"
    cli_process("pretrain", *args, "--set", "batch_size=4", "--out", killed, "--resume")
    resumed = [r["loss"] for r in map(json.loads, (killed / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert resumed == pytest.approx(losses, rel=1e-6)
    torchrun_process("pretrain", *args, "--set", "batch_size=2", "--out", root / "two")
    two = [r["loss"] for r in map(json.loads, (root / "two" / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert two == pytest.approx(losses, rel=1e-4)


def test_what_a_stream_cannot_do_is_one_line(streamed_runs, tmp_path, sample_tokenizer):
    root, args = streamed_runs
    save_tokenizer(sample_tokenizer, tmp_path / "tok")
    wrong = _jsonl(tmp_path / "wrong.jsonl", copies=3, field="body")
    base = [a for a in args if a != args[args.index("--corpus") + 1]]
    base.remove("--corpus")
    line = cli_error("pretrain", *base, "--corpus", wrong, "--tokenizer", tmp_path / "tok", "--out", tmp_path / "r")
    assert "data.text_field: the streamed corpus" in line and "has no field 'text' (fields: body, id)" in line
    assert not (tmp_path / "r").exists()
    line = cli_error("pretrain", *base, "--corpus", "hf:someone/corpus", "--out", tmp_path / "r")
    assert "a streamed Hub dataset is not read whole to train a tokenizer; pass --tokenizer" in line
    (tmp_path / "bad.txt").write_bytes(b"a good line\n\xff\xfe a bad one\n")
    with pytest.raises(BertkitError, match="is not valid UTF-8 .* a streamed corpus cannot skip bad lines"):
        next(BlockStream([str(tmp_path / "bad.txt")], "text", sample_tokenizer, 8, 0.0).blocks(Point()))
    with pytest.raises(ConfigError, match="data.skip_bad_lines: a streamed corpus cannot skip"):
        DataConfig(streaming=True, skip_bad_lines=True)
    (tmp_path / "more.txt").write_text("a few words\n\nand a few more\n")
    with pytest.raises(BertkitError, match="a streamed corpus is files of one format, found jsonl, text"):
        next(BlockStream([str(wrong), str(tmp_path / "more.txt")], "text", sample_tokenizer, 32, 0.05)
             .blocks(Point()))
    with pytest.raises(BertkitError, match="corpus too small: the streamed corpus does not fill one training block"):
        next(BlockStream([str(tmp_path / "more.txt")], "text", sample_tokenizer, 64, 0.0).blocks(Point()))
    # rows with more fields than the header: pandas made their first fields an index and streamed the tail, or an
    # empty text (a review, 2026-11-28); a JSON text that is a list was streamed as its repr
    (tmp_path / "notes.csv").write_text("text\nHello, world, this is a sentence.\nNo comma here\n")
    with pytest.raises(BertkitError, match="has rows with more fields than its header"):
        next(BlockStream([str(tmp_path / "notes.csv")], "text", sample_tokenizer, 8, 0.0).blocks(Point()))
    # a wide row after the first ones: pandas' own ParserError, which was a traceback
    (tmp_path / "late.csv").write_text("text\n" + "a fine line of words\n" * 5 + "Hello, world, again\n")
    with pytest.raises(BertkitError, match="has rows with more fields than its header"):
        list(BlockStream([str(tmp_path / "late.csv")], "text", sample_tokenizer, 8, 0.0).blocks(Point()))
    # a Parquet file pandas wrote with its (non-range) index streams: its index column is no sign of a wide row
    import pandas as pd

    frame = pd.DataFrame({"text": [f"document {i} has a few words" for i in range(40)]}).sample(frac=1,
                                                                                              random_state=0)
    frame.to_parquet(tmp_path / "shuffled.parquet")
    assert next(BlockStream([str(tmp_path / "shuffled.parquet")], "text", sample_tokenizer, 8, 0.0).blocks(Point()))
    (tmp_path / "lists.jsonl").write_text(json.dumps({"text": ["para one", "para two"]}) + "\n")
    with pytest.raises(BertkitError, match="field 'text' holds a list, not text"):
        next(BlockStream([str(tmp_path / "lists.jsonl")], "text", sample_tokenizer, 8, 0.0).blocks(Point()))


def _truncated_gz(path, rows=400):
    """A .jsonl.gz cut at 2/3 of its bytes (a copy killed half way); returns it and the (byte, line) of the first
    line the cut damaged: what a reader that keeps every whole line before it reaches."""
    text = "".join(json.dumps({"text": f"document {i}: " + "word " * 40}) + "\n" for i in range(rows)).encode()
    data = gzip.compress(text)
    path.write_bytes(data[:len(data) * 2 // 3])
    recovered = zlib.decompressobj(wbits=31).decompress(data[:len(data) * 2 // 3])
    return path, recovered.rfind(b"\n") + 1, recovered.count(b"\n") + 1


def test_a_truncated_gz_names_the_file_and_where_it_stops(tmp_path, sample_tokenizer):
    """Issue 38: streamed, it was a bare `Aborted.` (gzip's EOFError, which click takes for Ctrl-D at a prompt);
    cached, `unreadable (...)` with no place. Both now name the file, the byte and the line."""
    save_tokenizer(sample_tokenizer, tmp_path / "tok")
    bad, byte, line = _truncated_gz(tmp_path / "t.jsonl.gz")
    eof = "Compressed file ended before the end-of-stream marker was reached"
    args = ["pretrain", "--recipe", "tiny", "--set", "vocab_size=400", "--set", "block_size=32", "--tokenizer",
            tmp_path / "tok", "--no-progress", "--max-steps", "2", "--out", tmp_path / "run"]
    assert cli_error(*args, "--streaming", "--corpus", bad) == \
        f"error: {bad}: unreadable at byte {byte}, line {line} ({eof}); repair or replace the file, or leave it out " \
        "of data.corpus"
    assert cli_error(*args, "--corpus", bad) == \
        f"error: {bad}: unreadable at byte {byte}, line {line} ({eof}); repair or replace the file"
    # a good file first: datasets opens the stream on it, and the damaged one breaks off the iteration later
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.jsonl.gz").write_bytes(gzip.compress(b"".join(
        json.dumps({"text": f"{i}: {text}"}).encode() + b"\n" for i, text in enumerate(LINES * 3))))
    second, byte, line = _truncated_gz(folder / "b.jsonl.gz")
    assert cli_error(*args, "--streaming", "--corpus", folder).startswith(
        f"error: {second}: unreadable at byte {byte}, line {line} ({eof})")
    assert not (tmp_path / "run").exists()


def test_an_unhandled_eof_is_a_traceback_not_a_bare_aborted(tmp_path, sample_tokenizer, monkeypatch):
    """click prints an EOFError escaping a command as `Aborted.` (it means Ctrl-D at a prompt there); bertkit never
    prompts, so one is a read error nobody handled: a bug, kept with its traceback."""
    from bertkit.jobs import pretrain

    def broken(*args, **kwargs):
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")

    monkeypatch.setattr(pretrain, "streamed_packed", broken)
    save_tokenizer(sample_tokenizer, tmp_path / "tok")
    result = cli_invoke("pretrain", "--recipe", "tiny", "--set", "vocab_size=400", "--streaming", "--corpus",
                        SAMPLE_CORPUS, "--tokenizer", tmp_path / "tok", "--out", tmp_path / "run", "--no-progress")
    assert isinstance(result.exception, RuntimeError) and isinstance(result.exception.__cause__, EOFError)
    assert "Aborted" not in result.output


def test_a_streamed_jsonl_reads_its_text_whatever_its_other_fields_hold(tmp_path, sample_tokenizer):
    # datasets' json builder fixed a schema from the first chunk: a field beside the text that appeared later, or
    # changed type (null, then a number, then an object), was an 80-line traceback, hours into a run
    rows = [{"text": f"{i}: {line}", "id": i} for i in range(30) for line in LINES]
    for i, row in enumerate(rows):
        row["meta"] = None if i < 100 else i if i < 200 else {"a": str(i)}
        if i > 300:
            row["url"] = f"http://x/{i}"
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\ufeff" + "\n".join(json.dumps(r) for r in rows[:50]) + "\n\n" +
                      "\n".join(json.dumps(r) for r in rows[50:]) + "\n")  # a byte-order mark, a blank line
    dataset, _, key = load_corpus([str(corpus)])
    packed = pack_corpus(dataset, key, sample_tokenizer, block_size=32, validation_fraction=0.05)
    ids, _ = _streamed(BlockStream([str(corpus)], "text", sample_tokenizer, 32, 0.05))
    assert np.array_equal(ids, packed.train.with_format("numpy")[:]["input_ids"])
    (tmp_path / "odd.jsonl").write_text('{"text": "fine words here"}\n[1, 2]\n')
    with pytest.raises(BertkitError, match=r"odd.jsonl: a JSON line after document 1 is a JSON array, not an object"):
        list(BlockStream([str(tmp_path / "odd.jsonl")], "text", sample_tokenizer, 4, 0.0).blocks(Point()))
    (tmp_path / "broken.jsonl").write_text('{"text": "fine words here"}\n{"text": \n')
    with pytest.raises(BertkitError, match=r"broken.jsonl: not valid JSON \(.*\) after document 1; "
                                           r"data.streaming = false names its file and line"):
        list(BlockStream([str(tmp_path / "broken.jsonl")], "text", sample_tokenizer, 4, 0.0).blocks(Point()))
    # a record without the text field is refused, as the cached path refuses it (datasets gave it as a null: an
    # empty document)
    (tmp_path / "gap.jsonl").write_text('{"text": "fine words here"}\n{"body": "no text"}\n')
    with pytest.raises(BertkitError, match="has no field 'text' \\(fields: body\\)"):
        list(BlockStream([str(tmp_path / "gap.jsonl")], "text", sample_tokenizer, 4, 0.0).blocks(Point()))
    (tmp_path / "wide.txt").write_bytes("a few words\n".encode("utf-16-le"))
    with pytest.raises(BertkitError, match="wide.txt: NUL bytes"):
        BlockStream([str(tmp_path / "wide.txt")], "text", sample_tokenizer, 4, 0.0).blocks(Point()).__next__()
    # a stray NUL past the first look (64 KiB) is refused by the reader, as the packed path refuses it (it was read)
    (tmp_path / "late.txt").write_bytes(b"plain words here\n" * 4000 + b"a stray\x00NUL\n")
    with pytest.raises(BertkitError, match="a NUL byte in document 4,001 of the streamed corpus"):
        list(BlockStream([str(tmp_path / "late.txt")], "text", sample_tokenizer, 4, 0.0).blocks(Point()))


def test_a_streamed_corpus_trains_its_tokenizer_without_a_copy_in_the_cache(tmp_path, monkeypatch):
    # the cached read wrote the whole corpus into BERTKIT_CACHE before the tokenizer trained: a corpus streamed
    # because it does not fit the disk filled it
    from bertkit.config import TokenizerConfig
    from bertkit.text.bpe import train_on_corpus

    monkeypatch.setenv("BERTKIT_CACHE", str(tmp_path / "cache"))
    corpus = repeated_corpus(tmp_path / "c.txt", 3)
    settings = TokenizerConfig(min_frequency=1)
    streamed = train_on_corpus([str(corpus)], 300, settings, streaming=True)
    assert not (tmp_path / "cache" / "corpus").exists()
    assert streamed.get_vocab() == train_on_corpus([str(corpus)], 300, settings).get_vocab()
    assert (tmp_path / "cache" / "corpus").is_dir()  # the packed path's read, cached
    # an empty stream is said to be empty (the vocabulary error said "use a larger corpus"), and a huge
    # max_documents is no traceback (islice takes at most sys.maxsize)
    (tmp_path / "empty.txt").write_bytes(b"\n  \n\xef\xbb\xbf\n")
    with pytest.raises(BertkitError, match=r"^corpus is empty: 1 file\(s\) read, no non-empty text$"):
        train_on_corpus([str(tmp_path / "empty.txt")], 300, settings, streaming=True)
    # a read error is itself, not "empty" (a wrong text field, invalid UTF-8 in the first document)
    (tmp_path / "bad.txt").write_bytes(b"\xe9t\xe9 not utf-8\n")
    with pytest.raises(BertkitError, match="invalid UTF-8 at byte 0"):
        train_on_corpus([str(tmp_path / "bad.txt")], 300, settings, streaming=True)
    huge = TokenizerConfig(min_frequency=1, max_documents=10 ** 20)
    assert train_on_corpus([str(corpus)], 300, huge, streaming=True).get_vocab() == streamed.get_vocab()
