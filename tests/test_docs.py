"""The generated reference: docs/configuration.md is what tools/config_reference.py makes of bertkit/config.py and
the recipes (a config key added without regenerating it fails here), and every key has its meaning."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import config_reference  # noqa: E402

from bertkit.config import Config  # noqa: E402


def test_the_configuration_reference_is_current():
    assert (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8") == config_reference.render(), \
        "docs/configuration.md is stale: run python tools/config_reference.py"


def test_every_config_key_is_listed_with_a_meaning():
    import dataclasses

    text = config_reference.render()
    for section in dataclasses.fields(Config):
        for key in dataclasses.fields(section.default_factory):
            rows = [line for line in text.splitlines() if line.startswith(f"| `{section.name}.{key.name}` |")]
            assert len(rows) == 1, f"{section.name}.{key.name}"
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", rows[0])[1:-1]]  # "\|" is inside a cell
            assert len(cells) == 4 and cells[3], f"{section.name}.{key.name} has no meaning: comment the field in " \
                "bertkit/config.py"


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)


def _anchors(doc: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headers: lower case, punctuation dropped, spaces as hyphens."""
    heads = [line.lstrip("#").strip() for line in doc.read_text(encoding="utf-8").splitlines()
             if re.match(r"#{1,6} ", line)]
    return {re.sub(r"[^\w\- ]", "", head.lower()).replace(" ", "-") for head in heads}


def test_every_relative_link_and_image_resolves():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = []
    for doc in docs:
        in_code = False
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            in_code ^= line.startswith("```")
            for target in [] if in_code else LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # a URL
                    continue
                path, _, anchor = target.partition("#")
                file = doc if not path else doc.parent / path
                if not file.exists():
                    bad.append(f"{doc.relative_to(ROOT)}:{number}: {target} (no such file)")
                elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                    bad.append(f"{doc.relative_to(ROOT)}:{number}: {target} (no such header in {file.name})")
    assert not bad, "links that lead nowhere:\n" + "\n".join(bad)


def test_the_command_guide_names_every_command_bertkit_has():
    import typer

    from bertkit.cli import app

    def names(command, prefix=""):
        for name, sub in getattr(command, "commands", {}).items():
            yield from names(sub, f"{prefix}{name} ") if getattr(sub, "commands", None) else [f"{prefix}{name}"]

    guide = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    missing = [name for name in names(typer.main.get_command(app)) if f"`bertkit {name}" not in guide]
    assert not missing, f"docs/commands.md does not describe: {', '.join(missing)}"
