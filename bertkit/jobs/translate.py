"""`bertkit translate` and `bertkit evaluate-seq2seq`: an encoder-decoder run's translations, and their BLEU."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from bertkit.errors import BertkitError
from bertkit.metrics import translation_metrics
from bertkit.run.files import atomic_file
from bertkit.text.tasks import read_parallel
from bertkit.translation import Translator


def _check_out(out: Path | None, overwrite: bool) -> None:
    """Refuse an existing output before any work is done (the write itself is atomic)."""
    if out is not None and Path(out).exists() and not overwrite:
        raise BertkitError(f"{out}: already exists (choose another path or pass --overwrite)")


def _run(translator: Translator, texts: list[str], beam: int, length_penalty: float, max_new_tokens: int | None,
         console: Console) -> tuple[list[str], int]:
    """Translate with a progress bar (on stderr; transient)."""
    bar = Progress(TextColumn("[bold]translate"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                   console=console, transient=True, disable=not console.is_terminal)
    with bar:
        task = bar.add_task("translate", total=len(texts))
        return translator.translate(texts, beam, length_penalty, max_new_tokens,
                                    on_batch=lambda n: bar.advance(task, n))


def _write(out: Path, lines: list[str], overwrite: bool) -> None:
    with atomic_file(out, overwrite=overwrite) as tmp:
        tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def translate(run: Path, texts: list[str], beam: int = 4, length_penalty: float = 1.0,
              max_new_tokens: int | None = None, batch_size: int = 64, out: Path | None = None,
              overwrite: bool = False, console: Console | None = None, precision: str = "auto") -> list[str]:
    """Translate texts (empty lines stay empty); with `out`, write one translation per line."""
    console = console or Console(stderr=True)
    _check_out(out, overwrite)
    translator = Translator(run, batch_size=batch_size, precision=precision)
    keep = [i for i, t in enumerate(texts) if t.strip()]
    if not keep:
        raise BertkitError("nothing to translate: every input is empty")
    outputs, cut = _run(translator, [texts[i].strip() for i in keep], beam, length_penalty, max_new_tokens, console)
    if cut:
        console.print(f"[yellow]warning: {cut} sentence(s) were longer than the model's {translator.max_length} "
                      "tokens and were cut")
    lines = [""] * len(texts)
    for i, line in zip(keep, outputs):
        lines[i] = line
    if out is not None:
        _write(out, lines, overwrite)
        console.print(f"wrote {len(lines):,} translation(s) to {out}")
    return lines


def evaluate(run: Path, source: str | Path, target: str | Path, beam: int = 4, length_penalty: float = 1.0,
             max_new_tokens: int | None = None, batch_size: int = 64, hypotheses: Path | None = None,
             overwrite: bool = False, console: Console | None = None) -> dict:
    """Translate `source` and score against `target` (corpus BLEU and chrF, sacrebleu)."""
    console = console or Console(stderr=True)
    _check_out(hypotheses, overwrite)
    pairs, skipped = read_parallel(source, target)
    if skipped:
        console.print(f"[yellow]skipped {skipped:,} pair(s) with an empty side")
    translator = Translator(run, batch_size=batch_size)
    start = time.perf_counter()
    outputs, cut = _run(translator, [s for s, _ in pairs], beam, length_penalty, max_new_tokens, console)
    seconds = time.perf_counter() - start
    if cut:
        console.print(f"[yellow]warning: {cut} source sentence(s) were longer than the model's "
                      f"{translator.max_length} tokens and were cut")
    result = {**translation_metrics(outputs, [t for _, t in pairs]), "beam": beam, "length_penalty": length_penalty,
              "seconds": seconds, "skipped": skipped}
    if hypotheses is not None:
        _write(hypotheses, outputs, overwrite)
    return result
