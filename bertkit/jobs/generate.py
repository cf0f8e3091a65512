"""`bertkit generate` and `bertkit perplexity`: use a decoder (GPT) run — continue prompts, or score a text file.

Prompts are [CLS] + their tokens, as every pretraining block began with [CLS]; generation stops at [SEP], the token
that closed every training document.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from tokenizers import Tokenizer

from bertkit.config import SEEDS, Config
from bertkit.errors import BertkitError, a_or_an
from bertkit.generation import DEFAULT_TOP_K, DEFAULT_TOP_P, Sampling, generate, row_seed
from bertkit.hardware import autocast, resolve_precision
from bertkit.nn.model import Model
from bertkit.paths import need_file, one_is_one
from bertkit.run.directory import load_run
from bertkit.text.corpus import file_format, iter_corpus
from bertkit.text.packing import tokenize_documents
from bertkit.text.tasks import read_lines
from bertkit.text.tokenizer import continuation, load_run_tokenizer, special_ids


def load_lm(run: Path, device: str | torch.device | None = None,
            need: str = "generation") -> tuple[Model, Tokenizer, Config]:
    """A decoder run with its LM head, its tokenizer (a text's literal "[SEP]" or "[MASK]" read as text, as
    pretraining packed its corpus: it was a false document end in a prompt, a special target in a scored text), and
    its config; any other model is a clear error naming what `need`s it."""
    config, model = load_run(run, device)
    arch = config.model.architecture
    if arch != "decoder" or "lm" not in config.heads.names:
        hint = ("an encoder predicts masked tokens: try `bertkit fill-mask`" if arch == "encoder" else
                "an encoder-decoder translates: try `bertkit translate`" if arch == "encoder-decoder" else
                "it has no LM head")
        raise BertkitError(f"{run}: {need} needs a decoder language model (`bertkit pretrain --objective clm`); "
                           f"this is {a_or_an(arch)} ({hint})")
    tokenizer = load_run_tokenizer(run, config)
    tokenizer.encode_special_tokens = True
    return model, tokenizer, config


def trained_block(config: Config) -> int:
    """The tokens per block a decoder run trained on ([CLS] included): positions past it were never trained."""
    return min(config.data.block_size, config.model.max_len)


def _scored_tokens(file: Path, tokenizer: Tokenizer, stream: bool, text_field: str) -> tuple[list[int], str]:
    """The token ids `perplexity` scores, and the text they are (for its word and byte counts): the file's
    documents as pretraining reads them (the corpus reader: a .txt line, a JSON lines record's `text_field`, a CSV
    row's column; stripped, empty ones dropped), each closed by [SEP]; or (`stream`) a text file as one stream."""
    if stream:
        if file_format(file) != "text":
            raise BertkitError(f"--stream: {file} is a {file_format(file)} corpus; --stream scores a text file as "
                               "written (without --stream its documents are read as pretraining reads them)")
        text = "\n".join(read_lines(file))
        return (tokenizer.encode(text, add_special_tokens=False).ids if text.strip() else []), text
    need_file(file)
    documents = list(iter_corpus([Path(file)], text_field))
    ids = tokenize_documents({"text": documents}, tokenizer.to_str(), special_ids(tokenizer).sep)["ids"]
    return [int(i) for document in ids for i in document], "\n".join(documents)  # as packing tokenises them


def prompt_ids(tokenizer: Tokenizer, prompts: list[str], room: int) -> tuple[list[list[int]], int]:
    """[CLS] + each prompt's tokens, keeping the last `room` - 1 tokens of a longer prompt (the end is what the
    continuation follows). An empty (or blank) prompt is [CLS] alone: a document drawn from its start, as the
    decoder saw every training document begin. Returns (ids, how many prompts were cut)."""
    cls = special_ids(tokenizer).cls
    out, cut = [], 0
    for i, enc in enumerate(tokenizer.encode_batch(prompts, add_special_tokens=False)):
        ids = enc.ids if prompts[i].strip() else []
        if len(ids) > room - 1:
            ids, cut = ids[len(ids) - (room - 1):], cut + 1
        out.append([cls] + ids)
    return out, cut


@dataclass(frozen=True)
class GenerateJob:
    """What `bertkit generate` is asked: a decoder run, the prompts to continue, how many tokens to add at most and
    how to choose them (`sampling`, `seed`; None: unseeded), whether to reuse earlier tokens' keys/values (`cache`),
    and how many prompts to decode together."""

    run: Path
    prompts: tuple[str, ...]
    max_new_tokens: int = 50
    # the CLI's defaults (Sampling() alone samples from every token)
    sampling: Sampling = field(default_factory=lambda: Sampling(top_k=DEFAULT_TOP_K, top_p=DEFAULT_TOP_P))
    seed: int | None = 0
    cache: bool = True
    batch_size: int = 16
    precision: str = "auto"

    def __post_init__(self) -> None:
        one_is_one(self, "prompts")  # one given as a str is one item


@dataclass(frozen=True)
class Continuation:
    """One prompt continued: the prompt as given, the decoded new text, and how many tokens were added."""

    prompt: str
    continuation: str
    tokens: int


@dataclass(frozen=True)
class GenerateResult:
    """One continuation per prompt, in prompt order, and how many prompts were cut to fit (their last tokens
    kept)."""

    continuations: list[Continuation]
    cut: int = 0


def run(job: GenerateJob, console: Console | None = None) -> GenerateResult:
    """Continue each prompt (in order)."""
    console = console or Console(stderr=True)
    prompts, max_new_tokens, batch_size, seed = list(job.prompts), job.max_new_tokens, job.batch_size, job.seed
    if not prompts:
        raise BertkitError("no prompt given")
    if seed is not None and not 0 <= seed < SEEDS:  # before the model loads: torch's generator overflows past 2**64
        raise BertkitError(f"--seed {seed}: must be in [0, 2**32 - 1]")
    model, tokenizer, config = load_lm(job.run)
    max_len, block = model.config.max_len, trained_block(config)
    if max_new_tokens > max_len - 2:  # [CLS] and at least one prompt token: at max_len - 1 none was kept, and
        # every prompt got the same unconditional sample (a review, 2026-11-28)
        raise BertkitError(f"--max-new-tokens {max_new_tokens} leaves no room for a prompt: the model reads at most "
                           f"max_len={max_len} tokens, [CLS] and one of the prompt's among them (at most "
                           f"{max_len - 2})")
    ids, cut = prompt_ids(tokenizer, prompts, max_len - max_new_tokens)
    if cut:
        console.print(f"[yellow]warning: {cut} prompt(s) were longer than {max_len - max_new_tokens - 1} tokens "
                      f"(max_len {max_len} - --max-new-tokens {max_new_tokens} - [CLS]); kept their last tokens")
    if max(map(len, ids)) + max_new_tokens - 1 > block:  # the last token drawn is never read
        console.print(f"[yellow]warning: a prompt and --max-new-tokens {max_new_tokens} reach past the {block}-token "
                      "blocks the run trained on; positions past them were never trained")
    special = special_ids(tokenizer)
    # tokens that closed no training document and began none but the block: never drawn (they decode to nothing)
    banned = [special.cls, special.pad, special.mask, special.unk]
    chosen = resolve_precision(job.precision, model.device).precision  # auto: bf16 where the device has it natively
    results = []
    for start in range(0, len(ids), batch_size):
        # a seed per prompt, by its place in the list: a prompt's sample does not depend on --batch-size or on the
        # prompts after it
        rows = range(start, min(start + batch_size, len(ids)))
        with autocast(model.device, chosen):
            new = generate(model, ids[start:start + batch_size], max_new_tokens, special.sep, special.pad,
                           job.sampling, None if seed is None else [row_seed(seed, i) for i in rows], job.cache,
                           banned)
        for prompt, given, tokens in zip(prompts[start:start + batch_size], ids[start:start + batch_size], new):
            # decoded after the prompt's ids: alone, a Metaspace tokenizer's first new word lost its space
            results.append(Continuation(prompt, continuation(tokenizer, given, tokens), len(tokens)))
    return GenerateResult(results, cut)


@dataclass(frozen=True)
class PerplexityJob:
    """What `bertkit perplexity` is asked: a decoder run, a text file, the window (tokens, [CLS] included; None:
    the block size the run trained on) and the stride it moves by (None: half a window), how many windows go
    through the model together, and whether the file is one stream (`stream`) or, as pretraining packs a corpus, a
    document per non-blank line, each closed by [SEP]."""

    run: Path
    file: Path
    window: int | None = None
    stride: int | None = None
    batch_size: int = 16
    stream: bool = False


@dataclass(frozen=True)
class PerplexityResult:
    """The file's scores: tokens scored, whitespace words and UTF-8 bytes of the text (its documents, a line break
    between them), the window and stride used, the mean loss per token (nats), perplexity per token and per word,
    bits per byte, and whether the file was read as one stream."""

    file: Path
    tokens: int
    words: int
    bytes: int
    window: int
    stride: int
    loss: float
    token_ppl: float
    word_ppl: float
    bits_per_byte: float
    stream: bool = False  # read as one stream (--stream), not as documents


@torch.no_grad()
def perplexity(job: PerplexityJob, console: Console | None = None) -> PerplexityResult:
    """Perplexity of a decoder on a text file, read as pretraining packs a corpus (a document per non-blank line,
    stripped, each closed by [SEP], which is scored as validation scores it: a decoder trained so never saw a line
    break, and a stream's each cost ~14 nats, 932 for a 156 text) or as one stream (`job.stream`): windows of [CLS]
    + `window` - 1 tokens moved by `stride`, each token scored once with as much context as its window gives
    (stride < window - 1 gives every scored token at least window - 1 - stride tokens of context). Reports per
    token, per word (whitespace words of the file: comparable across tokenizers) and bits per byte."""
    console = console or Console(stderr=True)
    file, stride, batch_size = job.file, job.stride, job.batch_size
    model, tokenizer, config = load_lm(job.run, need="perplexity")
    block = trained_block(config)
    # `is None`, not `or`: a window or stride of 0 is an error, not the default
    window = block if job.window is None else job.window
    if not 2 <= window <= model.config.max_len:  # [CLS] + at least one scored token
        raise BertkitError(f"--window {window}: must be in [2, max_len={model.config.max_len}]")
    if window > block:
        console.print(f"[yellow]warning: --window {window} is longer than the {block}-token blocks the run trained "
                      "on: positions past them were never trained")
    body = window - 1
    stride = max(1, body // 2) if stride is None else stride
    if not 1 <= stride <= body:
        raise BertkitError(f"--stride {stride}: must be in [1, window - 1 = {body}]")
    tokens, text = _scored_tokens(Path(file), tokenizer, job.stream, config.data.text_field)
    if not tokens:
        raise BertkitError(f"{file}: no text")
    cls = special_ids(tokenizer).cls
    # window starts b = 0, stride, …; window b scores tokens [max(b, scored_until), b + body)
    starts = list(range(0, max(1, len(tokens) - body + stride), stride))
    device = model.device
    nll, count, scored_until = 0.0, 0, 0
    bar = Progress(TextColumn("[bold]perplexity"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=console, transient=True, disable=not console.is_terminal)
    task = bar.add_task("windows", total=len(starts))
    bar.start()
    for first in range(0, len(starts), batch_size):
        bar.advance(task, len(starts[first:first + batch_size]))
        chunk = starts[first:first + batch_size]
        rows = [[cls] + tokens[b:b + body] for b in chunk]
        longest = max(len(r) for r in rows)
        ids = torch.tensor([r + [0] * (longest - len(r)) for r in rows], device=device)  # right pad: never scored
        log_p = model(ids, head="lm").logits.float().log_softmax(-1)  # (N, W, V)
        for i, b in enumerate(chunk):
            end = min(b + body, len(tokens))
            begin = max(b, scored_until)
            if begin >= end:
                continue
            # token j (index into tokens) sits at window position j - b + 1 and is predicted from position j - b
            targets = torch.tensor(tokens[begin:end], device=device)
            positions = torch.arange(begin - b, end - b, device=device)
            nll -= float(log_p[i, positions, targets].sum())
            count += end - begin
            scored_until = end
    bar.stop()
    words = len(text.split())
    n_bytes = len(text.encode("utf-8"))
    return PerplexityResult(Path(file), tokens=count, words=words, bytes=n_bytes, window=window, stride=stride,
                            loss=nll / count, token_ppl=math.exp(nll / count), word_ppl=math.exp(nll / words),
                            bits_per_byte=nll / math.log(2) / n_bytes, stream=job.stream)
