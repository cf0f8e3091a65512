"""Corpus reading: every format, directories, bad bytes with their offsets, caching keyed by the files."""

import csv
import gzip
import io
import json
import os
import re
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import bertkit.text.corpus as corpus
from bertkit.errors import BertkitError
from bertkit.paths import cache_root
from bertkit.text.corpus import load_corpus
from bertkit.text.tasks import read_labelled
from conftest import cli_error, damage_cache

DOCS = ["first document here", "second one, with a comma", "third: tabs\tinside"]


def _write_all_formats(root):
    (root / "a.txt").write_text("\n".join(DOCS) + "\n\n")
    with gzip.open(root / "b.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join(DOCS))
    (root / "c.jsonl").write_text("".join(json.dumps({"id": i, "text": d}) + "\n" for i, d in enumerate(DOCS)))
    (root / "d.csv").write_text('id,text\n1,"first document here"\n2,"second one, with a comma"\n3,third: tabs\tinside\n')
    (root / "e.tsv").write_text("id\ttext\n1\tfirst document here\n2\tsecond one, with a comma\n")
    pq.write_table(pa.table({"text": DOCS, "n": [1, 2, 3]}), root / "f.parquet")


def test_every_format_and_directories(tmp_path):
    _write_all_formats(tmp_path)
    (tmp_path / "notes.bin").write_bytes(b"\x00\x01")  # ignored in a directory: unknown suffix
    dataset, stats, _ = load_corpus([str(tmp_path)])
    texts = dataset["text"]
    assert stats.files == 6 and stats.documents == len(texts) == 3 + 3 + 3 + 3 + 2 + 3
    assert texts[:3] == DOCS and texts.count("second one, with a comma") == 6
    assert stats.empty_lines == 1  # the blank line of a.txt


def test_single_files_and_fields(tmp_path):
    (tmp_path / "x.jsonl").write_text(json.dumps({"body": "hello there"}) + "\n")
    dataset, _, _ = load_corpus([str(tmp_path / "x.jsonl")], text_field="body")
    assert dataset["text"] == ["hello there"]
    with pytest.raises(BertkitError, match=r"x.jsonl:1: no field 'text' \(found: body\)"):
        load_corpus([str(tmp_path / "x.jsonl")])
    (tmp_path / "y.csv").write_text("a,b\n1,2\n")
    with pytest.raises(BertkitError, match=r"no column 'text' \(found: a, b\)"):
        load_corpus([str(tmp_path / "y.csv")])


def test_a_row_cut_by_a_delimiter_in_its_text_is_refused_not_truncated(tmp_path):
    """A one-column CSV whose texts hold unquoted commas (or a TSV with a tab in a text) was read up to the first
    one, without a word (a review, 2026-11-28): refused with the line, or skipped and counted."""
    notes = tmp_path / "notes.csv"
    notes.write_text("text\nHello, world, this is a sentence.\nNo comma here\n")
    with pytest.raises(BertkitError, match=r"notes.csv:2: 3 fields, the header has 1 \(an unquoted comma inside a "
                                           r"text\? quote the field\); or pass --skip-bad-lines"):
        load_corpus([str(notes)])
    dataset, stats, _ = load_corpus([str(notes)], skip_bad_lines=True)
    assert dataset["text"] == ["No comma here"] and stats.bad_rows == 1
    tabbed = tmp_path / "tab.tsv"
    tabbed.write_text("text\tlabel\nsome\ttabbed text\t1\nplain\t0\n")
    with pytest.raises(BertkitError, match=r"tab.tsv:2: 3 fields, the header has 2 \(a tab inside a text\?"):
        load_corpus([str(tabbed)])
    trailing = tmp_path / "trailing.csv"  # empty fields past the header cut nothing: read as before
    trailing.write_text("text,label\nfine,1,\nalso fine,0,,\n")
    assert load_corpus([str(trailing)])[0]["text"] == ["fine", "also fine"]


def test_a_quoted_field_keeps_its_line_breaks_and_a_byte_order_mark_is_not_text(tmp_path):
    """csv read lines stripped of their endings, so a quoted field over two lines joined its words ("First
    linesecond line"); a UTF-8 BOM hid a CSV header's first column and began a text file's first document."""
    quoted = tmp_path / "quoted.csv"
    quoted.write_bytes(b'id,text\n1,"First line\nsecond line"\n2,"CRLF\r\nline"\r\n3,last\n')
    assert load_corpus([str(quoted)])[0]["text"] == ["First line\nsecond line", "CRLF\r\nline", "last"]
    # a record is named by its first line (an index's ids, embed's Parquet line, errors), as finetuning names rows;
    # it was named by its last: record 3 read as line 6
    assert [r.number for r in corpus.iter_records(quoted)] == [2, 4, 6]
    (tmp_path / "short.csv").write_text('text,label\n"two\nlines",1\n"one more\nthen",\n"cut\nshort"\n')
    with pytest.raises(BertkitError, match=r"short.csv:6: 1 fields, the header has 2"):
        list(corpus.iter_records(tmp_path / "short.csv", text_field="label"))
    for name, body in (("bom.csv", "text,label\nhello,1\n"), ("bom.txt", "hello\n"),
                       ("bom.jsonl", json.dumps({"text": "hello"}) + "\n")):
        (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + body.encode())
        assert load_corpus([str(tmp_path / name)])[0]["text"] == ["hello"], name


def test_a_json_text_that_is_not_text_is_refused(tmp_path):
    """A list of paragraphs was trained on as its Python repr; 0 and false read as empty documents."""
    numbers = tmp_path / "numbers.jsonl"
    numbers.write_text("".join(json.dumps({"text": v}) + "\n" for v in (0, 2.5, "words", None)))
    assert load_corpus([str(numbers)])[0]["text"] == ["0", "2.5", "words"]  # null: an empty document
    for value, kind in ((["para one", "para two"], "a list"), ({"body": "x"}, "an object"), (False, "a boolean")):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": value}) + "\n")
        with pytest.raises(BertkitError, match=f"bad.jsonl:2: field 'text' holds {kind}, not text"):
            load_corpus([str(bad)])
    array = tmp_path / "array.json"
    array.write_text(json.dumps([{"text": "a"}, {"text": "b"}], indent=2))
    with pytest.raises(BertkitError, match="a .json corpus is read as JSON lines"):
        load_corpus([str(array)])


def test_missing_empty_and_unreadable_inputs(tmp_path, monkeypatch):
    with pytest.raises(BertkitError, match=r"missing.txt: no such file or directory$"):  # absolute: looked nowhere else
        load_corpus([str(tmp_path / "missing.txt")])
    # a relative path names the folder it is relative to, and the checkout's copy of the README's bundled samples
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BertkitError, match=r"^data/samples/corpus.txt: no such file or directory \(relative to "
                                           r".*; .*data/samples/corpus.txt has it\)$"):
        load_corpus(["data/samples/corpus.txt"])
    with pytest.raises(BertkitError, match=r"^nope.tsv: no such file \(relative to [^;]*\)$"):
        read_labelled("nope.tsv")
    # a registered dataset's path that no data root has (a fresh clone): where the data comes from (it said only
    # "relative to" the working directory)
    with pytest.raises(BertkitError, match=r"^sst2/trian.tsv: no such file \(relative to .*; no data root has it "
                                           r"either \(.*\): the datasets are not in the repository, data/README.md "
                                           r"gives each one's source and layout; set BERTKIT_DATA"):
        read_labelled("sst2/trian.tsv")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.bin").write_bytes(b"1")
    with pytest.raises(BertkitError, match="directory has no readable text files"):
        load_corpus([str(tmp_path / "empty")])
    (tmp_path / "blank.txt").write_text("\n  \n\n")
    with pytest.raises(BertkitError, match="corpus is empty"):
        load_corpus([str(tmp_path / "blank.txt")])
    with pytest.raises(BertkitError, match="no corpus given"):
        load_corpus([])


def test_invalid_utf8_names_file_and_byte_offset_or_is_skipped(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"good line\nanother good\nbad \xff byte\nlast\n")
    with pytest.raises(BertkitError, match=r"bad.txt: invalid UTF-8 at byte 27 \(line 3\); pass --skip-bad-lines"):
        load_corpus([str(bad)])
    # a reader whose command cannot skip lines (embed, index build) does not offer an option it lacks: it says how
    # to convert the file
    with pytest.raises(BertkitError, match=r"bad.txt: invalid UTF-8 at byte 27 \(line 3\); re-encode it as UTF-8 "
                                           r"\(a Windows-1252 file: `iconv -f cp1252 -t utf-8 .*bad.txt`; stray bytes "
                                           r"in a UTF-8 file: `iconv -f utf-8 -t utf-8 -c .*bad.txt` drops them\)$"):
        list(corpus.iter_records(bad))
    dataset, stats, _ = load_corpus([str(bad)], skip_bad_lines=True)
    assert dataset["text"] == ["good line", "another good", "last"] and stats.bad_lines == 1


def test_cache_is_reused_and_invalidated_by_changes(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("one\ntwo\n")
    _, _, key1 = load_corpus([str(path)])
    _, _, key2 = load_corpus([str(path)])
    assert key1 == key2
    time.sleep(0.01)
    path.write_text("one\ntwo\nthree\n")
    os.utime(path)
    dataset, _, key3 = load_corpus([str(path)])
    assert key3 != key1 and dataset["text"] == ["one", "two", "three"]
    assert dataset.cache_files  # backed by an Arrow file on disk (memory-mapped), not held in RAM


def test_recipe_paths_resolve_against_the_data_root(tmp_path, monkeypatch):
    (tmp_path / "mydata").mkdir()
    (tmp_path / "mydata" / "c.txt").write_text("from the data root\n")
    monkeypatch.setenv("BERTKIT_DATA", str(tmp_path))
    dataset, _, _ = load_corpus(["mydata/c.txt"])
    assert dataset["text"] == ["from the data root"]


LONG = " ".join(f"word{i}" for i in range(40_000))  # ~290 kB: over csv's default 128 kB per field


def test_csv_and_tsv_fields_longer_than_128_kB(tmp_path):
    (tmp_path / "a.csv").write_text(f'id,text\n1,"{LONG}"\n2,short\n')
    (tmp_path / "b.tsv").write_text(f"id\ttext\n1\t{LONG}\n")
    dataset, stats, _ = load_corpus([str(tmp_path)])
    assert dataset["text"] == [LONG, "short", LONG] and stats.documents == 3


@pytest.fixture
def small_field_limit(monkeypatch):
    """csv's field limit and bertkit's bound at 1,000 characters, restored afterwards (it is process-wide)."""
    monkeypatch.setattr(corpus, "CSV_FIELD_LIMIT", 1000)
    old = csv.field_size_limit(1000)
    yield 1000
    csv.field_size_limit(old)


@pytest.mark.parametrize("name, sep", [("c.csv", ","), ("c.tsv", "\t")])
def test_a_field_over_the_bound_is_one_line_naming_file_and_line(tmp_path, small_field_limit, name, sep):
    path = tmp_path / name
    path.write_text(f"id{sep}text\n1{sep}fine\n2{sep}{'x' * 1500}\n")
    with pytest.raises(BertkitError, match=rf"{name}:3: a field is longer than 1,000 characters, the most bertkit "
                       rf"reads from one {name[-3:].upper()} field"):
        load_corpus([str(path)])
    # through the CLI: exit 2 and one `error:` line, no traceback
    line = cli_error("tokenizer", "train", path, "-o", tmp_path / "tok")
    assert f"{name}:3: a field is longer than 1,000 characters" in line


def test_the_field_bound_is_64_MiB_and_never_lowered():
    corpus.allow_long_fields()
    assert csv.field_size_limit() >= corpus.CSV_FIELD_LIMIT == 64 * 2**20
    old = csv.field_size_limit(2**30)
    try:
        corpus.allow_long_fields()
        assert csv.field_size_limit() == 2**30  # someone else's larger limit stays
    finally:
        csv.field_size_limit(old)


@pytest.mark.parametrize("damage", ["truncate", "empty", "tail", "delete", "manifest"])
def test_a_damaged_corpus_cache_is_read_again_with_a_warning(tmp_path, damage):
    path = tmp_path / "a.txt"
    path.write_text("".join(f"document number {i}\n" for i in range(3000)))
    dataset, stats, key = load_corpus([str(path)])
    texts = list(dataset["text"])  # a list, not a lazy column: the damage below must not reach a live memory map
    del dataset
    folder = cache_root() / "corpus" / key
    damage_cache(folder, "corpus.arrow", damage)
    out = io.StringIO()
    again, stats_again, key_again = load_corpus([str(path)], console=Console(file=out, width=300))
    assert again["text"] == texts and stats_again == stats and key_again == key
    warning = out.getvalue()
    assert warning.count("\n") == 1 and "the corpus cache" in warning and "is damaged" in warning, warning
    out = io.StringIO()
    assert load_corpus([str(path)], console=Console(file=out))[0]["text"] == texts
    assert out.getvalue() == ""  # healed: the next run just reuses it


def test_hidden_folders_are_not_read_and_a_file_named_twice_is_read_once(tmp_path):
    # a folder opened in Jupyter holds .ipynb_checkpoints/NAME-checkpoint.txt, a copy of each file: every document
    # was read twice, and validation held out copies of training documents
    folder = tmp_path / "corpus"
    (folder / ".ipynb_checkpoints").mkdir(parents=True)
    (folder / "sub").mkdir()
    (folder / "reviews.txt").write_text("one\ntwo\n")
    (folder / ".ipynb_checkpoints" / "reviews-checkpoint.txt").write_text("one\ntwo\n")
    (folder / ".notes.txt").write_text("private\n")
    (folder / "sub" / "more.txt").write_text("three\n")
    assert corpus.find_files([str(folder)]) == [folder / "reviews.txt", folder / "sub" / "more.txt"]
    twice = [str(folder), str(folder / "sub" / "more.txt"), f"{folder}/./reviews.txt"]
    assert load_corpus(twice)[0]["text"] == ["one", "two", "three"]
    assert corpus.find_files([str(folder / ".notes.txt")]) == [folder / ".notes.txt"]  # named: read


def test_a_compression_bertkit_cannot_read_is_refused_by_name(tmp_path):
    import bz2
    import lzma

    # a folder of .zst / .xz / .bz2 shards beside one readable file left the shards out without a word (600 of 603
    # documents); a compressed file named alone was read as text, its bytes refused as invalid UTF-8, and the
    # error's --skip-bad-lines trained on junk
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "part-0.jsonl.bz2").write_bytes(bz2.compress(b'{"text": "a"}\n'))
    (shards / "part-1.jsonl").write_text('{"text": "b"}\n')
    (shards / "README.md").write_text("not a corpus file: skipped, as before\n")
    with pytest.raises(BertkitError, match=r"part-0.jsonl.bz2: bzip2-compressed, which bertkit does not read \(it "
                                           r"reads plain files and .gz\): unpack it, or recompress it with gzip"):
        corpus.find_files([str(shards)])
    # unpacked as the message says, with a tool that keeps the archive (unzip, zstd -d, xz -dk): read, the archive
    # left (it was refused again; review, 2026-11-29); a .gz copy of it counts too
    (shards / "part-0.jsonl").write_text('{"text": "a"}\n')
    (shards / "part-2.csv.gz").write_bytes(gzip.compress(b"text\nc\n"))
    (shards / "part-2.csv.zip").write_bytes(b"PK")
    assert [p.name for p in corpus.find_files([str(shards)])] == ["part-0.jsonl", "part-1.jsonl", "part-2.csv.gz"]
    xz = tmp_path / "corpus.txt.xz"
    xz.write_bytes(lzma.compress(b"text\n"))
    with pytest.raises(BertkitError, match="corpus.txt.xz: xz-compressed, which bertkit does not read"):
        load_corpus([str(xz)], skip_bad_lines=True)
    assert "a tar archive" in cli_error("tokenizer", "train", str(_write(tmp_path / "c.tar.gz", b"x")), "-o",
                                        str(tmp_path / "tok"), "--vocab-size", "300")
    named = _write(tmp_path / "notes.7z.txt", b"plain text\n")  # only the outermost suffix says how it is packed
    assert load_corpus([str(named)])[0]["text"] == ["plain text"]


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_utf16_and_nul_bytes_are_refused_not_trained_on(tmp_path):
    # ASCII text in UTF-16 without a byte-order mark is valid UTF-8 with a NUL after every character: it was
    # trained on so, its merges full of byte 0x00; with the mark, --skip-bad-lines skipped the first line and
    # trained on the rest
    plain = "first review\nsecond review\n"
    without = _write(tmp_path / "without.txt", plain.encode("utf-16-le"))
    with pytest.raises(BertkitError, match=r"without.txt: NUL bytes \(UTF-16 text, or not a text file\?\) at byte "
                                           r"1 \(line 1\); re-encode it as UTF-8 \(`iconv -f utf-16 -t utf-8 "):
        load_corpus([str(without)], skip_bad_lines=True)
    marked = _write(tmp_path / "marked.jsonl", '{"text": "日本語"}\n'.encode("utf-16"))  # with its mark
    with pytest.raises(BertkitError, match=r"marked.jsonl: UTF-16 \(its byte-order mark says so\) at byte 0 \(line "
                                           r"1\); re-encode"):
        load_corpus([str(marked)], skip_bad_lines=True)
    for path, message in ((without, "NUL bytes"), (marked, "UTF-16 (its byte-order mark")):
        with pytest.raises(BertkitError, match=re.escape(message)):
            corpus.refuse_non_text(path)  # the streamed path's check of the same files
    # a stray NUL in UTF-8 text (scraped pages have some) is a bad line, as invalid UTF-8 is: the whole corpus was
    # refused with an iconv line that garbles a UTF-8 file (review, 2026-11-29)
    later = _write(tmp_path / "later.txt", b"fine\nstill fine\nbro\x00ken but mostly words\nlast\n")
    with pytest.raises(BertkitError, match=r"later.txt: a NUL byte at byte 19 \(line 3\); pass --skip-bad-lines"):
        load_corpus([str(later)])
    dataset, stats, _ = load_corpus([str(later)], skip_bad_lines=True)
    assert dataset["text"] == ["fine", "still fine", "last"] and stats.bad_lines == 1
    corpus.refuse_non_text(later)  # the stream's first look lets it pass: its reader refuses the document itself
    # but UTF-16 of any script (Cyrillic: NULs only at its spaces and line ends) and a binary file named .txt are no
    # stray NULs: refused, with --skip-bad-lines too (review of the rule, 2026-11-29: they were skipped or trained on)
    russian = _write(tmp_path / "ru.txt", ("Привет мир, это тест.\n" * 400).encode("utf-16-be"))
    image = _write(tmp_path / "image.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 50)
    for path in (russian, image):
        with pytest.raises(BertkitError, match=r"NUL bytes \(UTF-16 text, or not a text file\?\)"):
            load_corpus([str(path)], skip_bad_lines=True)
        with pytest.raises(BertkitError, match=r"NUL bytes"):
            corpus.refuse_non_text(path)


def test_a_byte_order_mark_opening_any_line_is_not_text(tmp_path):
    # files that each begin with a BOM, joined by `cat`: the second BOM opened a document (three byte tokens), where
    # the stream drops it; a JSONL line opened by one was "not valid JSON" (review, 2026-11-29)
    joined = _write(tmp_path / "joined.txt", "\ufefffirst\nsecond\n".encode() + "\ufeffthird\n".encode())
    assert load_corpus([str(joined)])[0]["text"] == ["first", "second", "third"]
    records = _write(tmp_path / "joined.jsonl", '\ufeff{"text": "one"}\n\ufeff{"text": "two"}\n\ufeff\n'.encode())
    assert load_corpus([str(records)])[0]["text"] == ["one", "two"]


def test_an_edit_that_keeps_size_and_modification_time_is_seen(tmp_path):
    from bertkit.run import inputs

    path = _write(tmp_path / "a.txt", b"one\ntwo\n")
    _, _, key = load_corpus([str(path)])
    recorded = inputs.describe({"data.corpus": [path]})
    stat = path.stat()
    path.write_bytes(b"ONE\nTWO\n")  # the same size, and the modification time put back (touch -r, rsync -a)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    dataset, _, again = load_corpus([str(path)])
    assert again != key and dataset["text"] == ["ONE", "TWO"]
    now = inputs.describe({"data.corpus": [path]}, before=recorded)
    assert now["files"]["data.corpus"][0]["sha256"] != recorded["files"]["data.corpus"][0]["sha256"]


def test_a_json_array_says_a_json_corpus_is_json_lines(tmp_path):
    # a one-line JSON array of records said "no field 'text' (found: list)"
    array = _write(tmp_path / "docs.json", json.dumps([{"text": "one"}, {"text": "two"}]).encode())
    with pytest.raises(BertkitError, match=r"docs.json:1: a JSON array, not an object with a 'text' field; a .json "
                                           r"corpus is read as JSON lines, one object per line"):
        load_corpus([str(array)])
    notebook = tmp_path / "nb" / ".ipynb_checkpoints"
    notebook.mkdir(parents=True)
    (notebook / "notes-checkpoint.txt").write_text("text\n")
    with pytest.raises(BertkitError, match=r"nb: directory has no readable text files \(.*\); 1 hidden file\(s\) "
                                           r"passed over: name one to read it$"):
        corpus.find_files([str(tmp_path / "nb")])
    nothing = _write(tmp_path / "NULLS.JSON", b"null\n")  # JSON's names, and the hint whatever the suffix's case
    with pytest.raises(BertkitError, match=r"NULLS.JSON:1: a JSON null, not an object .*; a .json corpus is read"):
        load_corpus([str(nothing)])
