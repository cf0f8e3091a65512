"""docs/configuration.md, generated from the config dataclasses (bertkit/config.py) and the bundled recipes, so the
reference cannot drift from the code: every section, every key with its type, default and meaning (the comments
beside and above the field in config.py), and every recipe with its first comment line.

    python tools/config_reference.py            # rewrite docs/configuration.md
    python tools/config_reference.py --check    # exit 1 when docs/configuration.md is stale (tests/test_docs.py)
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import sys
import tokenize
import tomllib
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TARGET = ROOT / "docs" / "configuration.md"
INTRO = Path(__file__).resolve().parent / "configuration_intro.md"  # the hand-written part: recipes and config

from bertkit.config import Config  # noqa: E402
from bertkit.recipes import list_recipes  # noqa: E402


def _comments(source: str) -> dict[int, str]:
    """line number → the comment on it (without '#')."""
    found = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string.lstrip("#").strip()
    return found


def _field_notes(source: str) -> dict[tuple[str, str], str]:
    """(class name, field name) → its meaning: the comment lines right above the field, then the comment beside it
    and the comment-only lines that continue it (indented under it)."""
    comments, lines = _comments(source), source.splitlines()
    notes, continued = {}, set()  # continued: comment lines that go on a field's beside comment (not the next's)

    def indent(text: str) -> int:
        return len(text) - len(text.lstrip())

    def continues(number: int, field: int) -> bool:
        """Comment-only line `number` goes on the beside comment of the field at line `field`: indented under it,
        before its `#` or after it (`    #      finetuning …`, aligned with the comment it continues)."""
        text = lines[number - 1]
        if number not in comments or not text.strip().startswith("#"):
            return False
        return indent(text) > indent(lines[field - 1]) or text.strip().startswith("#  ")

    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not (isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)):
                continue
            above, line = [], item.lineno - 1
            while line >= 1 and lines[line - 1].strip().startswith("#") and line not in continued:
                above.insert(0, comments.get(line, ""))
                line -= 1
            beside, line = [], item.end_lineno
            if line in comments and not lines[line - 1].strip().startswith("#"):
                beside.append(comments[line])
                while line < len(lines) and continues(line + 1, item.lineno):
                    line += 1
                    continued.add(line)
                    beside.append(comments[line])
            notes[(node.name, item.target.id)] = " ".join(part for part in above + beside if part)
    return notes


def _type(annotation) -> str:
    """A field's type as a reader writes it in TOML terms: one of the allowed values, a number, text, a list."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f'"{a}"' for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        kinds = [_type(a) for a in args if a is not type(None)]
        return " \\| ".join(kinds) + (" \\| none" if type(None) in args else "")
    if origin is tuple:
        return f"list of {_type(args[0]) if args else 'values'}"
    return {bool: "true / false", int: "integer", float: "number", str: "text"}.get(annotation, str(annotation))


def _default(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_default(v) for v in value) + "]"
    return repr(value)


def _recipe_summary(path: Path) -> str:
    """A recipe's leading comment (after its "name: "), up to the end of its first sentence."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(lines).split(": ", 1)[-1] if lines else ""
    end = re.search(r"(?<!\bal)\.\s+(?=[A-Z`])", text)  # the first sentence's end (not "et al. 2017")
    return text if end is None else text[:end.start() + 1]


def _recipe_model(path: Path) -> str:
    """A recipe's stack and size ("encoder, 4 × 256", "encoder-decoder, 3 + 3 × 256"), or, for a finetuning recipe
    (no [model] table), where its model comes from."""
    model = tomllib.loads(path.read_text(encoding="utf-8")).get("model")
    if model is None:
        return "from `--model`"
    defaults = Config().model
    layers = str(model.get("n_layers", defaults.n_layers))
    if "n_decoder_layers" in model:
        layers += f" + {model['n_decoder_layers']}"
    return f"{model.get('architecture', defaults.architecture)}, {layers} × {model.get('d_model', defaults.d_model)}"


def render() -> str:
    """The whole of docs/configuration.md."""
    source = (ROOT / "bertkit" / "config.py").read_text(encoding="utf-8")
    notes = _field_notes(source)
    hints = typing.get_type_hints
    out = ["# Configuration", "",
           "<!-- generated by `python tools/config_reference.py` from tools/configuration_intro.md, bertkit/config.py "
           "and recipes/: edit those, then run it (tests/test_docs.py fails when this file is stale) -->", "",
           "```bash", "bertkit info mini --set model.positions=rotary --set n_kv_heads=2  # a recipe, two keys changed",
           "bertkit pretrain --recipe mini --corpus wikitext2/wiki.test.raw --set train.max_steps=2000 --out runs/mine",
           "```", "",
           INTRO.read_text(encoding="utf-8").rstrip("\n"), "", "## Every recipe", "",
           "| recipe | model | what it is |", "|---|---|---|"]
    for name, path in list_recipes().items():
        summary = _recipe_summary(path).replace("|", "/")
        out.append(f"| [`{name}`](../recipes/{path.name}) | {_recipe_model(path)} | {summary} |")
    for section in dataclasses.fields(Config):
        cls = section.default_factory
        out += ["", f"## [{section.name}]", "", " ".join((cls.__doc__ or "").split()), "",
                "| key | type | default | meaning |", "|---|---|---|---|"]
        types = hints(cls)
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            meaning = notes.get((cls.__name__, f.name), "").replace("|", "/")
            out.append(f"| `{section.name}.{f.name}` | {_type(types[f.name])} | {_default(default)} | {meaning} |")
    return "\n".join(out) + "\n"


def write_or_check(target: Path, text: str, tool: str) -> None:
    """Write a generated `text` to `target`; with --check on the command line, exit 1 instead when `target` is not
    `text` already (`tool`: the generator to run then)."""
    if "--check" in sys.argv[1:]:
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            sys.exit(f"{target.relative_to(ROOT)} is stale: run python tools/{tool}")
        return
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target.relative_to(ROOT)}")


def main() -> None:
    """Rewrite docs/configuration.md, or with --check exit 1 when it is stale."""
    write_or_check(TARGET, render(), Path(__file__).name)


if __name__ == "__main__":
    main()
