"""The generated references: docs/configuration.md is what tools/config_reference.py makes of bertkit/config.py and
the recipes (a config key added without regenerating it fails here), and every key has its meaning; the option
section of docs/commands.md is what tools/commands_reference.py makes of the CLI. And the guides hold together:
every link resolves, and the guides and the CLI name the same commands."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import commands_reference  # noqa: E402
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


def test_a_comment_continued_after_its_hash_stays_with_its_field():
    """config.py aligns a long beside-comment's next line after the `#` (`    #      finetuning …`): such lines
    were read as the next field's comment above it, so three rows of the table held their neighbours' words (a
    review, 2026-11-28)."""
    notes = config_reference._field_notes(
        "class T:\n"
        "    a: int = 1  # first half,\n"
        "    #             second half\n"
        "    # above b\n"
        "    b: int = 2  # beside b\n"
        "        # indented under b\n"
        "    c: int = 3\n")
    assert notes == {("T", "a"): "first half, second half", ("T", "b"): "above b beside b indented under b",
                     ("T", "c"): ""}


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
    guide = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    guide = guide.partition(commands_reference.START)[0]  # the hand-written table, not the generated headings
    missing = [name for name, _ in commands_reference.commands() if f"`bertkit {name}" not in guide]
    assert not missing, f"docs/commands.md does not describe: {', '.join(missing)}"


def test_the_option_reference_in_the_command_guide_is_current():
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    assert commands_reference.START in text and commands_reference.END in text
    assert text == commands_reference.render(text), \
        "the option section of docs/commands.md is stale: run python tools/commands_reference.py"


def test_the_option_reference_lists_every_option_of_every_command():
    section = commands_reference.section()
    for name, command in commands_reference.commands():
        assert f"\n### bertkit {name}\n" in section, name
        table = section.split(f"\n### bertkit {name}\n", 1)[1].split("\n### ", 1)[0]
        for param in [param for param in command.params if not getattr(param, "hidden", False)]:
            long = [opt for opt in param.opts if opt.startswith("--")]
            shown = commands_reference.shown_name(param)
            assert f"\n| `{shown}` |" in table and all(opt in shown for opt in long), f"bertkit {name}: {shown}"


def test_the_option_reference_keeps_the_hand_written_part():
    hand = "# Commands\n\nhand-written\n"
    once = commands_reference.render(hand)
    assert once.startswith(hand) and once.count(commands_reference.START) == 1
    assert commands_reference.render(once) == once  # regenerating replaces the section, it does not add one
    assert commands_reference.render(once + "\nafter\n").endswith(commands_reference.END + "\n\nafter\n")


# `bertkit WORD [WORD]` where a command is written: at the start of a code span, or of a code-block line (or after a
# shell pipe or separator there: `echo … | bertkit predict`)
SPAN_CALL = re.compile(r"`bertkit[ \t]+([^`\s]+)(?:[ \t]+([^`\s]+))?")
LINE_CALL = re.compile(r"(?:^|[|;&]\s*|\$\(\s*)bertkit[ \t]+(\S+)(?:[ \t]+(\S+))?")
PROSE = {"COMMAND", "ARGS", "…", "..."}  # placeholders: `bertkit COMMAND --help`, `bertkit ARGS`, `bertkit index …`


def written_commands(text: str) -> list[tuple[int, str, str]]:
    """(line, word, next word or "") for every `bertkit WORD` a Markdown text writes as a command."""
    found, in_code = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        calls = LINE_CALL.findall(line.strip()) if in_code else SPAN_CALL.findall(line)
        found += [(number, word, after) for word, after in calls]
    return found


def test_written_commands_are_found_in_spans_and_code_blocks():
    text = "`bertkit demo --max-time 1m`, bertkit's way\n```bash\nbertkit index build x\necho a | bertkit nope\n```\n"
    assert written_commands(text) == [(1, "demo", "--max-time"), (3, "index", "build"), (4, "nope", "")]


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.relative_to(ROOT).as_posix()
                                                     for p in (ROOT / "docs").glob("*.md"))])
def test_the_readme_and_the_guides_name_only_commands_that_exist(doc):
    root = commands_reference.cli()
    bad = []
    for line, word, after in written_commands((ROOT / doc).read_text(encoding="utf-8")):
        command = root.commands.get(word)
        if command is None and not word.startswith("-") and word not in PROSE:
            bad.append(f"{doc}:{line}: bertkit {word}")
        elif getattr(command, "commands", None) and after and after not in command.commands \
                and not after.startswith(("-", "[")) and after not in PROSE:
            bad.append(f"{doc}:{line}: bertkit {word} {after}")
    assert not bad, f"{doc} names commands bertkit does not have:\n" + "\n".join(bad)
