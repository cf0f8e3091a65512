"""Every `--option` that bertkit's messages, help texts and README name is a real option of some bertkit command:
a hint that names an option which does not exist sends the user nowhere."""

import ast
import functools
import re
from pathlib import Path

import pytest
import typer

import bertkit
from bertkit.cli import app
from conftest import SAMPLE_CORPUS, cli_error

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(bertkit.__file__).resolve().parent
# `--name` or `--name-with-dashes`, whole: not a piece of `--nproc_per_node`, `---` or `a--b`
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9](?![\w-])")
# Options of other tools that the README or a message quotes in full commands. (Underscored ones such as
# torchrun's --nproc_per_node or accelerate's --num_processes never match OPTION; pip's -e is a short option.)
OTHER_TOOLS = {
    "--logdir",  # tensorboard --logdir runs/…/tensorboard
    "--nnodes",  # torchrun --nnodes N (README › Scaling out)
    "--extra-index-url",  # pip install … --extra-index-url (the README's CPU wheel of torch)
    "--collect-only",  # python -m pytest --collect-only -q (docs/reliability.md: how many tests there are)
    "--dist",  # pytest-xdist's -n 2 --dist worksteal (docs/reliability.md: the suite's two processes)
    "--cpu",  # accelerate launch --cpu (a one-process CPU launch, refused: train/accelerator.py, scaling-out.md)
}
# The README's reproduce lines run benchmarks/*.py, whose argparse options count there (and only there: on a line
# that names benchmarks/, or within the two lines after one, where a long command wraps).
BENCHMARKS = ROOT / "benchmarks"


# `bertkit COMMAND [SUBCOMMAND] ARGS…` up to the end of an inline code span, a table cell or the string
CALL = re.compile(r"(?<![\w/.-])bertkit((?:[ \t]+[^\s`|]+)+)")


def own_options(command) -> set[str]:
    """A command's long options, secondary ones (--no-byte-level) included; duck-typed, because recent Typer
    versions bring their own copy of click's classes."""
    return {o for param in command.params for o in [*param.opts, *getattr(param, "secondary_opts", [])]
            if o.startswith("--")} | {"--help"}


def bertkit_options() -> set[str]:
    """Every option of every command and group of the CLI."""
    options: set[str] = set()

    def walk(command) -> None:
        options.update(own_options(command))
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(cli_root())
    return options


@functools.cache
def cli_root():
    """The click command tree of the app, built once (building it inspects every command's signature)."""
    return typer.main.get_command(app)


def misplaced_options(text: str) -> list[tuple[str, str]]:
    """(command, option) for every option written after `bertkit COMMAND` in `text` that this command lacks
    (`bertkit demo --recipe …` although only other commands take --recipe)."""
    root = cli_root()
    wrong = []
    for call in CALL.finditer(text):
        words = call.group(1).split()
        command, path = root, []
        while words and words[0] in getattr(command, "commands", {}):
            command = command.commands[words[0]]
            path.append(words.pop(0))
        if not path:  # "bertkit's", "bertkit pads": prose, not a command
            continue
        for word in words:
            if word in ("&&", "||", ";", "|", ">", "<"):
                break
            option = word.split("=", 1)[0].strip("[](),.;:'\"")
            if OPTION.fullmatch(option) and option not in own_options(command):
                wrong.append((" ".join(path), option))
    return wrong


def benchmark_options() -> set[str]:
    """The `--options` every benchmarks/*.py script declares with argparse's add_argument, and those a
    benchmarks/*.sh script matches in its argument `case` (`--smoke)`, `--only=*)`)."""
    options = {m for path in BENCHMARKS.glob("*.sh")
               for m in re.findall(r"^\s*(--[a-z][a-z-]*)(?:=\*)?\)", path.read_text(encoding="utf-8"), re.M)}
    for path in BENCHMARKS.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                options.update(arg.value for arg in node.args
                               if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"))
    return options


def mentions_in_source(path: Path) -> list[tuple[int, str, str]]:
    """(line, option, the line's text) for every option named in a string literal of a Python file: plain strings,
    the constant parts of f-strings, implicitly joined strings and docstrings (Typer's help text) alike."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for option in OPTION.findall(node.value):
                # the line of the literal that holds it (a joined string spans several)
                span = range(node.lineno, (node.end_lineno or node.lineno) + 1)
                line = next((n for n in span if re.search(rf"{re.escape(option)}(?![\w-])", lines[n - 1])),
                            node.lineno)
                found.append((line, option, lines[line - 1].strip()))
    return found


def mentions_in_text(path: Path) -> list[tuple[int, str, str]]:
    """(line, option, the line's text) for every option a Markdown file names, except a benchmark script's option
    near that script's command."""
    lines = path.read_text(encoding="utf-8").splitlines()
    scripts = benchmark_options()
    found = []
    for number, line in enumerate(lines, start=1):
        near_benchmark = any("benchmarks/" in earlier for earlier in lines[max(0, number - 3):number])
        found += [(number, option, line.strip()) for option in OPTION.findall(line)
                  if not (near_benchmark and option in scripts)]
    return found


def _unknown(mentions: dict[Path, list[tuple[int, str, str]]]) -> list[str]:
    known = bertkit_options() | OTHER_TOOLS
    return [f"{path.relative_to(ROOT)}:{line}: {option} in: {text}"
            for path, found in mentions.items() for line, option, text in found if option not in known]


def test_the_cli_walk_finds_options_of_commands_subcommands_and_secondary_options():
    options = bertkit_options()
    assert {"--set", "--overwrite", "--corpus", "--vocab-size", "--no-byte-level", "--text-column",
            "--version"} <= options
    assert "--vocab-size" in options and "--seq-len" not in options


def test_benchmark_options_are_read_from_the_scripts():
    assert {"--pretrained", "--precisions", "--repeats", "--smoke", "--only"} <= benchmark_options()


def test_the_pattern_takes_whole_options_only():
    text = "run `torchrun --nproc_per_node 2`, pass --max-score, or --set model.vocab_size=N; a--b and --- are not"
    assert OPTION.findall(text) == ["--max-score", "--set"]


def test_misplaced_options_are_found_per_command():
    assert misplaced_options("run `bertkit demo --recipe tiny --out x` or bertkit tokenizer train c.txt "
                             "--vocab-size 5 --no-byte-level | bertkit's way") == [("demo", "--recipe")]


def test_messages_name_only_options_that_exist():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 20
    bad = _unknown({path: mentions_in_source(path) for path in files})
    assert not bad, "messages name options no bertkit command has:\n" + "\n".join(bad)
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                bad += [f"{path.relative_to(ROOT)}:{node.lineno}: `bertkit {command}` has no {option}"
                        for command, option in misplaced_options(node.value)]
    assert not bad, "messages give commands options they do not have:\n" + "\n".join(bad)


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.relative_to(ROOT).as_posix()
                                                     for p in (ROOT / "docs").glob("*.md"))])
def test_the_readme_and_the_guides_name_only_options_that_exist(doc):
    readme = ROOT / doc
    bad = _unknown({readme: mentions_in_text(readme)})
    # commands, with shell line continuations joined: `bertkit X … \⏎ --option`
    lines = readme.read_text(encoding="utf-8").splitlines()
    number = 0
    while number < len(lines):
        first, command = number, lines[number]
        while command.endswith("\\") and number + 1 < len(lines):
            number += 1
            command = command[:-1] + " " + lines[number]
        bad += [f"{doc}:{first + 1}: `bertkit {name}` has no {option} in: {command.strip()}"
                for name, option in misplaced_options(command)]
        number += 1
    assert not bad, f"{doc} names options that bertkit (or that command) does not have:\n" + "\n".join(bad)


def _command(path: str):
    command = typer.main.get_command(app)
    for name in path.split():
        command = command.commands[name]
    return command


@pytest.mark.parametrize("command, args", [
    ("pretrain", ["--corpus", SAMPLE_CORPUS, "--recipe", "tiny", "--max-steps", "1"]),
    ("finetune classify", ["--model", "{base}", "--train", SAMPLE_CORPUS]),
    ("finetune sentence", ["--model", "{base}", "--train", SAMPLE_CORPUS]),
    ("finetune seq2seq", ["--train-source", SAMPLE_CORPUS, "--train-target", SAMPLE_CORPUS]),
    ("demo", []),
    ("tokenizer train", [SAMPLE_CORPUS, "--vocab-size", "300", "--min-frequency", "1"]),
])
def test_refusing_an_existing_run_suggests_only_the_commands_own_options(base, command, args):
    """Hints computed at run time (an existing --out: "pass --resume", "pass --overwrite") name only options of the
    command that was run: pretrain has no --overwrite, tokenizer train no --resume."""
    line = cli_error(*command.split(), *[str(a).format(base=base) for a in args], "--out", base)
    named = set(OPTION.findall(line))
    assert named and named <= own_options(_command(command)), line


@pytest.mark.parametrize("argv, said", [
    (["pretrain", "--no-such-option"], "error: No such option: --no-such-option"),
    (["pretrain", "--max-steps", "abc"], "error: Invalid value for '--max-steps'"),
    (["generate", "x", "hi", "--top-k", "-1"], "error: Invalid value for '--top-k'"),
    (["embed"], "error: Missing argument"),
    (["no-such-command"], "error: No such command 'no-such-command'."),
])
def test_a_usage_error_is_one_line_naming_the_help_like_every_user_error(monkeypatch, capsys, argv, said):
    """Typer drew a usage block and a box for these (four to six lines) where bertkit's own errors are one line."""
    import sys

    from bertkit.cli import run

    monkeypatch.setattr(sys, "argv", ["bertkit", *argv])
    with pytest.raises(SystemExit) as exited:
        run()
    assert exited.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    command = "bertkit" if argv[0].startswith("no-such") else f"bertkit {argv[0]}"
    assert len(lines) == 1 and lines[0].startswith(said) and lines[0].endswith(f"(see {command} --help)"), lines


def test_the_entry_point_keeps_exit_codes_help_and_bertkit_errors(monkeypatch, capsys):
    import sys

    from bertkit.cli import run

    for argv, code in ((["--version"], 0), (["info", "--help"], 0), (["info", "no-such-recipe"], 2), ([], 2)):
        monkeypatch.setattr(sys, "argv", ["bertkit", *argv])
        with pytest.raises(SystemExit) as exited:
            run()
        assert exited.value.code == code, argv
        out = capsys.readouterr()
        if argv == ["info", "no-such-recipe"]:
            assert out.err.startswith("error: recipe: 'no-such-recipe'") and len(out.err.splitlines()) == 1
        if argv in ([], ["info", "--help"]):
            assert "Usage" in out.out and "error" not in out.err
