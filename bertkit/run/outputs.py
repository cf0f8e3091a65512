"""Where a command may write: ownership before deletion.

Every command that writes an output at a path the user names comes through `claim` before any work:
- an output never goes inside a bertkit run or index (a run's checkpoint rotation, a resume or a later replacement
  would delete it without a word), checkpoints included;
- an output is never one of the command's own inputs, and never a folder that holds one;
- an existing output is replaced only with `--overwrite`, and then only when it is an output of the same kind that
  bertkit wrote: an index over an index, a tokenizer folder over a tokenizer folder, a predictions file over a
  predictions file. A run directory, a folder holding files bertkit does not write there, a file of another kind are
  refused with one line that says what the target is and what to do.

What bertkit wrote is recognised by content, not by a marker, so outputs of every earlier version are recognised
too: a folder kind names the files it may hold (and one it must); a file kind reads the start of the file. Plain
text outputs (translations, hypotheses) cannot be told from other text: they replace only a UTF-8 text file of no
other recognised kind that is none of the command's inputs (the README says so).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bertkit.errors import BertkitError
from bertkit.paths import resolve_data_path

_PEEK = 1 << 16  # bytes read from the start of a file to recognise it
_REPORT = 1 << 24  # a JSON report is smaller than this


@dataclass(frozen=True)
class Kind:
    """One kind of output: its name in messages ("an index"), whether it is a folder, and the test that says a path
    holds one that bertkit wrote."""

    article: str
    directory: bool
    matches: Callable[[Path], bool]


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_run(path: Path) -> bool:
    """A bertkit run directory: its config.json carries the bertkit version (a run still training counts too)."""
    data = _read_json(path / "config.json") if (path / "config.json").is_file() else None
    return isinstance(data, dict) and "bertkit_version" in data


def is_index(path: Path) -> bool:
    """A bertkit index directory (index.json names the format)."""
    data = _read_json(path / "index.json") if (path / "index.json").is_file() else None
    return isinstance(data, dict) and data.get("format") == "bertkit-index"


def _entries(path: Path) -> Iterator[str]:
    """Every file and folder under `path`, relative, folders with a trailing slash, links as files; lazily, so a
    refusal of a large folder stops at its first foreign entry (rglob does not follow links)."""
    for item in path.rglob("*"):
        rel = item.relative_to(path).as_posix()
        yield rel + "/" if item.is_dir() and not item.is_symlink() else rel


def _folder(required: str | None, allowed: str) -> Callable[[Path], bool]:
    """A folder kind: `required` must be there (None: any one entry), and every entry must match the `allowed`
    pattern."""
    pattern = re.compile(allowed)

    def matches(path: Path) -> bool:
        there = (path / required).is_file() if required is not None else next(_entries(path), None) is not None
        return there and all(pattern.fullmatch(name) for name in _entries(path))
    return matches


_HF_FILES = r"config\.json|model\.safetensors|tokenizer\.json|tokenizer_config\.json"
_ST_FILES = (_HF_FILES + r"|modules\.json|sentence_bert_config\.json|config_sentence_transformers\.json"
             r"|1_Pooling/|1_Pooling/config\.json|2_Normalize/")
_INDEX_FILES = (r"index\.json|\.lock|shard-\d{5,9}\.(f32|jsonl|offsets)|ivf-\d{5,9}\.faiss"
                r"|\.(index\.json|shard-.*|ivf-.*)\.tmp-.*")


# every name a folder kind may hold: the rest of a folder is what the user put there
_KNOWN_NAME = re.compile("|".join((_ST_FILES, _INDEX_FILES, r"probe\.(csv|png)", r"[a-z0-9_-]+\.png",
                                   r"manifest\.json|model\.onnx")))


def _index(path: Path) -> bool:
    return is_index(path) and _folder("index.json", _INDEX_FILES)(path)


def _hf_folder(path: Path) -> bool:
    return not is_run(path) and _folder("model.safetensors", _HF_FILES)(path) and _export(path)


def _imported_run(path: Path) -> bool:
    """What `import-hf` writes: a run with weights, config and tokenizer, never trained (no metrics, no
    checkpoints)."""
    return is_run(path) and _folder("model.safetensors", _HF_FILES + r"|labels\.json")(path)  # labels.json: a
    # task model's (BertForSequenceClassification / BertForTokenClassification)


def _head(path: Path, size: int = _PEEK) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(size)
    except OSError:
        return b""


def _json_object(keys: tuple[str, ...]) -> Callable[[Path], bool]:
    """A JSON report holding `keys`. Parsed only when it starts like one and is report-sized: every other kind's
    test runs this too, and a large corpus must not be read whole to be told apart."""
    def matches(path: Path) -> bool:
        if _head(path).lstrip()[:1] != b"{" or path.stat().st_size > _REPORT:
            return False
        data = _read_json(path)
        return isinstance(data, dict) and all(key in data for key in keys)
    return matches


def _predictions(path: Path) -> bool:
    """JSONL whose first lines are records `predict` (or `evaluate --predictions`) writes: text + label, score,
    scores (classify), text + entities (NER) or text + gold + score (a regressor's evaluation) — never a labelled
    task file ({"text", "label"})."""
    head = _head(path)
    lines = head.decode("utf-8", "replace").splitlines()
    if len(head) == _PEEK and lines:  # the last line may be cut by the peek: judge the whole ones (or a longer peek)
        lines = lines[:-1] or _head(path, 1 << 24).decode("utf-8", "replace").splitlines()[:1]
    lines = [line for line in lines[:20] if line.strip()]
    return bool(lines) and all(_prediction(line) for line in lines)


def _prediction(line: str) -> bool:
    try:
        record = json.loads(line)
    except ValueError:
        return False
    if not isinstance(record, dict) or "text" not in record:
        return False
    # predict's records, and evaluate --predictions' (a regressor's: text, gold, score)
    return {"label", "score", "scores"} <= record.keys() or isinstance(record.get("entities"), list) or \
        {"gold", "score"} <= record.keys()


def _npy(dtype: str, dims: tuple[int, ...]) -> Callable[[Path], bool]:
    """A .npy file of `dtype` with one of `dims` axes (what embed writes: float32 vectors, an int64 row map)."""
    def matches(path: Path) -> bool:
        import numpy as np

        try:
            with path.open("rb") as fh:
                major, _ = np.lib.format.read_magic(fh)
                read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                shape, _, found = read(fh)
        except (OSError, ValueError):
            return False
        return found == np.dtype(dtype) and len(shape) in dims
    return matches


def _export(path: Path) -> bool:
    """A folder `bertkit export` wrote: its model.safetensors names bertkit in its metadata."""
    from safetensors import safe_open

    try:
        with safe_open(str(path / "model.safetensors"), "np") as fh:
            return "bertkit" in (fh.metadata() or {})
    except Exception:  # noqa: BLE001 - unreadable: not ours
        return False


def _onnx_export(path: Path) -> bool:
    """A folder `bertkit export --format onnx` wrote: manifest.json of that format beside the graph and tokenizer."""
    data = _read_json(path / "manifest.json") if (path / "manifest.json").is_file() else None
    return isinstance(data, dict) and data.get("format") == "bertkit-onnx" and \
        _folder("manifest.json", r"manifest\.json|model\.onnx|tokenizer\.json")(path)


def _parquet_embeddings(path: Path) -> bool:
    if _head(path)[:4] != b"PAR1":
        return False
    import pyarrow.parquet as pq

    try:
        return "embedding" in pq.read_schema(path).names
    except Exception:  # noqa: BLE001 - anything unreadable is not ours
        return False


def _tokens_tsv(path: Path) -> bool:
    return _head(path).startswith(b"row\ttext\tposition\ttoken_id\ttoken\n")


def _png(path: Path) -> bool:
    return _head(path)[:8] == b"\x89PNG\r\n\x1a\n"


def _text(path: Path) -> bool:
    """Plain UTF-8 text of no other recognised kind (the best that can be said of a translations file)."""
    head = _head(path)
    if b"\0" in head or any(kind.matches(path) for kind in _FILE_KINDS if kind is not TEXT):
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:  # a multi-byte character cut by the peek is still text
        return exc.start >= len(head) - 3
    return True


TOKENIZER = Kind("a tokenizer folder", True, _folder("tokenizer.json", r"tokenizer\.json|tokenizer_config\.json"))
INDEX = Kind("an index", True, _index)
ATTENTION = Kind("an attention heatmap folder", True,
                 _folder(None, r"[a-z]+-[a-z]+-layer\d+(-head\d+)?\.png|alignment\.png"))
PROBE = Kind("a probe folder", True, _folder("probe.csv", r"probe\.(csv|png)"))
HF_EXPORT = Kind("a Hugging Face export", True, _hf_folder)
ST_EXPORT = Kind("a sentence-transformers export", True,
                 lambda p: not is_run(p) and _folder("modules.json", _ST_FILES)(p) and _export(p))
IMPORTED_RUN = Kind("an imported run (import-hf)", True, _imported_run)
ONNX_EXPORT = Kind("an ONNX export", True, _onnx_export)
PREDICTIONS = Kind("a predictions file", False, _predictions)
EVALUATION = Kind("an evaluation report", False, _json_object(("truncated", "unseen_labels")))
STS_REPORT = Kind("an STS report", False, _json_object(("spearman", "pearson", "pairs")))
EMBEDDINGS_NPY = Kind("an embeddings array (.npy)", False, _npy("float32", (2, 3)))
# a row map by its name too: any 1-D int64 array (np.arange) would look like one, and be called one in a refusal
ROWS_NPY = Kind("a row map (.rows.npy)", False,
                lambda path: path.name.endswith(".rows.npy") and _npy("int64", (1,))(path))
EMBEDDINGS_PARQUET = Kind("an embeddings table (.parquet)", False, _parquet_embeddings)
TOKENS_TSV = Kind("a token table (.tokens.tsv)", False, _tokens_tsv)
PLOT = Kind("a PNG plot", False, _png)
TEXT = Kind("a text file", False, _text)

_DIR_KINDS = (INDEX, TOKENIZER, ATTENTION, PROBE, ST_EXPORT, HF_EXPORT, IMPORTED_RUN, ONNX_EXPORT)
_FILE_KINDS = (PREDICTIONS, EVALUATION, STS_REPORT, EMBEDDINGS_NPY, ROWS_NPY, EMBEDDINGS_PARQUET, TOKENS_TSV, PLOT,
               TEXT)


def describe(path: Path) -> str:
    """What `path` is, in a few words, for a refusal."""
    if path.is_symlink():
        return "a symbolic link"
    if path.is_dir():
        if is_run(path):
            return "a bertkit run" + ("" if _imported_run(path) else " (trained: its checkpoints and metrics would go)")
        known = next((kind for kind in _DIR_KINDS if kind.matches(path)), None)
        if known is not None:
            return known.article
        files = (name for name in _entries(path) if not name.endswith("/"))
        foreign = list(itertools.islice((name for name in files if not _KNOWN_NAME.fullmatch(name)), 3))
        return f"a folder with files bertkit did not write ({', '.join(foreign) or 'in an unexpected layout'})"
    known = next((kind for kind in _FILE_KINDS if kind.matches(path)), None)
    return known.article if known is not None else "a file bertkit did not write"


def enclosing(path: Path) -> Path | None:
    """The nearest run or index directory strictly above `path` (links and `..` resolved), if any."""
    for parent in Path(path).resolve().parents:
        if is_run(parent) or is_index(parent):
            return parent
    return None


def refuse_nested(out: Path, allow: Path | None = None) -> None:
    """An output inside a run or index directory is refused (`allow`: the one run this command writes into by
    design, e.g. `plot`'s default)."""
    home = enclosing(out)
    if home is not None and (allow is None or home.resolve() != Path(allow).resolve()):
        what = "run" if is_run(home) else "index"
        raise BertkitError(f"{out}: inside the {what} {home} (an output never goes inside a run or index: its "
                           "checkpoint rotation or a later replacement would delete it); choose a path outside it")


def _same_or_inside(inner: Path, outer: Path) -> bool:
    inner, outer = inner.resolve(), outer.resolve()
    return inner == outer or outer in inner.parents


def _exists(out: Path) -> bool:
    """An output is there: a file, a link, or a non-empty folder (an empty folder holds nothing to lose)."""
    return out.is_symlink() or (out.exists() and (not out.is_dir() or any(out.iterdir())))


def claim(out: str | Path, kind: Kind, overwrite: bool, inputs: Iterable[str | Path | None] = (),
          allow_inside: Path | None = None, hint: str = "choose another --out or pass --overwrite",
          replacer: str = "--overwrite") -> None:
    """Check, before any work, that this command may write its output `out` of `kind` (see the module
    docstring); refusals are one-line BertkitErrors naming what the command has (`hint`: what to do about an
    existing output; `replacer`: what replaces one). `inputs` are the command's own files and folders."""
    out = Path(out)
    refuse_nested(out, allow_inside)
    for source in inputs:
        if source is None or str(source) == "-":
            continue
        source = resolve_data_path(source)  # a data-root name is the file it names
        if not source.exists():
            continue
        # a folder output holding an input would delete it; a file output that is an input would replace it
        if out.exists() and (_same_or_inside(source, out) if out.is_dir() else out.resolve() == source.resolve()):
            what = "is" if out.resolve() == source.resolve() else "holds"
            raise BertkitError(f"{out}: {what} this command's own input {source}; write the output elsewhere")
    if not _exists(out):
        if out.exists() and kind.directory != out.is_dir():
            raise BertkitError(f"{out}: is {'a folder' if out.is_dir() else 'a file'}, expected "
                               f"{'a folder' if kind.directory else 'a file path'}")
        return
    foreign = out.is_symlink() or out.is_dir() != kind.directory or not kind.matches(out)
    if not overwrite:
        if foreign:  # --overwrite would be refused too: it was offered, and then refused (a review, 2026-11-28)
            hint = (f"it is {describe(out)}, which {replacer} does not replace: choose another path, or remove it "
                    "yourself if you mean to")
        raise BertkitError(f"{out}: already exists{' and is not empty' if out.is_dir() else ''} ({hint})")
    if foreign:
        raise BertkitError(f"{out}: is {describe(out)}, not {kind.article}; {replacer} replaces only "
                           f"{kind.article} bertkit wrote (remove it yourself if you mean to, or choose another path)")
