"""`bertkit generate`, `perplexity`, `translate`, `evaluate-seq2seq`, `attention`: using decoder and
encoder-decoder runs, and looking inside any run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from bertkit.cli.common import PrecisionOption, app, given_texts, user_errors
from bertkit.run.files import to_json

RunArgument = Annotated[Path, typer.Argument(help="A run directory.")]


@app.command()
@user_errors
def generate(run: Annotated[Path, typer.Argument(help="A decoder run (bertkit pretrain --objective clm).")],
             prompts: Annotated[list[str] | None, typer.Argument(help="Prompts to continue (or --input).")] = None,
             input_file: Annotated[Path | None, typer.Option("--input", "-i", help="A file of prompts, one per "
                                                             "line (- for stdin; blank lines are skipped).")] = None,
             max_new_tokens: Annotated[int, typer.Option(min=1, help="Tokens to add at most (stops earlier at "
                                                                     "[SEP], the end of a text).")] = 50,
             greedy: Annotated[bool, typer.Option(help="Always take the most likely token (ignores the sampling "
                                                       "options).")] = False,
             temperature: Annotated[float, typer.Option(help="Sampling temperature (> 0; lower is more "
                                                             "conservative).")] = 1.0,
             top_k: Annotated[int, typer.Option(min=0, help="Sample from the k most likely tokens (0: all).")] = 50,
             top_p: Annotated[float, typer.Option(help="Nucleus sampling: the most likely tokens holding this "
                                                       "probability (1: all).")] = 0.95,
             seed: Annotated[int, typer.Option(help="Random seed: a prompt's sample depends on the seed and its "
                                                          "place in the list, not on the prompts after it or "
                                                          "--batch-size (in fp32; bf16 can tip a near-tie).")] = 0,
             cache: Annotated[bool, typer.Option(help="Reuse keys/values of earlier tokens (KV cache); "
                                                      "--no-cache recomputes the whole prefix each step.")] = True,
             batch_size: Annotated[int, typer.Option(min=1, help="Prompts decoded together.")] = 16,
             precision: PrecisionOption = "auto",
             json_out: Annotated[bool, typer.Option("--json", help="One JSON line per prompt.")] = False) -> None:
    """Continue prompts with a GPT-style decoder: sampling (temperature, top-k, top-p, seed) or greedy.

    Example: bertkit generate runs/decoder-imdb "This movie was" --max-new-tokens 40 --seed 1
    """
    from bertkit.errors import BertkitError
    from bertkit.generation import Sampling
    from bertkit.jobs import generate as job

    # checked here, by option name (Sampling refuses the same values, for callers of the API)
    if not (math.isfinite(temperature) and temperature > 0):  # nan: a traceback in sampling; inf: uniform noise
        raise BertkitError(f"--temperature {temperature}: must be a finite number > 0 (lower is more conservative; "
                           "--greedy always takes the most likely token)")
    if not 0.0 < top_p <= 1.0:
        raise BertkitError(f"--top-p {top_p}: must be in (0, 1] (1: every token)")
    sampling = Sampling(greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p)
    texts = given_texts(prompts, input_file, "prompt", skip_blank=True)
    result = job.run(job.GenerateJob(run, tuple(texts), max_new_tokens, sampling, seed, cache, batch_size,
                                     precision=precision))
    for c in result.continuations:
        typer.echo(to_json(c, indent=None) if json_out else c.prompt + c.continuation)


@app.command()
@user_errors
def perplexity(run: Annotated[Path, typer.Argument(help="A decoder run.")],
               file: Annotated[Path, typer.Argument(help="A corpus file, read as pretraining reads it: a "
                                                         "document per non-blank .txt line (JSON lines record, "
                                                         "CSV row; .gz too), each closed by [SEP] (data-root "
                                                         "relative is fine: wikitext2/wiki.test.raw).")],
               window: Annotated[int | None, typer.Option(help="Tokens per window, [CLS] included (default: "
                                                               "the block size the run trained on).")] = None,
               stride: Annotated[int | None, typer.Option(help="Tokens the window moves (default: half a window; "
                                                               "smaller gives more context, costs more).")] = None,
               batch_size: Annotated[int, typer.Option(min=1, help="Windows per forward pass.")] = 16,
               stream: Annotated[bool, typer.Option(
                   "--stream", help="Score the file as one stream, line breaks included, instead of a document per "
                                    "line (a decoder pretrained on documents of one line never saw a line break: "
                                    "each costs it ~14 nats).")] = False,
               json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Perplexity of a decoder on a text file: per token, per word (comparable across tokenizers) and bits per
    byte, with a sliding window.

    Example: bertkit perplexity runs/decoder-imdb wikitext2/wiki.test.raw
    """
    from bertkit.jobs import generate as job
    from bertkit.paths import resolve_data_path

    result = job.perplexity(job.PerplexityJob(run, resolve_data_path(file), window, stride, batch_size, stream))
    if json_out:
        typer.echo(to_json(result, indent=None))
        return
    typer.echo(f"{result.file}: {result.tokens:,} tokens, {result.words:,} words (window {result.window}, "
               f"stride {result.stride})")
    typer.echo(f"  token perplexity {result.token_ppl:.2f}   word perplexity {result.word_ppl:.2f}   "
               f"bits per byte {result.bits_per_byte:.3f}")


BeamOption = Annotated[int, typer.Option(min=1, help="Beam size (1: greedy decoding).")]
LengthPenaltyOption = Annotated[float, typer.Option(help="Beam scores are log-probability sums divided by "
                                                         "length^this (0: raw sums; > 0 favours longer outputs).")]
MaxNewOption = Annotated[int | None, typer.Option(min=1, help="Output tokens at most (default: the model's "
                                                              "max_len - 1).")]


@app.command()
@user_errors
def translate(run: Annotated[Path, typer.Argument(help="An encoder-decoder run (bertkit finetune seq2seq).")],
              sentences: Annotated[list[str] | None, typer.Argument(help="Sentences to translate (or "
                                                                         "--input).")] = None,
              input_file: Annotated[Path | None, typer.Option("--input", "-i", help="A file of sentences, one per "
                                                              "line (- for stdin).")] = None,
              out: Annotated[Path | None, typer.Option("--out", "-o", help="Write translations here, one per line "
                                                                           "(default stdout).")] = None,
              beam: BeamOption = 4, length_penalty: LengthPenaltyOption = 1.0, max_new_tokens: MaxNewOption = None,
              batch_size: Annotated[int, typer.Option(min=1, help="Sentences decoded together.")] = 64,
              precision: PrecisionOption = "auto",
              overwrite: Annotated[bool, typer.Option(help="Replace an existing --out text file (never an input "
                                                                   "or another kind of file).")] = False) -> None:
    """Translate sentences with an encoder-decoder: beam search (default 4) or greedy (--beam 1), KV cache.

    Example: bertkit translate runs/multi30k "A man is riding a bike." --beam 4
    """
    from bertkit.jobs import translate as job

    result = job.translate(job.TranslateJob(run, tuple(given_texts(sentences, input_file, "sentence")), beam,
                                            length_penalty, max_new_tokens, batch_size, out, overwrite,
                                            precision=precision,
                                            inputs=(input_file,) if input_file is not None else ()))
    if out is None:
        for line in result.lines:
            typer.echo(line)


@app.command("evaluate-seq2seq")
@user_errors
def evaluate_seq2seq(run: Annotated[Path, typer.Argument(help="An encoder-decoder run.")],
                     source: Annotated[str, typer.Option(help="Source sentences, one per line.")],
                     target: Annotated[str, typer.Option(help="Reference translations, line by line.")],
                     beam: BeamOption = 4, length_penalty: LengthPenaltyOption = 1.0,
                     max_new_tokens: MaxNewOption = None,
                     batch_size: Annotated[int, typer.Option(min=1, help="Sentences decoded together.")] = 64,
                     hypotheses: Annotated[Path | None, typer.Option(help="Also write the translations here.")]
                     = None,
                     overwrite: Annotated[bool, typer.Option(help="Replace an existing --hypotheses file.")]
                     = False,
                     precision: PrecisionOption = "auto",
                     json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Corpus BLEU and chrF (sacrebleu) of a run's translations of --source against --target.

    In bf16 a near-tie between two tokens can fall either way with the batch's padded shape, so a few translations
    (and the score's last digit) may change with --batch-size; --precision fp32 gives the same at every batch size.

    Example: bertkit evaluate-seq2seq runs/multi30k --source multi30k/test_2016_flickr.en
    --target multi30k/test_2016_flickr.de --beam 4
    """
    from bertkit.jobs import translate as job

    result = job.evaluate(job.EvaluateSeq2SeqJob(run, source, target, beam, length_penalty, max_new_tokens,
                                                 batch_size, hypotheses, overwrite, precision))
    if json_out:
        typer.echo(to_json(result, indent=None))
        return
    typer.echo(f"{result.sentences:,} sentences, beam {beam}, {result.precision}: BLEU {result.bleu:.2f}  chrF "
               f"{result.chrf:.2f}  ({result.seconds:.1f} s)")
    typer.echo(f"  {result.bleu_signature}")


@app.command()
@user_errors
def attention(run: RunArgument,
              text: Annotated[str, typer.Argument(help="The input: a sentence (the source, for an "
                                                       "encoder-decoder).")],
              out: Annotated[Path, typer.Option("--out", "-o", help="Directory for the PNG files.")]
              = Path("attention"),
              layer: Annotated[int | None, typer.Option(help="Only this layer (0-based; default: every layer).")]
              = None,
              head: Annotated[int | None, typer.Option(help="Only this head (0-based; default: every head, and "
                                                            "their mean).")] = None,
              target: Annotated[str | None, typer.Option(help="Encoder-decoder: the output to align with "
                                                             "(default: the model's greedy translation).")] = None,
              overwrite: Annotated[bool, typer.Option(help="Replace an existing --out heatmap folder bertkit "
                                                                     "wrote.")] = False,
              ) -> None:
    """Attention heatmaps (PNG, tokens on the axes) per layer and head; for an encoder-decoder also the
    cross-attention alignment between source and output tokens.

    Example: bertkit attention runs/multi30k "A dog runs on the beach." -o attention/
    """
    from bertkit.jobs import attention as job

    written = job.run(job.AttentionJob(run, text, out, layer, head, target, overwrite)).files
    typer.echo(f"wrote {len(written)} image(s) to {out}" + (f", e.g. {written[0].name}" if written else ""))
