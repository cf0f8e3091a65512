"""Errors a user can cause. The CLI prints them as one line and exits non-zero; anything else is a bug."""

import difflib


class BertkitError(Exception):
    """A problem with the user's input (file, config, arguments): reported as one clear line."""


class ConfigError(BertkitError):
    """An invalid config: unknown key, bad value or invalid combination. The message names the key."""


def a_or_an(word: str) -> str:
    """The word with its indefinite article, for messages: "an encoder", "a decoder", "an encoder-decoder"."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


# the short names people type for a key, which no spelling distance finds (`--set lr=1e-3`: a first-use review)
ABBREVIATIONS = {"lr": "learning_rate", "bs": "batch_size", "wd": "weight_decay", "steps": "max_steps",
                 "epoch": "epochs", "layers": "n_layers", "heads": "n_heads", "hidden": "d_model",
                 "vocab": "vocab_size", "seq_len": "max_len", "max_seq_len": "max_len", "warmup": "warmup_ratio",
                 "budget": "max_time"}


def suggest(word: str, choices) -> str:
    """' (did you mean …?)' for the closest choice (or the key an abbreviation stands for), or ''."""
    choices = list(choices)
    if ABBREVIATIONS.get(word) in choices:
        return f" (did you mean '{ABBREVIATIONS[word]}'?)"
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def need_batch_size(batch_size) -> int:
    """`batch_size` checked as a whole number >= 1 (0 raised range()'s ValueError deep inside batching)."""
    import numbers

    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise BertkitError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
    return int(batch_size)


def need_config(config, job: str) -> None:
    """A job's `config` checked to be a Config: a recipe's name given instead failed deep inside with
    AttributeError ('str' object has no attribute 'train')."""
    if not hasattr(config, "train"):
        raise BertkitError(f"{job}: config must be a Config, e.g. bertkit.recipes.load_recipe({config!r}), not "
                           f"{type(config).__name__} {config!r}")
