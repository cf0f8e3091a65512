"""A BPE vocabulary trained on a corpus read through `corpus.py` (cached Arrow, or read once when streamed). Apart
from `tokenizer.py` so that loading a tokenizer (every run loader) does not import `datasets`."""

from __future__ import annotations

import itertools

from rich.console import Console
from tokenizers import Tokenizer

from bertkit.config import TokenizerConfig
from bertkit.errors import BertkitError
from bertkit.text.corpus import ReadStats, find_files, iter_corpus, load_corpus
from bertkit.text.tokenizer import iter_texts_batched, train_bpe


def train_on_corpus(corpus: list[str] | tuple[str, ...], vocab_size: int, cfg: TokenizerConfig,
                    text_field: str = "text", skip_bad_lines: bool = False, console: Console | None = None,
                    streaming: bool = False, option: str | None = None) -> Tokenizer:
    """Read the corpus (cached Arrow) and train BPE on it (or on its first `cfg.max_documents` documents).
    `streaming`: read the files once instead, nothing cached (a streamed corpus may not fit the disk twice; the
    cached read wrote a whole copy before training began). `option`: how the user sets the size, for its errors."""
    console = console or Console(stderr=True)
    if streaming:
        stats, limit = ReadStats(), cfg.max_documents
        documents = itertools.islice(iter_corpus(find_files(corpus), text_field, skip_bad_lines, stats), limit)
        read = (f"{f'the first {limit:,}' if limit else 'every'} document(s) of the streamed corpus, read once "
                "(not cached)")
    else:
        dataset, stats, _ = load_corpus(corpus, text_field, skip_bad_lines)
        if stats.bad_lines:
            console.print(f"[yellow]skipped {stats.bad_lines:,} line(s) that are not valid UTF-8")
        if stats.bad_rows:
            console.print(f"[yellow]skipped {stats.bad_rows:,} CSV / TSV row(s) with more fields than the header")
        limit = min(len(dataset), cfg.max_documents or len(dataset))
        texts = (text for batch in dataset.iter(batch_size=1000) for text in batch["text"])
        documents = itertools.islice(texts, limit)
        # the characters are the whole corpus's: under max_documents the line says which documents were read
        read = (f"the first {limit:,} of {len(dataset):,} documents (tokenizer.max_documents)" if limit < len(dataset)
                else f"{limit:,} documents ({stats.characters:,} characters in {stats.files} file(s))")
    console.print(f"training a {vocab_size:,}-token BPE on {read}")
    tokenizer = train_bpe(iter_texts_batched(documents), vocab_size, byte_level=cfg.byte_level,
                          lowercase=cfg.lowercase, nfkc=cfg.nfkc, min_frequency=cfg.min_frequency, length=limit,
                          option=option)
    if streaming and not stats.documents:  # (the cached read refuses an empty corpus itself)
        raise BertkitError(f"corpus is empty: {stats.files} file(s) read, no non-empty text")
    return tokenizer
