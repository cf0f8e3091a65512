"""A BPE vocabulary trained on a corpus read through `corpus.py` (cached Arrow, or read once when streamed). Apart
from `tokenizer.py` so that loading a tokenizer (every run loader) does not import `datasets`."""

from __future__ import annotations

import itertools
import sys

from rich.console import Console
from tokenizers import Tokenizer

from bertkit.config import TokenizerConfig
from bertkit.errors import BertkitError
from bertkit.text.corpus import ReadStats, find_files, iter_corpus, load_corpus
from bertkit.text.tokenizer import VocabularyTooLarge, iter_texts_batched, train_bpe


# how tokenizer.max_documents picks its documents, in the tokenizer cache's key: a tokenizer cached when it took the
# corpus's first N is not the one the same settings train now
SAMPLING = "spread"


def sample_indices(n: int, k: int) -> list[int]:
    """`k` of the indices 0..n-1 spread evenly (the first of each of k equal runs), for 0 < k <= n."""
    return [i * n // k for i in range(k)]


def train_on_corpus(corpus: list[str] | tuple[str, ...], vocab_size: int, cfg: TokenizerConfig,
                    text_field: str = "text", skip_bad_lines: bool = False, console: Console | None = None,
                    streaming: bool = False, option: str | None = None) -> Tokenizer:
    """Read the corpus (cached Arrow) and train BPE on it (or on `cfg.max_documents` of its documents, spread evenly
    over it). `streaming`: read the files once instead, nothing cached (a streamed corpus may not fit the disk twice;
    the cached read wrote a whole copy before training began), and up to the first `cfg.max_documents` documents:
    a stream's length is not known before it is read. `option`: how the user sets the size, for its errors."""
    console = console or Console(stderr=True)
    if streaming:
        stats, limit = ReadStats(), min(cfg.max_documents, sys.maxsize) if cfg.max_documents else None
        source = iter_corpus(find_files(corpus), text_field, skip_bad_lines, stats)
        documents = itertools.islice(source, limit)
        read = (f"{f'the first {limit:,} documents' if limit else 'every document'} of the streamed corpus, read "
                "once (not cached)")
        total = None
    else:
        dataset, stats, _ = load_corpus(corpus, text_field, skip_bad_lines)
        if stats.bad_lines:
            console.print(f"[yellow]skipped {stats.bad_lines:,} line(s) that are not valid UTF-8")
        if stats.bad_rows:
            console.print(f"[yellow]skipped {stats.bad_rows:,} CSV / TSV row(s) with more fields than the header")
        total = len(dataset)
        limit = min(total, cfg.max_documents or total)
        if limit < total:
            # spread evenly over the corpus, not its first N: a corpus in any order (IMDB's train file is its
            # negative reviews and then its positive ones; a dump sorted by title) gave a vocabulary of one part
            dataset = dataset.select(sample_indices(total, limit))
        documents = (text for batch in dataset.iter(batch_size=1000) for text in batch["text"])
        # the characters are the whole corpus's: under max_documents the line says which documents were read
        read = (f"{limit:,} of the corpus's {total:,} documents, spread evenly (tokenizer.max_documents)"
                if limit < total else f"{limit:,} documents ({stats.characters:,} characters in {stats.files} file(s))")
    console.print(f"training a {vocab_size:,}-token BPE on {read}")
    try:
        tokenizer = train_bpe(iter_texts_batched(documents), vocab_size, byte_level=cfg.byte_level,
                              lowercase=cfg.lowercase, nfkc=cfg.nfkc, min_frequency=cfg.min_frequency, length=limit,
                              option=option)
    except VocabularyTooLarge as exc:  # (a read error passes as it is)
        if streaming and not stats.documents:  # (the cached read refuses an empty corpus itself) an empty stream
            raise BertkitError(f"corpus is empty: {stats.files} file(s) read, no non-empty text") from None
        # the vocabulary error blamed the corpus, where max_documents cut it (a stream: one more document is there)
        if limit and (limit < total if total is not None else next(source, None) is not None):
            name = "--max-documents" if option else "tokenizer.max_documents"
            raise BertkitError(f"{exc} — or raise {name}, which took {limit:,} documents"
                               f"{f' of {total:,}' if total else ''}") from None
        raise
    return tokenizer
