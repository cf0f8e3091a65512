"""Task inputs → token ids: texts and text pairs for classification, words for tagging (with the first-subword map).

One `TaskEncoder` per model: it owns the tokenizer's truncation settings (a Hugging Face tokenizer.json may pad to a
fixed length or truncate elsewhere; bertkit pads per batch and truncates to `max_length`) and counts truncations, so
a job can report them once instead of silently losing text.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from bertkit.text.collate import IGNORE_INDEX

# Scripts written without spaces between words (Han, kana, Thai, Lao, Khmer, Myanmar): each character is a word, as
# their NER corpora have it (a run of them would be one "word": 李明在北京工作 one entity)
_UNSPACED = ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),
             (0x20000, 0x2FFFF), (0x0E00, 0x0EFF), (0x1780, 0x17FF), (0x1000, 0x109F))
_JOINERS = "-'’."  # inside a word, between word characters: "well-known", "don't", "U.S"
# dotted initials take a final dot ("U.S." "p.m." "F.C."); a dotted word or number does not ("Amazon.com", "3.5")
_INITIALS = re.compile(r"(?:[^\W\d_]{1,2}\.)+[^\W\d_]{1,2}")  # letters only: not "v1.2", "2.5m", "ch.12"
# abbreviations CoNLL-2003 keeps their dot on (besides initials "P." and dotted words "U.S."): "Corp." "vs."
_ABBREVIATIONS = frozenset("vs st inc corp co ltd mr mrs ms dr jr sr calif gen gov sen rep lt col sgt mt ave no "
                           "jan feb mar apr jun jul aug sep sept oct nov dec".split())


# English clitics CoNLL-2003 (Penn Treebank tokenisation) splits off a word: "Germany 's", "is n't", "they 're";
# kept on, a predicted entity's text and end took them ("Germany's": 183 of CoNLL-2003 test's 5,648 entities)
_CLITIC = re.compile(r"(?:(?<=[^\W\d_])n['’]t|['’](?:s|re|m|ve|ll|d))$", re.IGNORECASE)
# a clitic already split off, opening a word ("Germany 's", "they 're": CoNLL-2003's own tokens joined by spaces)
_OPEN_CLITIC = re.compile(r"['’](?:s|re|m|ve|ll|d)(?![^\W_]|['’-])", re.IGNORECASE)  # ('S' quoted: no clitic)


def _flag_letter(char: str) -> bool:
    return "\U0001F1E6" <= char <= "\U0001F1FF"  # regional indicators: two make a flag


def _kind(char: str) -> str:
    """A character's part in a word: "s" space, "m" a combining mark (or a joiner of an emoji or a script), "c" a
    letter of a script without spaces, "w" a word character (letter, digit, connector), "p" punctuation."""
    if char.isspace():
        return "s"
    category = unicodedata.category(char)
    # format characters (Cf: a soft hyphen, zero-width space or (non-)joiner, a word joiner, a direction mark) are
    # invisible inside a word, as marks are: "Brus\u00adsels" is one word (it was three, so three entities)
    if category[0] == "M" or category == "Cf" or char == "\ufe0f" or "\U0001F3FB" <= char <= "\U0001F3FF":
        return "m"
    if category[0] in "LN" or category == "Pc":
        code = ord(char)
        return "c" if any(low <= code <= high for low, high in _UNSPACED) else "w"
    return "p"


_ASCII = [_kind(chr(code)) for code in range(128)]  # most characters: a lookup, not a category


def split_words(text: str) -> list[tuple[int, int]]:
    """Character spans (start, end) of the words of raw text, close to how CoNLL-2003 tokenises: runs of word
    characters with their combining marks and invisible format characters (a decomposed "é" is one word with its
    "e"; Devanagari's vowel signs stay in their word; a soft hyphen does not split one), inner hyphens, apostrophes
    and dots ("well-known", "O'Neill", "U.S"), English clitics split off ("Germany 's", "is n't", "they 're") as
    the Penn Treebank does, a final dot on initials,
    dotted words and common abbreviations ("P.", "U.S.", "Corp."), "..." whole, other punctuation one mark each,
    and each character of a script written without spaces (Chinese, Japanese, Thai) a word of its own."""
    kinds = [_ASCII[code] if (code := ord(char)) < 128 else _kind(char) for char in text]
    spans, i, n = [], 0, len(text)
    while i < n:
        kind, j = kinds[i], i + 1
        if kind == "s":
            i = j
            continue
        if kind == "c":
            while j < n and kinds[j] == "m":
                j += 1
        elif kind in "wm":
            while j < n and (kinds[j] in "wm" or (text[j] in _JOINERS and j + 1 < n and kinds[j + 1] == "w"
                                                   and kinds[j - 1] in "wm")):
                j += 1
            word = text[i:j]
            if j < n and text[j] == "." and (_INITIALS.fullmatch(re.split(r"[-'’]", word)[-1])  # aid-U.N.
                                             or (len(word) == 1 and word.isupper())
                                             or word.lower() in _ABBREVIATIONS):
                j += 1
            elif clitic := _CLITIC.search(word):
                if clitic.start() > 0:
                    spans.append((i, i + clitic.start()))
                    i += clitic.start()
        elif text.startswith("...", i):
            j = i + 3
        elif (i == 0 or kinds[i - 1] == "s") and (opening := _OPEN_CLITIC.match(text, i)):
            j = opening.end()  # one word, as "n't" is (it was "'" and "s": two words, the second tagged)
        else:  # a mark with its modifiers, an emoji with what it joins ("👨‍👩‍👧": one), a flag's two letters
            if _flag_letter(text[i]) and j < n and _flag_letter(text[j]):
                j += 1
            while j < n and (kinds[j] == "m" or (text[j - 1] == "\u200d" and kinds[j] == "p")):
                j += 1
        spans.append((i, j))
        i = j
    # a format character stays inside its word, not at its edges: a byte-order mark opening stdin, direction marks
    # around a name ("\u200fIsrael\u200f") were the entity's text; one alone is no word
    out = []
    for start, end in spans:
        while start < end and unicodedata.category(text[start]) == "Cf":
            start += 1
        while end > start and unicodedata.category(text[end - 1]) == "Cf":
            end -= 1
        if start < end:
            out.append((start, end))
    return out


def join_words(words: tuple[str, ...] | list[str]) -> tuple[str, list[tuple[int, int]]]:
    """Pre-split words (CoNLL) → one text with single spaces, and each word's span in it."""
    spans, position = [], 0
    for word in words:
        spans.append((position, position + len(word)))
        position += len(word) + 1
    return " ".join(words), spans


@dataclass
class Encoded:
    """One example's model input; `first_token[w]` is the index of word w's first subword (-1: truncated away)."""

    input_ids: list[int]
    type_ids: list[int]
    first_token: list[int] | None = None
    truncated: bool = False


def pad_batch(examples: list[Encoded], pad_id: int, width: int | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Examples padded to the longest of them (or to `width`, if given: at least that longest): input ids,
    attention mask (1 = real token) and token types, each (B, T) int64. What every inference path (torch and ONNX)
    feeds its model."""
    lengths = np.array([len(e.input_ids) for e in examples], dtype=np.int64)  # (B,)
    longest = int(lengths.max()) if len(examples) else 0
    if width is not None and width < longest:
        raise ValueError(f"pad_batch: width {width} is shorter than the longest example ({longest} tokens)")
    width = longest if width is None else width
    ids = np.full((len(examples), width), pad_id, dtype=np.int64)  # (B, T)
    types = np.zeros((len(examples), width), dtype=np.int64)  # (B, T)
    for row, example in enumerate(examples):
        ids[row, :lengths[row]] = example.input_ids
        types[row, :lengths[row]] = example.type_ids
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)  # (B, T)
    return ids, mask, types


def bucket_widths(window: int, smallest: int = 16) -> list[int]:
    """The padded widths a compiled model sees for a `window` of tokens (`bucket_width`): powers of two from
    `smallest` up, then the window itself; a window less than 1.25x the power of two below it replaces that power
    (514 -> ..., 256, 514: no graph for texts of 513-514 tokens alone). log2(window / 16) + 1 widths at most."""
    widths = []
    width = smallest
    while width < window:
        widths.append(width)
        width *= 2
    if widths and window < 1.25 * widths[-1]:
        widths.pop()
    return widths + [window]


def bucket_width(longest: int, window: int) -> int:
    """The padded width of a batch whose longest example has `longest` tokens, when a compiled model is to see a
    few static shapes: the smallest of `bucket_widths(window)` that holds it (never below `longest`: a text past
    the window, a caller's bug, is not cut)."""
    return next((w for w in bucket_widths(window) if w >= longest), longest)


def bucket_rows(count: int, batch_size: int) -> int:
    """The rows a batch of `count` examples is padded to for a compiled model: the next power of two, at most
    `batch_size` (a full batch stays as it is; one query runs one row, not a batch of copies)."""
    rows = 1
    while rows < count:
        rows *= 2
    return min(rows, batch_size)


def length_sorted(examples: list[Encoded], batch_size: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each example's length (N,), and batches of example indices shortest first, so that a batch pads only to about
    its own length (the caller puts the rows back in input order)."""
    lengths = np.array([len(e.input_ids) for e in examples], dtype=np.int64)
    order = np.argsort(lengths, kind="stable")
    return lengths, [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def in_input_order(count: int, batches: list[np.ndarray], results, lengths: np.ndarray, per_token: bool | None,
                   on_batch=None) -> list[np.ndarray]:
    """Each batch's (B, ...) output put back as one row per example in input order (`length_sorted`'s batches);
    a per-token output keeps the example's own tokens. `per_token` None: (B, T, C) outputs are per token (a pooled
    (B, L, D) needs False, a (B, T, L, D) True). `on_batch(n)` after each batch (progress bars)."""
    out: list[np.ndarray | None] = [None] * count
    for chunk, result in zip(batches, results):
        tokens = result.ndim == 3 if per_token is None else per_token
        for row, index in enumerate(chunk):
            out[index] = result[row, :lengths[index]] if tokens else result[row]
        if on_batch is not None:
            on_batch(len(chunk))
    return out  # type: ignore[return-value]


class TaskEncoder:
    """Tokenise task inputs for one model: truncation to `max_length` tokens (specials included), no padding."""

    def __init__(self, tokenizer: Tokenizer, max_length: int):
        # a copy: the caller's tokenizer (saved into run directories, exported) keeps its own settings
        tokenizer = Tokenizer.from_str(tokenizer.to_str())
        self.tokenizer = tokenizer
        self.max_length = max_length
        tokenizer.no_padding()  # bertkit pads per batch, to the batch's longest example
        tokenizer.enable_truncation(max_length, strategy="longest_first")

    def texts(self, texts: list[str], pairs: list[str] | None = None) -> list[Encoded]:
        """Single texts, or (text, pair) inputs as `[CLS] A [SEP] B [SEP]` with token types 0 / 1."""
        inputs = texts if pairs is None else list(zip(texts, pairs))
        return [Encoded(e.ids, e.type_ids, None, bool(e.overflowing))
                for e in self.tokenizer.encode_batch(inputs)]

    def words(self, texts: list[str], spans: list[list[tuple[int, int]]]) -> list[Encoded]:
        """Texts whose words are given as character spans: each word is mapped to its first subword token.

        Tokens are matched to words by character offsets, so this works for any tokenizer (byte-level BPE, whose
        tokens carry the preceding space, or WordPiece) without re-tokenising words in isolation (which would
        change a byte-level BPE's tokens: 'Berlin' at a sentence start is not ' Berlin' after a space).
        """
        out = []
        for text, word_spans, enc in zip(texts, spans, self.tokenizer.encode_batch(texts)):
            char_word = np.full(len(text) + 1, -1, dtype=np.int64)
            for index, (start, end) in enumerate(word_spans):
                char_word[start:end] = index
            first = [-1] * len(word_spans)
            for position, ((start, end), special) in enumerate(zip(enc.offsets, enc.special_tokens_mask)):
                if special or end <= start:
                    continue
                # a token may cover several words ("...", "?!" or "(R" are one piece for some tokenizers): it is the
                # first subword of every covered word that has none yet
                for word in np.unique(char_word[start:end]):
                    if word >= 0 and first[word] == -1:
                        first[word] = position
            # a word no token touches (a character the normaliser deletes) reads its neighbour's token; after a cut,
            # the words past the last one kept stay -1 and are tagged O (a token-less word inside the kept part
            # stayed -1 too: tagged O between B-PER and I-PER, an invalid sequence, and the entity split in two)
            last = max((word for word, position in enumerate(first) if position >= 0), default=-1) \
                if enc.overflowing else len(first) - 1
            for word in range(1, last + 1):
                if first[word] == -1:
                    first[word] = first[word - 1]
            truncated = bool(enc.overflowing)
            out.append(Encoded(enc.ids, enc.type_ids, first, truncated))
        return out


def token_labels(encoded: Encoded, word_labels: list[int]) -> list[int]:
    """Per-token labels for first-subword labelling: the word's label on its first subword, IGNORE_INDEX on the
    other subwords, the special tokens, and anything whose word was truncated away."""
    labels = [IGNORE_INDEX] * len(encoded.input_ids)
    for word, position in enumerate(encoded.first_token or []):
        if position >= 0 and labels[position] == IGNORE_INDEX:  # a token shared by two words: the first word's
            labels[position] = word_labels[word]
    return labels
