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
    with pytest.raises(BertkitError, match=r"b.csv:2: 1 of the file's 1 row has no label, this one first; fill "
                                           r"them in or remove them$"):
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
    # a byte-order mark (an editor's) is no part of the -DOCSTART- line nor of a first token
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert read_conll(path) == sentences
    path.write_bytes(b"\xef\xbb\xbfEU NNP I-NP I-ORG\n")
    assert read_conll(path)[0].tokens == ("EU",)
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
    # a line separator inside a sentence on each side (U+2028, U+0085: IMDB has thousands) and a lone \r: lines
    # are split at \n only, so no pair shifts; Windows line ends still read
    src.write_bytes("A man\u2028in a hat.\r\nTwo dogs run.\r\nA red\rcar.\n".encode())
    tgt.write_bytes("Ein Mann mit Hut.\nZwei Hunde\u0085rennen.\nEin rotes Auto.\n".encode())
    pairs, _ = read_parallel(src, tgt)
    assert [(s[:5], t[:4]) for s, t in pairs] == [("A man", "Ein "), ("Two d", "Zwei"), ("A red", "Ein ")]


# ------------------------------------------------------------------------- labels normalised, bad rows counted

def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_fraction_written_otherwise_than_a_runs_labels_is_named_and_two_spellings_are_said(tmp_path):
    """Fractions keep their text now ("1.10" and "1.1" were one class through a float). A run that stored "0.5" (as
    bertkit did before) meets gold "0.50" as a label it never saw: `evaluate` names the stored one it writes
    otherwise, a hint, never a mapping (a run trained on "1.1" has not seen the code "1.10": a review). A file
    writing one number two ways is warned (ratings "1.5" and "1.50": two classes now)."""
    from bertkit.text.labels import canonical_label, written_otherwise
    from bertkit.text.tasks import read_labelled

    assert written_otherwise("0.50", ["0.5", "1.5"]) == "0.5" and written_otherwise("1.10", ["1.1", "1.10"]) is None
    assert written_otherwise("2.50", ["0.5"]) is None and written_otherwise("positive", ["0.5"]) is None
    assert written_otherwise("10", ["1e1"]) is None  # integers are one class however written: never a hint
    assert canonical_label("1e9999999") == ("1e9999999", "fraction")  # not an integer of ten million digits
    assert canonical_label("12345678901234567.7") == ("12345678901234567.7", "fraction")  # a float rounded it to
    path = tmp_path / "codes.tsv"                                                          # an integer class
    path.write_text("text\tlabel\na\t1.5\nb\t1.50\nc\t2.5\n")
    said = []
    examples = read_labelled(path, warn=said.append)
    assert [e.label for e in examples] == ["1.5", "1.50", "2.5"]
    assert said == [f"{path}: labels 1.5 and 1.50 are one number written two ways, so two classes (write them alike "
                    "if they are one)"]
    path.write_text("text\tlabel\na\tBilling\nb\tbilling\nc\tShipping\n")  # hand-labelled: warned, kept apart
    said.clear()
    assert [e.label for e in read_labelled(path, warn=said.append)] == ["Billing", "billing", "Shipping"]
    assert said == [f"{path}: labels Billing and billing differ only in case, so they are classes of their own (write "
                    "them alike if they are one)"]


@pytest.mark.parametrize("raw, expected", [
    (1, ("1", "integer")), ("1", ("1", "integer")), (1.0, ("1", "integer")), (" 1 ", ("1", "integer")),
    ("1.0", ("1", "integer")), ("-0", ("0", "integer")), ("1e1", ("10", "integer")), (True, ("1", "boolean")),
    (False, ("0", "boolean")), (0.5, ("0.5", "fraction")), ("0.50", ("0.50", "fraction")),
    ("1.10", ("1.10", "fraction")), ("1.1", ("1.1", "fraction")),  # codes, not one number (inference review)
    ("positive", ("positive", "name")), ("True", ("True", "name")), ("[0]", ("[0]", "name")),
    (None, (None, "missing")), (float("nan"), (None, "missing")), ("NaN", (None, "missing")),
    ("  ", (None, "missing")), ([0], (None, "list")), ({"a": 1}, (None, "object")),
    ("123456789012345678901234567890", ("123456789012345678901234567890", "integer")),  # exact, not via a float
])
def test_canonical_label_of_each_way_of_writing_one(raw, expected):
    from bertkit.text.labels import canonical_label

    assert canonical_label(raw) == expected


def test_labels_written_several_ways_are_one_class(tmp_path):
    from bertkit.tasks.labelled import sorted_labels

    values = [1, "1", 1.0, True, 0, "0", 0.0, False, " 1 ", "1.0"]
    examples = read_labelled(_jsonl(tmp_path / "a.jsonl", [{"text": f"t{i}", "label": v}
                                                           for i, v in enumerate(values)]))
    assert [e.label for e in examples] == ["1", "1", "1", "1", "0", "0", "0", "0", "1", "1"]
    assert sorted_labels({e.label for e in examples}) == ["0", "1"]
    # a clean file reads as it always did: names as written, integers as integers
    (tmp_path / "b.tsv").write_text("text\tlabel\nfine\tpositive\nbad\tnegative\nok\t neutral \n")
    assert [e.label for e in read_labelled(tmp_path / "b.tsv")] == ["positive", "negative", "neutral"]
    (tmp_path / "c.csv").write_text("text,label\na,0\nb,1\nc,10\n")
    assert sorted_labels({e.label for e in read_labelled(tmp_path / "c.csv")}) == ["0", "1", "10"]


def test_label_kinds_that_name_different_classes_are_one_error(tmp_path):
    path = _jsonl(tmp_path / "a.jsonl", [{"text": "a", "label": "positive"}, {"text": "b", "label": "negative"},
                                         {"text": "c", "label": 1}, {"text": "d", "label": True}])
    with pytest.raises(BertkitError) as error:
        read_labelled(path)
    assert str(error.value) == (f'{path}: labels of different kinds: names ("positive" at {path}:1), integers (1 at '
                                f'{path}:3), booleans (true at {path}:4); write every label as a name, or every one '
                                'as an integer')
    path = _jsonl(tmp_path / "b.jsonl", [{"text": "a", "label": 1}, {"text": "b", "label": 0.5}])
    with pytest.raises(BertkitError, match=r"non-integer numbers \(0.5 at .*b.jsonl:2\).*look like scores"):
        read_labelled(path)
    path = _jsonl(tmp_path / "c.jsonl", [{"text": "a", "label": [0]}, {"text": "b", "label": [1]}])
    with pytest.raises(BertkitError, match=r"c.jsonl:1: the label \[0\] is a JSON list; give one label per row"):
        read_labelled(path)


def test_rows_with_no_label_are_refused_or_skipped_with_their_count(tmp_path):
    path = tmp_path / "a.jsonl"
    rows = [{"text": f"t{i}", "label": i % 2} for i in range(20)]
    rows[3]["label"], rows[7]["label"], rows[9]["label"] = None, "nan", ""
    del rows[12]["label"]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows).replace('"nan"', "NaN", 1) + "\n")
    assert '"label": NaN' in path.read_text()  # JSON's NaN (a float), as pandas writes it
    with pytest.raises(BertkitError) as error:
        read_labelled(path)  # a command that cannot skip rows (evaluate) does not offer to
    assert str(error.value) == (f"{path}:4: 4 of the file's 20 rows have no label, this one first; fill them in or "
                                "remove them")
    with pytest.raises(BertkitError, match=r"a.jsonl:4: 4 of the file's 20 rows have no label, this one first; fill "
                                           r"them in or remove them, or pass --skip-bad-lines to skip and count "
                                           r"them$"):
        read_labelled(path, skip_bad_lines=False)
    warnings = []
    examples = read_labelled(path, skip_bad_lines=True, warn=warnings.append)
    assert len(examples) == 16 and "t3" not in {e.text for e in examples}
    assert warnings == [f"skipped 4 of 20 rows with no label ({path}:4 first)"]
    scores = []  # a regression's rows lack a score, and say so (they read "no label")
    read_labelled(path, skip_bad_lines=True, warn=scores.append, scores=True)
    assert scores == [f"skipped 4 of 20 rows with no score ({path}:4 first)"]
    _jsonl(path, [{"text": "a", "label": None}])
    with pytest.raises(BertkitError, match=r"a.jsonl: no rows left: 1 has no label \(line 1 first\)"):
        read_labelled(path, skip_bad_lines=True)


def test_empty_texts_are_refused_or_skipped_with_their_count(tmp_path):
    # a third of the texts empty; a quoted text over two lines first, so rows and lines differ
    body = "".join(f"{'   ' if i % 3 == 1 else f'text {i}'},{i % 2}\n" for i in range(9))
    (tmp_path / "a.csv").write_text(f'text,label\n"two\nlines",1\n{body}x,\n')
    with pytest.raises(BertkitError, match=r"a.csv:5: 3 of the file's 11 rows have an empty text, this one first; "
                                           r"1 has no label \(line 13 first\); fill them in or remove them, or pass "
                                           r"--skip-bad-lines"):
        read_labelled(tmp_path / "a.csv", skip_bad_lines=False)
    warnings = []
    examples = read_labelled(tmp_path / "a.csv", skip_bad_lines=True, warn=warnings.append)
    assert [e.text for e in examples][:3] == ["two\nlines", "text 0", "text 2"] and len(examples) == 7
    assert warnings == [f"skipped 4 of 11 rows: 3 with an empty text ({tmp_path / 'a.csv'}:5 first), 1 with no label "
                        f"({tmp_path / 'a.csv'}:13 first)"]
    # a pair task's row with an empty second text is as bad as one with an empty first (it was read as pair '')
    (tmp_path / "p.csv").write_text("text,pair,label\na,b,1\nc, ,0\nd,e,0\n")
    with pytest.raises(BertkitError, match=r"p.csv:3: 1 of the file's 3 rows has an empty text pair"):
        read_labelled(tmp_path / "p.csv", text_pair_column="pair", skip_bad_lines=False)
    pairs = read_labelled(tmp_path / "p.csv", text_pair_column="pair", skip_bad_lines=True, warn=warnings.append)
    assert [(e.text, e.pair) for e in pairs] == [("a", "b"), ("d", "e")]


def test_rows_with_more_fields_than_the_header_are_refused_or_skipped_with_their_count(tmp_path):
    """An unquoted comma in a text gives its row an extra field: never read as a text cut short with the rest as its
    label; refused with its line (--skip-bad-lines offered where the command can skip), or skipped and counted."""
    from bertkit.text.tasks import read_pairs

    path = tmp_path / "c.csv"
    path.write_text("text,label\ngood film,pos\nbad, very bad film,neg\nfine,pos\ndull,neg,\nawful, awful,neg\n")
    hint = "; or pass --skip-bad-lines to skip and count such rows"
    message = (f"{path}:3: 3 fields, the header has 2 (a comma inside a text? put the text in double quotes; or a "
               "column the header does not name? name it")
    for skip, end in ((None, ")"), (False, hint + ")")):
        with pytest.raises(BertkitError) as error:
            read_labelled(path, skip_bad_lines=skip)
        assert str(error.value) == message + end
    warnings = []
    examples = read_labelled(path, skip_bad_lines=True, warn=warnings.append)
    # the empty trailing field of "dull,neg," is a spreadsheet's habit, not an extra column: the row is kept
    assert [(e.text, e.label) for e in examples] == [("good film", "pos"), ("fine", "pos"), ("dull", "neg")]
    assert warnings == [f"skipped 2 of 5 rows with more fields than the header ({path}:3 first)"]
    pairs = tmp_path / "p.csv"
    pairs.write_text("s1,s2,score\na,b,1\nc, d,e,2\nf,g,3\n")
    with pytest.raises(BertkitError, match=r"p.csv:3: 4 fields, the header has 3 .*such rows\)$"):
        read_pairs(pairs, "s1", "s2", "score", "score", max_score=5, skip_bad_lines=False)
    warnings = []
    kept = read_pairs(pairs, "s1", "s2", "score", "score", max_score=5, skip_bad_lines=True, warn=warnings.append)
    assert [(p.text, p.score) for p in kept] == [("a", 1.0), ("f", 3.0)]
    assert warnings == [f"skipped 1 of 3 rows with more fields than the header ({pairs}:3 first)"]


def test_pairs_missing_scores_and_labels_are_counted_and_labels_canonical(tmp_path):
    from bertkit.text.tasks import read_pairs

    rows = [{"sentence1": f"a{i}", "sentence2": f"b{i}", "score": i % 5, "label": i % 2} for i in range(10)]
    rows[2]["score"], rows[5]["score"], rows[6]["sentence2"] = None, "nan", " "
    rows[1]["label"], rows[3]["label"] = True, "0.0"
    path = _jsonl(tmp_path / "p.jsonl", rows)
    with pytest.raises(BertkitError, match=r"p.jsonl:3: 2 of the file's 10 rows have no score, this one first; 1 has "
                                           r"an empty or missing sentence \(line 7 first\)"):
        read_pairs(path, "sentence1", "sentence2", "score", "score", max_score=5.0, skip_bad_lines=False)
    warnings = []
    pairs = read_pairs(path, "sentence1", "sentence2", "score", "score", max_score=5.0, skip_bad_lines=True,
                       warn=warnings.append)
    assert [p.score for p in pairs] == [0.0, 1.0, 3.0, 4.0, 2.0, 3.0, 4.0] and len(warnings) == 1
    assert warnings[0].startswith("skipped 3 of 10 rows: 2 with no score")
    labelled = read_pairs(path, "sentence1", "sentence2", "label", "label", skip_bad_lines=True)
    assert [p.label for p in labelled] == ["0", "1", "0", "0", "0", "1", "1", "0", "1"]  # true and "0.0" canonical


def test_a_held_out_split_never_keeps_a_label_from_training():
    """20 rows, one of a rare class, 10% held out: some seeds put the rare row in validation only, so training
    never saw the class and its validation rows were all errors. It goes back to training; other draws stay."""
    from bertkit.text.tasks import hold_out

    rows = [("common", i) for i in range(19)] + [("rare", 19)]
    labels_of = lambda row: [row[0]]  # noqa: E731
    moved = 0
    for seed in range(50):
        plain_train, plain_validation = hold_out(rows, 0.1, seed)
        train, validation = hold_out(rows, 0.1, seed, labels_of)
        assert ("rare", 19) in train and validation  # every label trained, something still held out
        if ("rare", 19) in plain_validation:
            moved += 1
            assert validation == [r for r in plain_validation if r[0] != "rare"]
        else:
            assert (train, validation) == (plain_train, plain_validation)  # the usual draw, unchanged
    assert moved >= 1  # the case did occur among the seeds


def test_a_semicolon_separated_file_is_named_as_one(tmp_path):
    """Excel's ';'-separated CSV drew "a comma inside a text? put the text in double quotes" (a review, 2026-11-28):
    a one-field header holding ';' says what the file is."""
    path = tmp_path / "support.csv"
    path.write_text("text;label\nmy card, again;billing\nwhere is it;shipping\n")
    # (the header is checked for the named columns before any row's width: the same line for both files)
    with pytest.raises(BertkitError, match=r"support.csv: no text column 'text': its header 'text;label' is one "
                                           r"field: a ';'-separated file\?"):
        read_labelled(path)
    path.write_text("text;label\nmy card again;billing\n")
    with pytest.raises(BertkitError, match=r"no text column 'text': its header 'text;label' is one field"):
        read_labelled(path)


def test_a_scored_pair_files_columns_are_found_by_name_in_any_format_or_by_the_benchmarks_layout(tmp_path):
    from bertkit.text.pair_files import STS_BENCHMARK, sts_columns
    from bertkit.text.tasks import read_pairs

    # Hugging Face's GLUE STS-B calls the score `label`: a JSONL file of it was read for a `score` key and refused
    hf = tmp_path / "hf.jsonl"
    hf.write_text('\n{"sentence1": "A man plays.", "sentence2": "A man is playing.", "label": 4.5, "idx": 0}\n')
    assert sts_columns(hf) == ("sentence1", "sentence2", "label")
    assert [p.score for p in read_pairs(hf, *sts_columns(hf)[:2], "score", sts_columns(hf)[2])] == [4.5]
    named = tmp_path / "named.jsonl"
    named.write_text('{"sentence1": "a", "sentence2": "b", "score": 1.0, "label": 9}\n')
    assert sts_columns(named) == ("sentence1", "sentence2", "score")  # score first, as in a header
    (tmp_path / "odd.json").write_text("[1]\n")
    assert sts_columns(tmp_path / "odd.json") == ("sentence1", "sentence2", "score")  # the reader says what is wrong
    tsv = tmp_path / "named.tsv"
    tsv.write_text("sentence1\tsentence2\tlabel\na\tb\t3\n")
    assert sts_columns(tsv) == ("sentence1", "sentence2", "label")
    bench = tmp_path / "sts-dev.csv"
    bench.write_text("main-captions\tMSRvid\t2012test\t0000\t5.000\tA man plays.\tA man is playing.\n")
    assert sts_columns(bench) == STS_BENCHMARK
    (tmp_path / "other.csv").write_text("a,b,c\n1,2,3\n")
    with pytest.raises(BertkitError, match="cannot tell its columns"):
        sts_columns(tmp_path / "other.csv")


def test_what_a_conll_reader_cannot_read_is_said_plainly(tmp_path):
    # a JSON lines export (tokens / ner_tags) said "tag '"O"]}' is not O or PREFIX-TYPE"; --tag-column 0 read the
    # words as tags; a no-break space inside a word made "3 columns, expected 2"
    exported = tmp_path / "ner.jsonl"
    exported.write_text('{"tokens": ["EU", "rejects"], "ner_tags": ["B-ORG", "O"]}\n')
    with pytest.raises(BertkitError, match=r"ner.jsonl: NER reads CoNLL column files \(a word and its tag per line, "
                                           r"a blank line between sentences\), not JSON lines"):
        read_conll(exported)
    conll = tmp_path / "ner.txt"
    conll.write_text("Peter\u00a0Black B-PER\nlives O\n\nin O\n")
    assert read_conll(conll)[0].tokens == ("Peter\u00a0Black", "lives")
    # but one that ends a line is no part of the tag (it made a type "ORG\xa0"), and a line of them is blank
    conll.write_text("EU NNP I-ORG\u00a0\nrejects VBZ O\n\u00a0\nPeter NNP I-PER\u2009\n\u3000 SP O\n")
    assert [(s.tokens, s.tags) for s in read_conll(conll)] == [(("EU", "rejects"), ("B-ORG", "O")),
                                                               (("Peter", "\u3000"), ("B-PER", "O"))]
    conll.write_text("Peter\u00a0Black B-PER\nlives O\n\nin O\n")
    for column in (0, -2):
        with pytest.raises(BertkitError, match=f"tag column {column} is the word column"):
            read_conll(conll, tag_column=column)
