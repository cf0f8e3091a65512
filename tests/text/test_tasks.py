"""Task readers: labelled text in three formats, CoNLL columns, tag schemes normalised to IOB2, real files."""

import csv
import json

import pytest

import bertkit.text.corpus as corpus
from bertkit.errors import BertkitError
from bertkit.paths import find_dataset
from bertkit.text.tasks import read_conll, read_labelled, to_iob2


def _data(name):
    try:
        return find_dataset(name)
    except BertkitError:
        pytest.skip(f"{name} not in the data root (../shared/data); CI always has it")


def test_labelled_text_in_csv_tsv_jsonl(tmp_path):
    (tmp_path / "a.csv").write_text('text,label\n"Good, really",pos\nbad,neg\n')
    (tmp_path / "a.tsv").write_text('sentence\tlabel\nit \'s "quoted" here\t1\n')
    (tmp_path / "a.jsonl").write_text(json.dumps({"q": "first?", "a": "second.", "y": 2}) + "\n")
    csv_rows = read_labelled(tmp_path / "a.csv")
    assert [(r.text, r.label) for r in csv_rows] == [("Good, really", "pos"), ("bad", "neg")]
    tsv = read_labelled(tmp_path / "a.tsv", text_column="sentence")
    assert tsv[0].text == 'it \'s "quoted" here' and tsv[0].label == "1"
    pairs = read_labelled(tmp_path / "a.jsonl", text_column="q", text_pair_column="a", label_column="y")
    assert pairs[0].pair == "second." and pairs[0].label == "2"


def test_labelled_text_errors_name_what_is_wrong(tmp_path):
    (tmp_path / "a.csv").write_text("sentence,y\nhello,1\n")
    with pytest.raises(BertkitError, match=r"no label column 'label' \(columns found: sentence, y\)"):
        read_labelled(tmp_path / "a.csv", text_column="sentence")
    (tmp_path / "empty.tsv").write_text("")
    with pytest.raises(BertkitError, match="empty file"):
        read_labelled(tmp_path / "empty.tsv")
    (tmp_path / "b.csv").write_text("text,label\nhello,\n")
    with pytest.raises(BertkitError, match="example 1 .after the header. has no label"):
        read_labelled(tmp_path / "b.csv")


def test_fields_longer_than_128_kB_and_over_the_bound(tmp_path, monkeypatch):
    long = " ".join(f"word{i}" for i in range(40_000))  # ~290 kB: over csv's default 128 kB per field
    (tmp_path / "a.csv").write_text(f'text,label\n"{long}",pos\nshort,neg\n')
    (tmp_path / "a.tsv").write_text(f"text\tlabel\n{long}\tpos\n")
    assert [e.text for e in read_labelled(tmp_path / "a.csv")] == [long, "short"]
    assert read_labelled(tmp_path / "a.tsv")[0].text == long
    monkeypatch.setattr(corpus, "CSV_FIELD_LIMIT", 1000)  # bertkit's bound (64 MiB), lowered to keep the test small
    old = csv.field_size_limit(1000)
    try:
        for name in ("a.csv", "a.tsv"):
            with pytest.raises(BertkitError, match=rf"{name}:2: a field is longer than 1,000 characters"):
                read_labelled(tmp_path / name)
    finally:
        csv.field_size_limit(old)


def test_line_breaks_inside_texts_stay_inside_texts(tmp_path):
    # a quoted CSV field over two lines, a Unicode line separator, a spreadsheet's byte-order mark
    (tmp_path / "a.csv").write_text('\ufefftext,label\n"first line\nsecond line",pos\nwith \u2028 inside,neg\n',
                                    encoding="utf-8")
    examples = read_labelled(tmp_path / "a.csv")
    assert [e.text for e in examples] == ["first line\nsecond line", "with \u2028 inside"]
    (tmp_path / "b.jsonl").write_text(json.dumps({"text": "x\u2028y", "label": 1}, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
    assert read_labelled(tmp_path / "b.jsonl")[0].text == "x\u2028y"


def test_a_bad_conll_tag_names_file_and_line(tmp_path):
    (tmp_path / "a.conll").write_text("EU B-ORG\nrejects O\n\nPeter PERSON\n")
    with pytest.raises(BertkitError, match=r"a.conll:4: tag 'PERSON'"):
        read_conll(tmp_path / "a.conll")


@pytest.mark.parametrize("tags, expected", [
    (["I-ORG", "I-ORG", "O", "I-PER", "B-PER"], ["B-ORG", "I-ORG", "O", "B-PER", "B-PER"]),  # IOB1
    (["B-ORG", "I-ORG", "O", "B-PER"], ["B-ORG", "I-ORG", "O", "B-PER"]),  # IOB2 unchanged
    (["B-LOC", "I-LOC", "E-LOC", "S-PER", "O", "B-MISC", "E-MISC"],
     ["B-LOC", "I-LOC", "I-LOC", "B-PER", "O", "B-MISC", "I-MISC"]),  # BIOES
    (["S-LOC", "S-LOC"], ["B-LOC", "B-LOC"]),  # two single-token entities stay two
    (["B-PER", "I-LOC"], ["B-PER", "B-LOC"]),  # an invalid continuation starts its own entity
])
def test_tag_schemes_normalise_to_iob2(tags, expected):
    assert to_iob2(tags) == expected
    assert to_iob2(to_iob2(tags)) == expected  # idempotent


def test_conll_columns_docstart_and_errors(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("-DOCSTART- -X- O O\n\nEU NNP I-NP I-ORG\nrejects VBZ I-VP O\n\nPeter NNP I-NP I-PER\n")
    sentences = read_conll(path)
    assert [s.tokens for s in sentences] == [("EU", "rejects"), ("Peter",)]
    assert [s.tags for s in sentences] == [("B-ORG", "O"), ("B-PER",)]
    assert read_conll(path, tag_column=2)[0].tags == ("B-NP", "B-VP")  # chunk tags (IOB1) from another column
    with pytest.raises(BertkitError, match="tag column 7 does not exist in 4 columns"):
        read_conll(path, tag_column=7)
    path.write_text("EU NNP I-NP I-ORG\nrejects VBZ O\n")
    with pytest.raises(BertkitError, match=r"a.txt:2: 3 columns, expected 4"):
        read_conll(path)
    path.write_text("EU B-XYZ-\nx Q-ORG\n")
    with pytest.raises(BertkitError, match="not O or PREFIX-TYPE"):
        read_conll(path)


def test_real_sst2_and_conll2003():
    sst2 = read_labelled(_data("sst2") / "dev.tsv", text_column="sentence")
    assert len(sst2) == 872 and {r.label for r in sst2} == {"0", "1"}
    conll = read_conll(_data("conll2003") / "dev.txt")
    assert len(conll) == 3250
    types = {t[2:] for s in conll for t in s.tags if t != "O"}
    assert types == {"PER", "ORG", "LOC", "MISC"}
    assert all(not t.startswith("I-") or (i > 0 and s.tags[i - 1][2:] == t[2:])
               for s in conll for i, t in enumerate(s.tags))  # valid IOB2 everywhere


def test_parallel_text_is_read_line_by_line_and_checked(tmp_path):
    from bertkit.text.tasks import read_parallel

    src, tgt = tmp_path / "a.en", tmp_path / "a.de"
    src.write_text("One dog.\n\nTwo cats. \nA tree.\n")
    tgt.write_text("Ein Hund.\nLeer\nZwei Katzen.\n\n")
    pairs, skipped = read_parallel(src, tgt)
    assert pairs == [("One dog.", "Ein Hund."), ("Two cats.", "Zwei Katzen.")] and skipped == 2
    tgt.write_text("Ein Hund.\n")
    with pytest.raises(BertkitError, match=r"a.en has 4 lines but .*a.de has 1"):
        read_parallel(src, tgt)
    with pytest.raises(BertkitError, match="no such file"):
        read_parallel(src, tmp_path / "missing.de")
