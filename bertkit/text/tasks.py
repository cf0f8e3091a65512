"""Task data readers: labelled text (CSV / TSV / JSONL), CoNLL column files (with tag-scheme normalisation), sentence
pairs, and parallel text (one sentence per line, source and target files aligned by line).

Every reader returns plain Python records and raises `BertkitError` naming the file (and line) on bad input; the
finetuning jobs turn the records into batches.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bertkit.errors import BertkitError
from bertkit.paths import resolve_data_path
from bertkit.text.corpus import allow_long_fields, csv_dialect, csv_error


@dataclass(frozen=True)
class LabelledText:
    """One classification example: a text, an optional second text (pairs), and its label as a string."""

    text: str
    pair: str | None
    label: str


@dataclass(frozen=True)
class TaggedSentence:
    """One NER example: whitespace tokens and one tag per token (IOB2 after normalisation)."""

    tokens: tuple[str, ...]
    tags: tuple[str, ...]


@dataclass(frozen=True)
class SentencePair:
    """One sentence-training example: two texts (anchor and positive for mnrl), an optional hard negative, and a
    target: the gold score (cosine) or the pair's label (softmax); neither for mnrl."""

    text: str
    pair: str
    negative: str | None = None
    score: float | None = None
    label: str | None = None


def is_index(column: str | None) -> bool:
    """A column given as a 0-based position ("4") rather than a name: the file has no header row."""
    return column is not None and str(column).isdigit()


def _rows(path: Path, header: bool = True) -> tuple[list[str], list[dict]]:
    """Header and rows of a CSV / TSV / JSONL file. Without a header (`header=False`), a row's columns are named
    by their 0-based position: "0", "1", …"""
    if not path.is_file():
        raise BertkitError(f"{path}: no such file")
    suffix = path.suffix.lower()
    try:
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's byte-order mark is not part of a column name
    except UnicodeDecodeError as exc:
        raise BertkitError(f"{path}: invalid UTF-8 at byte {exc.start}") from None
    if not text.strip():
        raise BertkitError(f"{path}: empty file")
    if suffix in (".jsonl", ".json") and not header:
        raise BertkitError(f"{path}: JSON lines have field names; name the columns instead of giving positions")
    if suffix in (".jsonl", ".json"):
        rows = []
        # split on \n only: str.splitlines() would also split inside texts at U+2028, \x85, \x0c, …
        for number, line in enumerate(text.split("\n"), start=1):
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BertkitError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
                if not isinstance(record, dict):
                    raise BertkitError(f"{path}:{number}: expected a JSON object per line")
                rows.append(record)
        header = list(dict.fromkeys(key for row in rows for key in row))
        return header, rows
    # newline="": quoted CSV fields keep their line breaks, and nothing splits at U+2028 & co.
    allow_long_fields()  # a review or an article can be longer than csv's default 128 kB per field
    reader = csv.reader(io.StringIO(text, newline=""), **csv_dialect(text.split("\n", 1)[0], suffix))
    try:
        table = list(reader)
    except csv.Error as exc:
        raise csv_error(path, reader.line_num, exc, suffix) from None
    table = [row for row in table if row]  # blank lines
    if header:
        names = table[0] if table else []
        return names, [dict(zip(names, row)) for row in table[1:]]
    width = max((len(row) for row in table), default=0)
    return [str(i) for i in range(width)], [{str(i): value for i, value in enumerate(row)} for row in table]


def _columns(path: Path, roles: dict[str, str | None]) -> tuple[list[str], list[dict]]:
    """Rows of a file read for the named columns (role -> column); columns given as positions mean no header."""
    given = {role: column for role, column in roles.items() if column is not None}
    positions = [is_index(c) for c in given.values()]
    if any(positions) and not all(positions):
        raise BertkitError(f"{path}: give every column as a name (a file with a header row) or every one as a "
                           f"0-based position (no header), not a mix: {', '.join(map(str, given.values()))}")
    header, rows = _rows(path, header=not all(positions) or not positions)
    for role, column in given.items():
        if str(column) not in header:
            found = f"{len(header)} columns per row" if all(positions) else f"columns found: {', '.join(header) or 'none'}"
            raise BertkitError(f"{path}: no {role} column '{column}' ({found})")
    return header, rows


def read_labelled(path: str | Path, text_column: str = "text", label_column: str = "label",
                  text_pair_column: str | None = None) -> list[LabelledText]:
    """Classification examples from CSV / TSV / JSONL; labels kept as strings (ints become '0', '1', …)."""
    path = Path(path)
    _, rows = _columns(path, {"text": text_column, "label": label_column, "text pair": text_pair_column})
    examples = []
    for number, row in enumerate(rows, start=1):
        label, text = row.get(label_column), row.get(text_column)
        if label is None or text is None or (isinstance(label, str) and not label.strip()):
            raise BertkitError(f"{path}: example {number} (after the header) has no {'label' if text is not None else 'text'}")
        examples.append(LabelledText(str(text).strip(), None if text_pair_column is None else
                                     str(row.get(text_pair_column) or "").strip(), str(label).strip()))
    if not examples:
        raise BertkitError(f"{path}: no examples (only a header?)")
    return examples


def read_texts(path: str | Path, text_column: str = "text", text_pair_column: str | None = None,
               ) -> list[tuple[str, str | None]]:
    """Unlabelled inputs for prediction: (text, pair) per CSV / TSV / JSONL row, or per non-blank line of any other
    file (a pair model reads `text<TAB>pair` lines)."""
    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".json", ".csv", ".tsv"):
        header, rows = _rows(path)
        for role, column in (("text", text_column), ("text pair", text_pair_column)):
            if column is not None and column not in header:
                raise BertkitError(f"{path}: no {role} column '{column}' (columns found: "
                                   f"{', '.join(header) or 'none'})")
        return [(str(row.get(text_column) or ""), None if text_pair_column is None else
                 str(row.get(text_pair_column) or "")) for row in rows]
    if not path.is_file():
        raise BertkitError(f"{path}: no such file")
    try:
        lines = path.read_text(encoding="utf-8-sig").split("\n")
    except UnicodeDecodeError as exc:
        raise BertkitError(f"{path}: invalid UTF-8 at byte {exc.start}") from None
    return split_lines(lines, text_pair_column is not None)


def split_lines(lines: list[str], pairs: bool) -> list[tuple[str, str | None]]:
    """Non-blank lines as inputs; with `pairs` each line is `text<TAB>pair`."""
    out = []
    for line in lines:
        if not line.strip():
            continue
        if pairs:
            text, _, pair = line.partition("\t")
            out.append((text.strip(), pair.strip()))
        else:
            out.append((line.strip(), None))
    return out


def read_conll(path: str | Path, tag_column: int = -1, iob: bool = True) -> list[TaggedSentence]:
    """CoNLL column files: whitespace-separated columns, a blank line between sentences, -DOCSTART- skipped.

    Every non-blank line of a file must have the same number of columns (the error names file:line). Span tags
    (`iob`) are normalised to IOB2 whatever the file's scheme (IOB1, IOB2 or BIOES); with `iob=False` the column is
    read as it is (part-of-speech tags).
    """
    path = Path(path)
    if not path.is_file():
        raise BertkitError(f"{path}: no such file")
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    width = None

    def flush():
        if tokens:
            sentences.append(TaggedSentence(tuple(tokens), tuple(to_iob2(tags) if iob else tags)))
            tokens.clear()
            tags.clear()

    with path.open(encoding="utf-8", errors="strict") as fh:
        try:
            for number, line in enumerate(fh, start=1):
                columns = line.split()
                if not columns:
                    flush()
                    continue
                if columns[0] == "-DOCSTART-":
                    flush()
                    continue
                if width is None:
                    width = len(columns)
                    if not -width <= tag_column < width:
                        raise BertkitError(f"{path}:{number}: tag column {tag_column} does not exist in {width} "
                                           "columns")
                elif len(columns) != width:
                    raise BertkitError(f"{path}:{number}: {len(columns)} columns, expected {width} like the first "
                                       "line")
                try:
                    if iob:
                        _split_tag(columns[tag_column])
                except BertkitError as exc:
                    raise BertkitError(f"{path}:{number}: {exc}") from None
                tokens.append(columns[0])
                tags.append(columns[tag_column])
        except UnicodeDecodeError as exc:
            raise BertkitError(f"{path}: invalid UTF-8 ({exc.reason})") from None
    flush()
    if not sentences:
        raise BertkitError(f"{path}: no sentences")
    return sentences


def _split_tag(tag: str) -> tuple[str, str | None]:
    if tag == "O":
        return "O", None
    if len(tag) < 3 or tag[1] != "-" or tag[0] not in "BIESLU":
        raise BertkitError(f"tag {tag!r} is not O or PREFIX-TYPE with a prefix of B, I, E, S (or L, U)")
    return tag[0], tag[2:]


def to_iob2(tags: list[str] | tuple[str, ...]) -> list[str]:
    """Normalise one sentence's tags from IOB1, IOB2 or BIOES/BILOU to IOB2 (every entity starts with B-)."""
    out = []
    previous_type = None
    for tag in tags:
        prefix, kind = _split_tag(tag)
        if prefix == "O":
            out.append("O")
        elif prefix in ("B", "S", "U"):
            out.append(f"B-{kind}")
        else:  # I, E, L: continues the previous entity of the same type, or starts one (IOB1 style)
            out.append(f"I-{kind}" if previous_type == kind else f"B-{kind}")
        # after an E/S/L/U the entity is closed: a following I- starts a new one
        previous_type = kind if prefix in ("B", "I") else None
    return out


def read_pairs(path: str | Path, text_column: str, pair_column: str, target: str | None = None,
               target_column: str | None = None, negative_column: str | None = None,
               max_score: float | None = None) -> list[SentencePair]:
    """Sentence pairs from CSV / TSV / JSONL. `target` "score": a number in [0, max_score] per row (cosine);
    "label": a string label (softmax); None: no target (mnrl). Columns are names, or 0-based positions for a file
    without a header (the STS benchmark: `--text-column 5 --text-pair-column 6 --label-column 4`)."""
    path = Path(path)
    roles = {"first sentence": text_column, "second sentence": pair_column, "negative": negative_column}
    if target is not None:
        roles[target] = target_column
    _, rows = _columns(path, roles)
    examples = []
    for number, row in enumerate(rows, start=1):
        texts = [row.get(str(c)) for c in (text_column, pair_column)]
        if any(t is None or not str(t).strip() for t in texts):
            raise BertkitError(f"{path}: row {number} has an empty or missing sentence")
        negative = None if negative_column is None else str(row.get(str(negative_column)) or "").strip()
        score = label = None
        raw = row.get(str(target_column)) if target is not None else None
        if target == "score":
            try:
                score = float(raw)
            except (TypeError, ValueError):
                raise BertkitError(f"{path}: row {number}: score {raw!r} is not a number"
                                   + (" (a header row? name the columns instead of giving positions)"
                                      if number == 1 and is_index(target_column) else "")) from None
            if max_score is not None and not 0.0 <= score <= max_score:
                raise BertkitError(f"{path}: row {number}: score {score} is outside [0, {max_score}] "
                                   "(give the scale's top: sentence_loss.max_score, or --max-score for evaluate-sts)")
        elif target == "label":
            if raw is None or not str(raw).strip():
                raise BertkitError(f"{path}: row {number} has no label")
            label = str(raw).strip()
        examples.append(SentencePair(str(texts[0]).strip(), str(texts[1]).strip(), negative or None, score, label))
    if not examples:
        raise BertkitError(f"{path}: no sentence pairs (only a header?)")
    return examples


def read_lines(path: str | Path) -> list[str]:
    """A text file's lines (UTF-8, trailing newline and carriage return removed); the file names itself in errors."""
    path = resolve_data_path(path)
    if not path.is_file():
        raise BertkitError(f"{path}: no such file")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise BertkitError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_parallel(source: str | Path, target: str | Path) -> tuple[list[tuple[str, str]], int]:
    """Aligned sentence pairs from two files, line i of one translating line i of the other. Files of different
    line counts are an error naming both counts; pairs with an empty side are skipped and counted.
    Returns (pairs, skipped)."""
    src, tgt = read_lines(source), read_lines(target)
    if len(src) != len(tgt):
        raise BertkitError(f"{source} has {len(src):,} lines but {target} has {len(tgt):,}: parallel files must be "
                           "aligned line by line")
    pairs = [(s.strip(), t.strip()) for s, t in zip(src, tgt)]
    kept = [(s, t) for s, t in pairs if s and t]
    if not kept:
        raise BertkitError(f"{source} / {target}: no sentence pairs (every line has an empty side)")
    return kept, len(pairs) - len(kept)



def hold_out(examples: list, fraction: float, seed: int) -> tuple[list, list]:
    """Hold out a seeded `fraction` of the training examples for validation (at least one, and one left)."""
    if len(examples) < 2:
        raise BertkitError("need at least 2 training examples to hold one out for validation (or give a validation "
                           "file)")
    order = np.random.default_rng([seed, 17]).permutation(len(examples))
    held = max(1, round(fraction * len(examples)))
    keep = sorted(order[held:].tolist())
    return [examples[i] for i in keep], [examples[i] for i in sorted(order[:held].tolist())]


NAMED = ("sentence1", "sentence2", "score")
STS_BENCHMARK = ("5", "6", "4")  # stsbenchmark's sts-*.csv: genre, file, year, id, score, sentence1, sentence2


def sts_columns(path: Path) -> tuple[str, str, str]:
    """The columns of a scored-pair file: named (sentence1, sentence2, score; or label for the score) when its
    header has them, else the STS benchmark's positions when it looks like one."""
    if path.suffix.lower() in (".jsonl", ".json"):
        return NAMED
    try:
        with path.open(encoding="utf-8-sig") as fh:
            first = fh.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise BertkitError(f"{path}: unreadable ({exc})") from None
    allow_long_fields()
    try:
        fields = next(csv.reader([first], **csv_dialect(first, path.suffix.lower())), [])
    except csv.Error as exc:
        raise csv_error(path, 1, exc, path.suffix.lower()) from None
    if {"sentence1", "sentence2"} <= set(fields):
        return ("sentence1", "sentence2", "score" if "score" in fields else "label")
    try:
        if len(fields) >= 7 and 0.0 <= float(fields[4]) <= 5.0:
            return STS_BENCHMARK
    except ValueError:
        pass
    raise BertkitError(f"{path}: cannot tell its columns (no sentence1/sentence2 header, not the STS benchmark "
                       "layout); pass --sentence1-column, --sentence2-column and --score-column")
