"""`bertkit translate` and `bertkit evaluate-seq2seq`: an encoder-decoder run's translations, and their BLEU."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from bertkit.paths import one_is_one
from bertkit.errors import BertkitError
from bertkit.metrics import translation_metrics
from bertkit.text.tokenizer import lowercases
from bertkit.run.files import atomic_file
from bertkit.run.outputs import TEXT, claim
from bertkit.text.tasks import parallel_rows
from bertkit.translation import Translator


def _check_out(out: Path | None, overwrite: bool, inputs: tuple) -> None:
    """Refuse an output that may not be written before any work is done (the write itself is atomic)."""
    if out is not None:
        claim(out, TEXT, overwrite, inputs=inputs, hint="choose another path or pass --overwrite")


def _run(translator: Translator, texts: list[str], beam: int, length_penalty: float, max_new_tokens: int | None,
         console: Console) -> tuple[list[str], int]:
    """Translate with a progress bar (on stderr; transient)."""
    if max_new_tokens is not None and max_new_tokens > translator.max_length - 1:  # it was capped without a word
        raise BertkitError(f"--max-new-tokens {max_new_tokens}: this model writes at most {translator.max_length - 1} "
                           f"tokens (max_len={translator.max_length}, less the [CLS] its output starts with)")
    bar = Progress(TextColumn("[bold]translate"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=console, transient=True, disable=not console.is_terminal)
    with bar:
        task = bar.add_task("translate", total=len(texts))
        return translator.translate(texts, beam, length_penalty, max_new_tokens,
                                    on_batch=lambda n: bar.advance(task, n))


def _placed(total: int, rows: list[int], outputs: list[str]) -> list[str]:
    """`total` lines, each of `rows` holding its output and the others (empty or skipped inputs) empty."""
    lines = [""] * total
    for row, output in zip(rows, outputs):
        lines[row] = output
    return lines


def _write(out: Path, lines: list[str], overwrite: bool) -> None:
    with atomic_file(out, overwrite=overwrite) as tmp:
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@dataclass(frozen=True)
class TranslateJob:
    """What `bertkit translate` is asked: an encoder-decoder run, the sentences to translate (empty ones stay
    empty), how to decode (`beam`, `length_penalty`, `max_new_tokens`; None: the model's max_len - 1), how many
    sentences to decode together, and a file to write one translation per line to (None: only return them)."""

    run: Path
    sentences: tuple[str, ...]
    beam: int = 4
    length_penalty: float = 1.0
    max_new_tokens: int | None = None
    batch_size: int = 64
    out: Path | None = None
    overwrite: bool = False
    precision: str = "auto"
    inputs: tuple[Path, ...] = ()  # the files the sentences came from (never overwritten)

    def __post_init__(self) -> None:
        one_is_one(self, "sentences", "inputs")  # one given as a str is one item


@dataclass(frozen=True)
class TranslateResult:
    """One translation per sentence, in order ("" for an empty sentence), and how many sentences were longer than
    the model reads and were cut."""

    lines: list[str]
    cut: int = 0


def translate(job: TranslateJob, console: Console | None = None) -> TranslateResult:
    """Translate the sentences (empty ones stay empty); with `job.out`, write one translation per line."""
    console = console or Console(stderr=True)
    texts, out, overwrite = list(job.sentences), job.out, job.overwrite
    _check_out(out, overwrite, (*job.inputs, job.run))
    translator = Translator(job.run, batch_size=job.batch_size, precision=job.precision)
    keep = [i for i, t in enumerate(texts) if t.strip()]
    if not keep:
        raise BertkitError("nothing to translate: every input is empty")
    outputs, cut = _run(translator, [texts[i].strip() for i in keep], job.beam, job.length_penalty,
                        job.max_new_tokens, console)
    if cut:
        console.print(f"[yellow]warning: {cut} sentence(s) were longer than the model's {translator.max_length} "
                      "tokens and were cut")
    lines = _placed(len(texts), keep, outputs)
    if out is not None:
        _write(out, lines, overwrite)
        console.print(f"wrote {len(lines):,} translation(s) to {out}")
    return TranslateResult(lines, cut)


@dataclass(frozen=True)
class EvaluateSeq2SeqJob:
    """What `bertkit evaluate-seq2seq` is asked: an encoder-decoder run, a source file and its reference
    translations line by line (as given: data-root relative is fine, and errors name them so), how to decode, a
    file to also write the translations to (one line per source line: a skipped pair's is empty), and the
    precision (auto: bf16 where native, where a few near-ties may fall with --batch-size; fp32: the same at every
    batch size)."""

    run: Path
    source: str | Path
    target: str | Path
    beam: int = 4
    length_penalty: float = 1.0
    max_new_tokens: int | None = None
    batch_size: int = 64
    hypotheses: Path | None = None
    overwrite: bool = False
    precision: str = "auto"


@dataclass(frozen=True)
class EvaluateSeq2SeqResult:
    """Corpus BLEU and chrF of the translations (sacrebleu: the full BLEU line and its signature too), over how
    many sentence pairs, the decoding used (precision: what auto chose), seconds spent translating, and the pairs
    skipped for an empty side."""

    bleu: float
    chrf: float
    bleu_detail: str
    bleu_signature: str
    sentences: int
    beam: int
    length_penalty: float
    seconds: float
    skipped: int
    precision: str


def evaluate(job: EvaluateSeq2SeqJob, console: Console | None = None) -> EvaluateSeq2SeqResult:
    """Translate `job.source` and score against `job.target` (corpus BLEU and chrF, sacrebleu)."""
    console = console or Console(stderr=True)
    beam, hypotheses, overwrite = job.beam, job.hypotheses, job.overwrite
    _check_out(hypotheses, overwrite, (job.source, job.target, job.run))
    pairs, rows, lines = parallel_rows(job.source, job.target)
    skipped = lines - len(pairs)
    if skipped:
        console.print(f"[yellow]skipped {skipped:,} pair(s) with an empty side" + (
            " (their lines in --hypotheses are empty)" if hypotheses is not None else ""))
    translator = Translator(job.run, batch_size=job.batch_size, precision=job.precision)
    start = time.perf_counter()
    outputs, cut = _run(translator, [s for s, _ in pairs], beam, job.length_penalty, job.max_new_tokens, console)
    seconds = time.perf_counter() - start
    if cut:
        console.print(f"[yellow]warning: {cut} source sentence(s) were longer than the model's "
                      f"{translator.max_length} tokens and were cut")
    lowered = lowercases(translator.tokenizers.target)
    if lowered:
        console.print("the run's tokenizer lowercases: BLEU and chrF are case-insensitive (case:lc in the signature)")
    scores = translation_metrics(outputs, [t for _, t in pairs], lowercase=lowered)
    result = EvaluateSeq2SeqResult(bleu=scores["bleu"], chrf=scores["chrf"], bleu_detail=scores["bleu_detail"],
                                   bleu_signature=scores["bleu_signature"], sentences=scores["sentences"],
                                   beam=beam, length_penalty=job.length_penalty, seconds=seconds, skipped=skipped,
                                   precision=translator.precision)
    if hypotheses is not None:  # one line per source line, as `translate` writes: a skipped pair's is empty
        _write(hypotheses, _placed(lines, rows, outputs), overwrite)
    return result
