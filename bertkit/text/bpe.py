"""A BPE vocabulary trained on a corpus read through `corpus.py` (cached Arrow). Apart from `tokenizer.py` so that
loading a tokenizer (every run loader) does not import `datasets`."""

from __future__ import annotations

import itertools

from rich.console import Console
from tokenizers import Tokenizer

from bertkit.config import TokenizerConfig
from bertkit.text.corpus import load_corpus
from bertkit.text.tokenizer import iter_texts_batched, train_bpe


def train_on_corpus(corpus: list[str] | tuple[str, ...], vocab_size: int, cfg: TokenizerConfig,
                    text_field: str = "text", skip_bad_lines: bool = False, console: Console | None = None,
                    ) -> Tokenizer:
    """Read the corpus (cached Arrow) and train BPE on it (or on its first `cfg.max_documents` documents)."""
    console = console or Console(stderr=True)
    dataset, stats, _ = load_corpus(corpus, text_field, skip_bad_lines)
    if stats.bad_lines:
        console.print(f"[yellow]skipped {stats.bad_lines:,} line(s) that are not valid UTF-8")
    if stats.bad_rows:
        console.print(f"[yellow]skipped {stats.bad_rows:,} CSV / TSV row(s) with more fields than the header")
    limit = min(len(dataset), cfg.max_documents or len(dataset))

    def texts():
        for batch in dataset.iter(batch_size=1000):
            yield from batch["text"]

    console.print(f"training a {vocab_size:,}-token BPE on {limit:,} documents ({stats.characters:,} characters "
                  f"in {stats.files} file(s))")
    return train_bpe(iter_texts_batched(itertools.islice(texts(), limit)), vocab_size, byte_level=cfg.byte_level,
                     lowercase=cfg.lowercase, nfkc=cfg.nfkc, min_frequency=cfg.min_frequency, length=limit)
