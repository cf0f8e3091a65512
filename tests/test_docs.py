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


def test_every_relative_link_and_image_resolves():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    bad = []
    for doc in docs:
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):  # a URL or an anchor in the page
                    continue
                if not (doc.parent / target.split("#")[0]).exists():
                    bad.append(f"{doc.relative_to(ROOT)}:{number}: {target}")
    assert not bad, "links to files that are not there:\n" + "\n".join(bad)
