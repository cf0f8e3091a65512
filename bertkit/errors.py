"""Errors a user can cause. The CLI prints them as one line and exits non-zero; anything else is a bug."""

from pathlib import Path


class BertkitError(Exception):
    """A problem with the user's input (file, config, arguments): reported as one clear line."""


class ConfigError(BertkitError):
    """An invalid config: unknown key, bad value or invalid combination. The message names the key."""


def a_or_an(word: str) -> str:
    """The word with its indefinite article, for messages: "an encoder", "a decoder", "an encoder-decoder"."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


def need_file(path: str | Path) -> None:
    """Refuse a path that is not a file: a directory is named as one (not as "no such file")."""
    path = Path(path)
    if path.is_dir():
        raise BertkitError(f"{path}: is a directory; give a file")
    if not path.is_file():
        raise BertkitError(f"{path}: no such file")
