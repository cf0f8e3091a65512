"""Task data readers: labelled text (CSV / TSV / JSONL), CoNLL column files (with tag-scheme normalisation), sentence
pairs, and parallel text (one sentence per line, source and target files aligned by line).

Every reader returns plain Python records and raises `BertkitError` naming the file (and line) on bad input; the
finetuning jobs turn the records into batches. Labels are normalised to one canonical name per class
(`canonical_label`); rows without a label, score or text are refused with their count, or skipped and counted
(`BadRows`, --skip-bad-lines).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bertkit.errors import BertkitError
from bertkit.paths import need_file, resolve_data_path
from bertkit.text.corpus import allow_long_fields, csv_dialect, csv_error
from bertkit.text.labels import LabelKinds, cased_apart, spelled_twice


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


def _rows(path: Path, header: bool = True, overfull: list[int] | None = None, hint: str = "",
          check: Callable[[list[str]], None] | None = None) -> tuple[list[str], list[dict], list[int]]:
    """Header, rows and each row's 1-based line in the file (where it starts) of a CSV / TSV / JSONL file. Without a
    header (`header=False`), a row's columns are named by their 0-based position: "0", "1", …

    A row with more (non-empty) fields than the header is an error naming its line (`hint` ends its message), or,
    given an `overfull` list, left out with its line appended there (a reader's --skip-bad-lines counts it). `check`
    sees the columns (a CSV / TSV header before any row: a column it lacks is the error, where a headerless file's
    first row taken for a header made its later rows "overfull")."""
    need_file(path)
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
        rows, lines = [], []
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
                lines.append(number)
        header = list(dict.fromkeys(key for row in rows for key in row))
        if check is not None:
            check(header)
        return header, rows, lines
    # newline="": quoted CSV fields keep their line breaks, and nothing splits at U+2028 & co.
    allow_long_fields()  # a review or an article can be longer than csv's default 128 kB per field
    reader = csv.reader(io.StringIO(text, newline=""), **csv_dialect(text.split("\n", 1)[0], suffix))
    table, lines, start = [], [], 1
    try:
        for row in reader:
            if row:  # not a blank line
                table.append(row)
                lines.append(start)
            start = reader.line_num + 1  # a quoted field may span lines: the next row starts after this one
    except csv.Error as exc:
        raise csv_error(path, reader.line_num, exc, suffix) from None
    if header:
        names, kept, kept_lines = (table[0] if table else []), [], []
        if check is not None:
            check(names)
        for row, line in zip(table[1:], lines[1:]):
            # zip would drop the extra fields without a word: the text cut at an unquoted comma and the next piece
            # taken as the label (empty trailing fields, a spreadsheet's habit, are harmless)
            if len(row) > len(names) and any(cell.strip() for cell in row[len(names):]):
                if overfull is not None:
                    overfull.append(line)
                    continue
                # tab-separated files are read without quoting (`csv_dialect`): there a tab cannot be in a text
                fix = "replace it with a space" if reader.dialect.delimiter == "\t" else "put the text in double quotes"
                separator = "tab" if reader.dialect.delimiter == "\t" else "comma"
                if (other := _other_separator(names)) is not None:
                    raise BertkitError(f"{path}:{line}: {len(row)} fields, the header has {len(names)}: {other}")
                raise BertkitError(f"{path}:{line}: {len(row)} fields, the header has {len(names)} (a {separator} "
                                   f"inside a text? {fix}; or a column the header does not name? name it{hint})")
            kept.append(dict(zip(names, row)))
            kept_lines.append(line)
        return names, kept, kept_lines
    names = [str(i) for i in range(max((len(row) for row in table), default=0))]
    if check is not None:
        check(names)
    return names, [{str(i): value for i, value in enumerate(row)} for row in table], lines


def _other_separator(names: list[str]) -> str | None:
    """What a one-field header holding ';' or '|' says: the file is separated by it (Excel writes ';' in many
    European locales), which bertkit does not read (the advice was to quote commas; a review, 2026-11-28)."""
    if len(names) != 1:
        return None
    mark = next((mark for mark in (";", "|") if mark in names[0]), None)
    return None if mark is None else (f"its header '{names[0]}' is one field: a {mark!r}-separated file? a .csv is "
                                      "read as comma-separated and a .tsv as tab-separated: save it as one of those "
                                      "(or, in a one-column file, put a text holding a comma in double quotes)")


def _columns(path: Path, roles: dict[str, str | None], overfull: list[int] | None = None,
             hint: str = "") -> tuple[list[str], list[dict], list[int]]:
    """Rows (and their lines) of a file read for the named columns (role -> column); columns given as positions
    mean no header. `overfull`, `hint`: as `_rows` takes them."""
    given = {role: column for role, column in roles.items() if column is not None}
    positions = [is_index(c) for c in given.values()]
    if any(positions) and not all(positions):
        raise BertkitError(f"{path}: give every column as a name (a file with a header row) or every one as a "
                           f"0-based position (no header), not a mix: {', '.join(map(str, given.values()))}")

    def check(header: list[str]) -> None:
        for role, column in given.items():
            if str(column) in header:
                continue
            if not all(positions) and (other := _other_separator(header)) is not None:
                raise BertkitError(f"{path}: no {role} column '{column}': {other}")
            found = (f"{len(header)} columns per row" if all(positions) else
                     f"columns found: {', '.join(header) or 'none'}")
            # the STS benchmark's files have no header: their first row's score read as a column's name
            data = not all(positions) and any(_is_number(name) for name in header)
            raise BertkitError(f"{path}: no {role} column '{column}' ({found})" + (
                "; its first row looks like data, not a header: for a file without one, give every column as a "
                "0-based position" if data else ""))

    return _rows(path, not all(positions) or not positions, overfull, hint, check)


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


# -------------------------------------------------------------------------------------------- bad rows

@dataclass
class BadRows:
    """The rows of a task file that lack what the task needs (a label, a score, a text), by reason: how many, and
    the first one's line. Readers leave them out; `settle` then refuses the file or counts them in a warning."""

    path: Path
    rows: int  # rows in the file, bad ones included
    reasons: dict[str, list[int]] = field(default_factory=dict)  # reason -> [rows, the first one's line]

    def add(self, reason: str, line: int) -> None:
        self.reasons.setdefault(reason, [0, line])[0] += 1

    def settle(self, kept: int, skip_bad_lines: bool | None) -> str | None:
        """Refuse the file when it has bad rows and the command does not skip them (None: the command cannot skip
        them, so the error does not offer it), or when none is left; else the warning counting those skipped."""
        if not self.reasons:
            return None
        if skip_bad_lines and kept:
            total = sum(n for n, _ in self.reasons.values())
            if len(self.reasons) == 1:
                (reason, (_, line)), = self.reasons.items()
                return Skipped(f"skipped {total:,} of {self.rows:,} rows with {reason} ({self.path}:{line} first)",
                               total)
            counts = [f"{n:,} with {reason} ({self.path}:{line} first)" for reason, (n, line) in self.reasons.items()]
            return Skipped(f"skipped {total:,} of {self.rows:,} rows: {', '.join(counts)}", total)
        (reason, (n, line)), *others = sorted(self.reasons.items(), key=lambda item: item[1][1])
        also = "".join(f"; {m:,} {_have(m)} {other} (line {first} first)" for other, (m, first) in others)
        if skip_bad_lines:
            raise BertkitError(f"{self.path}: no rows left: {n:,} {_have(n)} {reason} (line {line} first){also}")
        hint = "" if skip_bad_lines is None else ", or pass --skip-bad-lines to skip and count them"
        rows = f"{self.rows:,} row{'s' * (self.rows != 1)}"
        raise BertkitError(f"{self.path}:{line}: {n:,} of the file's {rows} {_have(n)} {reason}, this one first{also}; "
                           f"fill them in or remove them{hint}")


class Skipped(str):
    """The warning counting a file's skipped rows, with the count itself (`rows`) for a report that records it."""

    rows: int

    def __new__(cls, message: str, rows: int) -> "Skipped":
        said = super().__new__(cls, message)
        said.rows = rows
        return said


def _have(count: int) -> str:
    return "has" if count == 1 else "have"


def _finish(path: Path, examples: list, bad: BadRows, skip_bad_lines: bool | None,
            warn: Callable[[str], None] | None, what: str) -> list:
    """A reader's examples once its bad rows are settled (refused, or skipped with a warning through `warn`)."""
    message = bad.settle(len(examples), skip_bad_lines)
    if not examples:
        raise BertkitError(f"{path}: no {what} (only a header?)")
    if message and warn is not None:
        warn(message)
    return examples


def _task_rows(path: Path, roles: dict[str, str | None], skip_bad_lines: bool | None
               ) -> tuple[list[dict], list[int], BadRows]:
    """A task file's rows and their lines (`_columns`), and its BadRows holding the rows with more fields than the
    header: collected there when the command skips bad rows, else an error from `_rows` (with the --skip-bad-lines
    hint where the command can skip; None: it cannot)."""
    overfull = [] if skip_bad_lines else None
    hint = "" if skip_bad_lines is None else "; or pass --skip-bad-lines to skip and count such rows"
    _, rows, lines = _columns(path, roles, overfull, hint)
    bad = BadRows(path, len(rows) + len(overfull or []))
    for line in overfull or []:
        bad.add("more fields than the header", line)
    return rows, lines, bad


def _text(value) -> str:
    return "" if value is None else str(value).strip()


def read_labelled(path: str | Path, text_column: str = "text", label_column: str = "label",
                  text_pair_column: str | None = None, skip_bad_lines: bool | None = None,
                  warn: Callable[[str], None] | None = None, scores: bool = False) -> list[LabelledText]:
    """Classification examples from CSV / TSV / JSONL, their labels canonical class names (`canonical_label`: 1,
    "1", 1.0 and true are all "1"). Rows with an empty text (or text pair) or no label are refused with their count;
    with `skip_bad_lines` they are skipped and the count goes to `warn` (None: the caller cannot skip them). With
    `scores` the labels are numbers (regression): integers and fractions may mix."""
    path = Path(path)
    rows, lines, bad = _task_rows(path, {"text": text_column, "label": label_column, "text pair": text_pair_column},
                                  skip_bad_lines)
    examples, labels = [], LabelKinds(path)
    for row, line in zip(rows, lines):
        text = _text(row.get(text_column))
        pair = None if text_pair_column is None else _text(row.get(text_pair_column))
        if not text:  # an empty text would teach the classifier what [CLS] [SEP] alone means
            bad.add("an empty text", line)
        elif pair == "":  # a pair task's row with one side missing: the same, for the second segment
            bad.add("an empty text pair", line)
        elif (label := labels.read(row.get(label_column), line)) is None:
            bad.add("no score" if scores else "no label", line)  # a regression row lacks its score
        else:
            examples.append(LabelledText(text, pair, label))
    if not scores:
        labels.check()
        if warn is not None and (twice := spelled_twice(e.label for e in examples)):
            warn(f"{path}: labels {' and '.join(twice)} are one number written two ways, so two classes (write them "
                 "alike if they are one)")
        if warn is not None and (cased := cased_apart(e.label for e in examples)):  # a review, 2026-11-28
            warn(f"{path}: labels {' and '.join(cased)} differ only in case, so they are classes of their own "
                 "(write them alike if they are one)")
    return _finish(path, examples, bad, skip_bad_lines, warn, "examples")


def read_texts(path: str | Path, text_column: str = "text", text_pair_column: str | None = None,
               warn: Callable[[str], None] | None = None) -> list[tuple[str, str | None]]:
    """Unlabelled inputs for prediction: (text, pair) per CSV / TSV / JSONL row (columns given as 0-based positions
    mean no header row, as finetuning and `evaluate` read them: STS-B, CoLA), or per non-blank line of any other
    file (a pair model reads `text<TAB>pair` lines; `warn` hears how many blank lines were skipped, in a JSON lines
    file too: the output has one line per row)."""
    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".json", ".csv", ".tsv"):
        _, rows, lines = _columns(path, {"text": text_column, "text pair": text_pair_column})
        blank = (lines[-1] - len(rows)) if rows and path.suffix.lower() in (".jsonl", ".json") else 0
        if blank and warn is not None:
            warn(f"skipped {blank:,} blank line{'s' if blank != 1 else ''} before or between the rows of {path}: the "
                 "output has one line per row")
        # stripped as the finetuning and `evaluate` read them (`_text`): a trailing space is another input to the
        # tokenizer, and flipped a label
        return [(_text(row.get(str(text_column))), None if text_pair_column is None else
                 _text(row.get(str(text_pair_column)))) for row in rows]
    need_file(path)
    try:  # bytes: text mode would make a lone \r a line break, where stdin keeps it inside its text
        lines = path.read_bytes().decode("utf-8-sig").split("\n")
    except UnicodeDecodeError as exc:
        raise BertkitError(f"{path}: invalid UTF-8 at byte {exc.start}") from None
    return split_lines(lines, text_pair_column is not None, warn)


def read_kept(path: str | Path, columns: tuple[str, ...], text_column: str = "text") -> list[dict]:
    """The `columns` of every row of a CSV / TSV / JSONL input as written (ids, gold labels: what `predict
    --keep-column` copies into each output record), row for row with `read_texts`."""
    header, rows, _ = _columns(Path(path), {"text": text_column})
    if missing := [str(c) for c in columns if str(c) not in header]:
        raise BertkitError(f"{path}: no column '{missing[0]}' to keep (columns found: {', '.join(header)})")
    return [{str(c): row.get(str(c)) for c in columns} for row in rows]


def non_blank(lines: list[str], warn: Callable[[str], None] | None = None) -> list[str]:
    """The non-blank lines, as written. Blank lines before the last one shift every later output against its input
    line: `warn` hears how many there were."""
    out, blank, skipped = [], 0, 0
    for line in lines:
        if not line.strip():
            blank += 1
            continue
        skipped, blank = skipped + blank, 0  # blank lines after the last text shift nothing
        out.append(line)
    if skipped and warn is not None:
        warn(f"skipped {skipped:,} blank line{'s' if skipped != 1 else ''} before or between the texts: the output "
             "has one line per non-blank input line")
    return out


def split_lines(lines: list[str], pairs: bool, warn: Callable[[str], None] | None = None,
                ) -> list[tuple[str, str | None]]:
    """Non-blank lines as inputs, stripped (`non_blank`; `warn` hears of blank lines between them); with `pairs` each
    line is `text<TAB>pair`."""
    out = []
    for line in non_blank(lines, warn):
        text, _, pair = line.partition("\t") if pairs else (line, "", None)
        out.append((text.strip(), None if pair is None else pair.strip()))
    # a lone \r stays in its text (as in every reader); inputs holding one inside (old Mac line endings: a whole
    # file of them is one input) are said
    inner = [number for number, (text, pair) in enumerate(out, start=1) if "\r" in text or "\r" in (pair or "")]
    if inner and warn is not None:
        warn(f"{len(inner):,} input{'s hold' if len(inner) != 1 else ' holds'} a carriage return inside the text (the "
             f"first: input {inner[0]:,}), each read as one text (old Mac line endings? convert them to \\n, e.g. "
             "tr '\\r' '\\n')")
    return out


_COLUMNS = re.compile(r"[^ \t\r\n\f\v]+")  # a CoNLL line's columns: apart by ASCII spaces and tabs only


def read_conll(path: str | Path, tag_column: int = -1, iob: bool = True) -> list[TaggedSentence]:
    """CoNLL column files: whitespace-separated columns, a blank line between sentences, -DOCSTART- skipped.

    Every non-blank line of a file must have the same number of columns (the error names file:line). Span tags
    (`iob`) are normalised to IOB2 whatever the file's scheme (IOB1, IOB2 or BIOES); with `iob=False` the column is
    read as it is (part-of-speech tags).
    """
    path = Path(path)
    need_file(path)
    if (suffix := path.suffix.lower()) in (".jsonl", ".json", ".csv"):  # its first line was read as a word and tag
        raise BertkitError(f"{path}: NER reads CoNLL column files (a word and its tag per line, a blank line between "
                           f"sentences), not {'JSON lines' if suffix != '.csv' else 'CSV'}")
    sentences: list[TaggedSentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    width = None

    def flush():
        if tokens:
            sentences.append(TaggedSentence(tuple(tokens), tuple(to_iob2(tags) if iob else tags)))
            tokens.clear()
            tags.clear()

    # utf-8-sig: an editor's byte-order mark is no part of the first token (nor of a -DOCSTART- line)
    with path.open(encoding="utf-8-sig", errors="strict") as fh:
        try:
            for number, line in enumerate(fh, start=1):
                # not str.split(): a no-break space inside a word is no column; but one that ends a line (a file
                # through HTML or a word processor) is no part of the tag ("I-ORG\xa0" was a type of its own) and a
                # line of such spaces alone is blank (one opening a line may be its word: U+3000 in CJK files)
                columns = _COLUMNS.findall(line.rstrip())
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
                    if tag_column % width == 0:
                        raise BertkitError(f"{path}:{number}: tag column {tag_column} is the word column (column 0 "
                                           "is always the word)")
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
               max_score: float | None = None, skip_bad_lines: bool | None = None,
               warn: Callable[[str], None] | None = None) -> list[SentencePair]:
    """Sentence pairs from CSV / TSV / JSONL. `target` "score": a number in [0, max_score] per row (cosine);
    "label": a label, made canonical as `read_labelled` does (softmax); None: no target (mnrl). Columns are names,
    or 0-based positions for a file without a header (the STS benchmark: `--text-column 5 --text-pair-column 6
    --label-column 4`). Rows with an empty sentence or no target are refused or skipped as `read_labelled` does."""
    path = Path(path)
    roles = {"first sentence": text_column, "second sentence": pair_column, "negative": negative_column}
    if target is not None:
        roles[target] = target_column
    rows, lines, bad = _task_rows(path, roles, skip_bad_lines)
    examples, labels = [], LabelKinds(path)
    for number, (row, line) in enumerate(zip(rows, lines), start=1):
        texts = [_text(row.get(str(c))) for c in (text_column, pair_column)]
        if not all(texts):
            bad.add("an empty or missing sentence", line)
            continue
        raw = row.get(str(target_column)) if target is not None else None
        score = label = None
        if target == "score":
            score = _score(path, line, raw, max_score, header=number == 1 and is_index(target_column))
        elif target == "label":
            label = labels.read(raw, line)
        if target is not None and score is None and label is None:
            bad.add(f"no {target}", line)
        else:
            negative = None if negative_column is None else _text(row.get(str(negative_column)))
            examples.append(SentencePair(texts[0], texts[1], negative or None, score, label))
    labels.check()
    # (a headerless file's rows have only positions: its label column is unread where the recipe gave one, as
    # finetune-stsb's 4; the STS benchmark's 0.0 pairs trained as positives without a word, a review found)
    unread = [c for c in ("score", str(target_column), "label") if c in rows[0]] if target is None and rows else []
    if unread and warn is not None:
        # MNRL trains every pair as a positive: a scored file's 0.0 pairs were learned as similar, without a word
        column = f"column {unread[0]}" if is_index(unread[0]) else f"'{unread[0]}' column"
        warn(f"{path}: its {column} is not read by the mnrl loss, which trains every pair as a "
             "positive (keep only the similar pairs, e.g. a score of 4 or more of 5, or train with the cosine loss)")
    return _finish(path, examples, bad, skip_bad_lines, warn, "sentence pairs")


def _score(path: Path, line: int, raw, max_score: float | None, header: bool) -> float | None:
    """A pair's gold score, or None when it has none (missing, null, NaN, blank): a regression target, not a
    class, so 4 and 4.0 are the same number already."""
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "nan")):
        return None
    try:
        score = float(raw)
    except (TypeError, ValueError):
        raise BertkitError(f"{path}:{line}: score {raw!r} is not a number"
                           + (" (a header row? name the columns instead of giving positions)" if header else "")
                           ) from None
    if math.isnan(score):
        return None
    if max_score is not None and not 0.0 <= score <= max_score:
        raise BertkitError(f"{path}:{line}: score {score} is outside [0, {max_score}] "
                           "(give the scale's top: sentence_loss.max_score, or --max-score for evaluate-sts)")
    return score


def text_lines(text: str) -> list[str]:
    """Lines split at \n only, each line's trailing \r removed: str.splitlines() (and text-mode reading) would also
    split inside a sentence at U+2028, \x85, \x0c or a lone \r, and in a parallel corpus one such split on each
    side would pair every line between them with the wrong translation."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start another
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_lines(path: str | Path) -> list[str]:
    """A text file's lines (UTF-8, split as `text_lines` splits); the file names itself in errors."""
    path = resolve_data_path(path)
    need_file(path)
    try:
        return text_lines(path.read_bytes().decode("utf-8-sig"))  # bytes: text mode would turn a lone \r into a line
    except UnicodeDecodeError as exc:
        raise BertkitError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_parallel(source: str | Path, target: str | Path) -> tuple[list[tuple[str, str]], int]:
    """Aligned sentence pairs from two files, line i of one translating line i of the other. Files of different
    line counts are an error naming both counts; pairs with an empty side are skipped and counted.
    Returns (pairs, skipped)."""
    kept, _, lines = parallel_rows(source, target)
    return kept, lines - len(kept)


def parallel_rows(source: str | Path, target: str | Path) -> tuple[list[tuple[str, str]], list[int], int]:
    """`read_parallel`'s pairs with each one's line (0-based), and the files' line count: what a file written
    line for line with the source needs to put each output in its place."""
    src, tgt = read_lines(source), read_lines(target)
    if len(src) != len(tgt):
        raise BertkitError(f"{source} has {len(src):,} lines but {target} has {len(tgt):,}: parallel files must be "
                           "aligned line by line")
    pairs = [(s.strip(), t.strip()) for s, t in zip(src, tgt)]
    rows = [i for i, (s, t) in enumerate(pairs) if s and t]
    if not rows:
        raise BertkitError(f"{source} / {target}: no sentence pairs (every line has an empty side)")
    return [pairs[i] for i in rows], rows, len(pairs)



def hold_out(examples: list, fraction: float, seed: int,
             labels_of: Callable[[object], list[str]] | None = None) -> tuple[list, list]:
    """Hold out a seeded `fraction` of the training examples for validation (at least one, and one left). With
    `labels_of` (an example's labels), a label the draw put in validation only goes back to training with one of its
    examples (the first held), so that training sees every label (a rare class held out whole was never learned and
    all its validation rows were errors); every other draw is unchanged."""
    if len(examples) < 2:
        raise BertkitError("need at least 2 training examples to hold one out for validation (or give a validation "
                           "file)")
    order = np.random.default_rng([seed, 17]).permutation(len(examples))
    held = max(1, round(fraction * len(examples)))
    kept, out = order[held:].tolist(), order[:held].tolist()
    if labels_of is not None:
        trained = {label for i in kept for label in labels_of(examples[i])}
        for i in list(out):
            missing = set(labels_of(examples[i])) - trained
            if missing and len(out) > 1:
                out.remove(i)
                kept.append(i)
                trained |= set(labels_of(examples[i]))
    return [examples[i] for i in sorted(kept)], [examples[i] for i in sorted(out)]
