"""Labels as read: a CSV / TSV field or a JSON value → its canonical class name (1, "1", 1.0 and true are one class),
the kinds a file's labels are written as (a file mixing names and integers is refused), and what a run's stored
names make of a label written otherwise."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path

from bertkit.errors import BertkitError

INTEGER = re.compile(r"[+-]?[0-9]+")
NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
# the kinds a label can be written as, in messages; kinds in one group name the same classes (true is the class 1)
KINDS = {"name": "names", "integer": "integers", "boolean": "booleans", "fraction": "non-integer numbers"}
GROUPS = {"name": "name", "integer": "integer", "boolean": "integer", "fraction": "fraction"}


def canonical_label(raw) -> tuple[str | None, str]:
    """A label as read (a JSON value, or a CSV / TSV field) → (its canonical class name, its kind). An integer, a
    float equal to one, its numeric string and a boolean (true = 1) are one class, written "1"; a JSON number that is
    not an integer is written as Python prints it (0.5 → "0.5"), a text one as written ("1.10" and "1.1" are two
    classes); any other text is a name, stripped. No label (missing, null, NaN, blank):
    (None, "missing"); a JSON list or object: (None, "list" / "object")."""
    if raw is None:
        return None, "missing"
    if isinstance(raw, bool):  # before int: bool is an int subclass
        return str(int(raw)), "boolean"
    if isinstance(raw, int):
        return str(raw), "integer"
    if isinstance(raw, float):
        return _number(raw)
    if isinstance(raw, (list, dict)):
        return None, "list" if isinstance(raw, list) else "object"
    text = str(raw).strip()
    if not text or text.lower() == "nan":  # NaN written out as text (str(float("nan")), a dataframe's cell)
        return None, "missing"
    if INTEGER.fullmatch(text):
        return str(int(text)), "integer"  # exact for any length (a float would round big ones)
    if NUMBER.fullmatch(text):
        exact = Decimal(text)  # a float would round 12345678901234567.7 to an integer
        # (an exponent past 40 digits is no class number: kept as written, where int() would build 1e9999999)
        if abs(exact.adjusted()) <= 40 and exact == exact.to_integral_value():
            return str(int(exact)), "integer"
        # a fraction keeps its text: classes are names, and "1.10" and "1.1" (section or version codes) are two of
        # them, where a float made them one without a word
        return text, "fraction"
    return text, "name"


def _number(value: float) -> tuple[str | None, str]:
    if math.isnan(value):
        return None, "missing"
    if value.is_integer():
        return str(int(value)), "integer"
    return repr(value), "fraction"


class LabelKinds:
    """One file's labels made canonical, with the first example of every kind they were written as, so that a file
    mixing kinds that name different classes ("positive" and 1, 0.5 and 1) is refused in one line."""

    def __init__(self, path: Path):
        self.path = path
        self.first: dict[str, tuple[object, int]] = {}  # kind -> (the first label of that kind as written, its line)

    def read(self, raw, line: int) -> str | None:
        """The row's canonical label, or None when it has none; a list or an object is an error."""
        label, kind = canonical_label(raw)
        if kind in ("list", "object"):
            raise BertkitError(f"{self.path}:{line}: the label {json.dumps(raw)[:60]} is a JSON {kind}; give one "
                               "label per row (a string or an integer)")
        if label is not None:
            self.first.setdefault(kind, (raw, line))
        return label

    def check(self) -> None:
        """Refuse labels whose kinds do not map to one another."""
        if len({GROUPS[kind] for kind in self.first}) > 1:
            kinds = ", ".join(f"{KINDS[kind]} ({json.dumps(raw, ensure_ascii=False)[:40]} at {self.path}:{line})"
                              for kind, (raw, line) in self.first.items())
            scores = " (non-integer numbers look like scores, not classes)" if "fraction" in self.first else ""
            raise BertkitError(f"{self.path}: labels of different kinds: {kinds}; write every label as a name, or "
                               f"every one as an integer{scores}")


def _fraction(label: str) -> bool:
    """A class name written as a non-integer number (a canonical label: integers are written as integers)."""
    return bool(NUMBER.fullmatch(label)) and not INTEGER.fullmatch(label)


def spelled_twice(labels: Iterable[str]) -> list[str]:
    """The first set of class names that are one non-integer number written differently ("1.5", "1.50"), if any:
    classes as written, where a float once made them one (and made codes such as "1.1" and "1.10" one)."""
    seen: dict[float, set[str]] = {}
    for label in labels:
        if _fraction(label):
            seen.setdefault(float(label), set()).add(label)
    return next((sorted(names) for names in seen.values() if len(names) > 1), [])


def cased_apart(labels: Iterable[str]) -> list[str]:
    """The first set of class names that differ only in case ("Billing", "billing"), if any: classes as written,
    which a hand-labelled file usually means as one."""
    seen: dict[str, set[str]] = {}
    for label in labels:
        seen.setdefault(label.casefold(), set()).add(label)
    return next((sorted(names) for names in seen.values() if len(names) > 1), [])


def written_otherwise(label: str, known: set[str] | list[str]) -> str | None:
    """The known label that is the same non-integer number as `label`, written otherwise ("0.5" for "0.50"), if
    exactly one is: a hint, never a mapping (a run trained on "1.1" has not seen the code "1.10"). Runs before
    2026-11-28 stored fractions as Python prints them."""
    if label in known or not _fraction(label):
        return None
    same = [name for name in known if _fraction(name) and float(name) == float(label)]
    return same[0] if len(same) == 1 else None
