"""`bertkit tokenizer train`: a BPE vocabulary from a corpus, saved as tokenizer.json (+ tokenizer_config.json)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from bertkit.config import TokenizerConfig
from bertkit.errors import BertkitError
from bertkit.paths import path_list
from bertkit.run.files import atomic_dir
from bertkit.run.lock import locked
from bertkit.run.outputs import TOKENIZER, claim, refuse_nested
from bertkit.text.bpe import train_on_corpus
from bertkit.text.tokenizer import save_tokenizer


@dataclass(frozen=True)
class TokenizerJob:
    """What `bertkit tokenizer train` is asked: corpus files or directories, the vocabulary size, the directory to
    write, and the BPE settings."""

    corpus: tuple[str, ...]
    vocab_size: int
    out: Path
    settings: TokenizerConfig = field(default_factory=TokenizerConfig)
    text_field: str = "text"
    skip_bad_lines: bool = False
    overwrite: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "corpus", path_list(self.corpus))  # one file given as a str is one file


@dataclass(frozen=True)
class TokenizerResult:
    """The directory written and the vocabulary size reached (special tokens included)."""

    out: Path
    vocab_size: int


def run(job: TokenizerJob, console: Console | None = None) -> TokenizerResult:
    """Train and save; `out` is written atomically and never overwritten unless asked."""
    console = console or Console(stderr=True)
    if job.vocab_size < 1:
        raise BertkitError(f"--vocab-size must be positive, got {job.vocab_size}")
    refuse_nested(job.out)  # before the lock, whose file would be created inside the run
    with locked(job.out, "output"):
        claim(job.out, TOKENIZER, job.overwrite, inputs=job.corpus)
        tok = train_on_corpus(list(job.corpus), job.vocab_size, job.settings, job.text_field, job.skip_bad_lines,
                              console, option="--vocab-size")
        with atomic_dir(job.out, overwrite=job.overwrite) as tmp:
            save_tokenizer(tok, tmp)
    console.print(f"wrote {job.out}/tokenizer.json ({tok.get_vocab_size():,} tokens)")
    return TokenizerResult(Path(job.out), tok.get_vocab_size())
