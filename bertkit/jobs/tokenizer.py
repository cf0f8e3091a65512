"""`bertkit tokenizer train`: a BPE vocabulary from a corpus, saved as tokenizer.json (+ tokenizer_config.json)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from bertkit.config import TokenizerConfig
from bertkit.errors import BertkitError
from bertkit.run.files import atomic_dir
from bertkit.text.bpe import train_on_corpus
from bertkit.text.tokenizer import save_tokenizer


def run(corpus: list[str], vocab_size: int, out: Path, cfg: TokenizerConfig, text_field: str = "text",
        skip_bad_lines: bool = False, overwrite: bool = False, console: Console | None = None) -> dict:
    """Train and save; `out` is written atomically and never overwritten unless asked."""
    console = console or Console(stderr=True)
    if vocab_size < 1:
        raise BertkitError(f"--vocab-size must be positive, got {vocab_size}")
    tok = train_on_corpus(corpus, vocab_size, cfg, text_field, skip_bad_lines, console)
    with atomic_dir(out, overwrite=overwrite) as tmp:
        save_tokenizer(tok, tmp)
    console.print(f"wrote {out}/tokenizer.json ({tok.get_vocab_size():,} tokens)")
    return {"out": str(out), "vocab_size": tok.get_vocab_size()}
