"""Errors a user can cause. The CLI prints them as one line and exits non-zero; anything else is a bug."""


class BertkitError(Exception):
    """A problem with the user's input (file, config, arguments): reported as one clear line."""


class ConfigError(BertkitError):
    """An invalid config: unknown key, bad value or invalid combination. The message names the key."""


def a_or_an(word: str) -> str:
    """The word with its indefinite article, for messages: "an encoder", "a decoder", "an encoder-decoder"."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"
