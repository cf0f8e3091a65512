"""The Typer app every command registers on, the options several commands share, and the one user-error handler
(a BertkitError or a full disk → `error: …` on stderr, exit 2)."""

from __future__ import annotations

import functools
import signal
from pathlib import Path
from typing import Annotated, Literal

import typer

import bertkit
from bertkit.errors import BertkitError
from bertkit.run.files import is_disk_full

app = typer.Typer(
    name="bertkit",
    help="BERT-style pretrain-and-finetune toolkit: a from-scratch transformer, recipes, and Hugging Face interop.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

SetOption = Annotated[list[str] | None, typer.Option(
    "--set", metavar="KEY=VALUE", help="Override a recipe value, e.g. --set train.learning_rate=3e-4 --set "
                                        "batch_size=16 (a bare key where it is unique); every key: "
                                        "docs/configuration.md.")]
TextFieldOption = Annotated[str | None, typer.Option(help="JSONL field / CSV, TSV or Parquet column with the text.")]
ProgressOption = Annotated[bool, typer.Option(help="Show a progress bar.")]
PrecisionOption = Annotated[Literal["auto", "fp32", "bf16"], typer.Option(
    help="Inference precision. auto: bf16 where the device computes it natively (a GPU with bf16; a CPU with "
         "AVX512-BF16 or AMX whose bf16 matrix products measure faster), else fp32.")]


def given_texts(texts: list[str] | None, input_file: Path | None, what: str, skip_blank: bool = False) -> list[str]:
    """Texts from the command line, or one per line from --input (- for stdin; a UTF-8 BOM is not text). `what`
    names one text in errors ("prompt", "query"); `skip_blank` skips a file's blank lines, and says so, as `predict`
    skips them (the other lines stay as written: a trailing space is a token to a byte-level BPE)."""
    import sys

    from rich.console import Console

    from bertkit.text.tasks import non_blank, read_lines, text_lines

    several = "queries" if what == "query" else f"{what}s"
    if texts and input_file is not None:
        raise BertkitError(f"give {several} as arguments or with --input, not both")
    if input_file is None:
        if not texts:
            raise BertkitError(f"no {what}: give one as an argument or a file with --input")
        return list(texts)
    lines = text_lines(sys.stdin.read().removeprefix("\ufeff")) if str(input_file) == "-" else read_lines(input_file)
    if skip_blank:
        lines = non_blank(lines, lambda m: Console(stderr=True).print(f"[yellow]warning: {m}"))
        if not lines:
            raise BertkitError(f"{input_file}: no {what} (every line is blank)")
    return lines


def given_once(config, values: dict[str, object], sets: list[str] | None) -> None:
    """Refuse a key that a command's option and a `--set` both give, with different values: the option won without
    a word (`--max-steps 2 --set max_steps=3` trained 2 steps). `config` is the recipe with the --set items applied;
    `values` the options' keys (None: not given), as `with_values` takes them."""
    from bertkit.recipes import resolve_key, set_keys

    given = set_keys(sets or [])
    for dotted, value in values.items():
        section, name = resolve_key(dotted, "option")
        if value is None or (section, name) not in given:
            continue
        said = getattr(getattr(config, section), name)
        if _same(_meaning(said, section, name), _meaning(value, section, name)):
            continue
        key, raw = given[(section, name)]
        raise BertkitError(f"{section}.{name}: the command says {_shown(value)}, --set {key}={raw} says "
                           f"{_shown(said)}; give it once")


def _same(a, b) -> bool:
    """Equal, a list and a tuple of the same items alike (a corpus given as files or as a TOML list)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return [str(x) for x in a] == [str(x) for x in b]
    return a == b or str(a) == str(b)


def _meaning(value, section: str, name: str):
    """What a value says, not how it is spelled: `none` is None, a duration its seconds (`60s` = `1m`)."""
    from bertkit.config import means_none, parse_duration

    if isinstance(value, str) and means_none(value):
        return None
    if name == "max_time" and value is not None:
        return parse_duration(value, f"{section}.{name}")
    return value


def _shown(value) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)


def with_max_time(config, max_time: str | None):
    """The config with `--max-time` applied: a duration replaces the recipe's budget, `none` drops it (no clock,
    even where the recipe sets one: the run ends at its max_steps or epochs), not given keeps it."""
    from bertkit.recipes import with_values

    return with_values(config, {"train.max_time": max_time})  # `none` too: a step cap the budget lifted comes back


def user_errors(fn):
    """Report a BertkitError (or a full disk) as `error: …` on stderr and exit 2; anything else is a bug and keeps
    its traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BertkitError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        except EOFError as exc:  # click takes an EOFError for Ctrl-D at a prompt and prints a bare "Aborted."; bertkit
            # never prompts, so one escaping a command is an unhandled read error (a truncated .gz): a bug, traceback
            raise RuntimeError(f"unhandled end of input: {exc}") from exc
        except Exception as exc:  # a full disk met outside a disk_errors block
            if not is_disk_full(exc):
                raise
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            typer.echo(f"error: {where}no space left on the device; nothing was committed, free some space and run "
                       "again", err=True)
            raise typer.Exit(2) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bertkit {bertkit.__version__}")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")] = False) -> None:
    """BERT-style pretrain-and-finetune toolkit."""
    if hasattr(signal, "SIGXFSZ"):  # over a file-size limit, writes fail with EFBIG (one error line), not a kill
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
