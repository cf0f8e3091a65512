"""`bertkit tokenizer train`, `pretrain`, `fill-mask`, `plot`: masked-LM pretraining and looking at it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bertkit.cli.common import (SetOption, TextFieldOption, app, given_once, user_errors,
                                with_max_time)

tokenizer_app = typer.Typer(help="Train BPE tokenizers.", no_args_is_help=True)
app.add_typer(tokenizer_app, name="tokenizer")

CorpusOption = Annotated[list[str] | None, typer.Option(
    "--corpus", help="Corpus file or directory (.txt .gz .jsonl .csv .tsv .parquet); repeat for several.")]
SkipBadOption = Annotated[bool, typer.Option("--skip-bad-lines", help="Skip (and count) lines that are not valid "
                                                                       "UTF-8 instead of stopping.")]


@tokenizer_app.command("train")
@user_errors
def tokenizer_train(corpus: Annotated[list[str], typer.Argument(help="Corpus files or directories.")],
                    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for tokenizer.json.")],
                    vocab_size: Annotated[int, typer.Option(help="Vocabulary size, special tokens included.")]
                    = 16000,
                    byte_level: Annotated[bool, typer.Option(help="Byte-level BPE (nothing is ever [UNK]); "
                                                                  "--no-byte-level: Metaspace BPE.")] = True,
                    lowercase: Annotated[bool, typer.Option(help="Lowercase before tokenising.")] = False,
                    nfkc: Annotated[bool, typer.Option(help="Unicode NFKC normalisation.")] = True,
                    min_frequency: Annotated[int, typer.Option(min=1, help="Minimum count of a merge.")] = 2,
                    max_documents: Annotated[int | None, typer.Option(
                        min=1, help="Train on N of the corpus's documents, spread evenly over it (a streamed "
                                    "corpus: its first N) (tokenizer.max_documents; default: all).")] = None,
                    text_field: TextFieldOption = None, skip_bad_lines: SkipBadOption = False,
                    overwrite: Annotated[bool, typer.Option(help="Replace OUT if it is a tokenizer folder bertkit "
                                                                 "wrote (never a run or anything else).")]
                    = False) -> None:
    """Train a BPE tokenizer ([PAD] [UNK] [CLS] [SEP] [MASK], BERT templates) and save it as tokenizer.json (with
    the tokenizer_config.json transformers' AutoTokenizer reads beside it)."""
    from bertkit.config import TokenizerConfig
    from bertkit.jobs import tokenizer as job

    settings = TokenizerConfig(byte_level=byte_level, lowercase=lowercase, nfkc=nfkc, min_frequency=min_frequency,
                               max_documents=max_documents)
    job.run(job.TokenizerJob(tuple(corpus), vocab_size, out, settings, text_field or "text", skip_bad_lines,
                             overwrite))


@app.command()
@user_errors
def pretrain(recipe: Annotated[str | None, typer.Option(
                 help="Recipe name or .toml file (default: mini for mlm, decoder-mini for clm).")] = None,
             objective: Annotated[str | None, typer.Option(
                 help="train.objective: mlm (masked LM, an encoder: BERT), rtd (replaced-token detection with a "
                      "small generator, an encoder: ELECTRA) or clm (causal LM, a decoder: GPT); default: the "
                      "recipe's.")] = None,
             corpus: CorpusOption = None,
             tokenizer: Annotated[Path | None, typer.Option(help="A tokenizer directory or tokenizer.json to use "
                                                                 "(default: train one on the corpus).")] = None,
             out: Annotated[Path, typer.Option("--out", "-o", help="The run directory to write.")]
             = Path("runs/pretrain"),
             resume: Annotated[bool, typer.Option(help="Continue the run in --out from its latest checkpoint.")]
             = False,
             max_steps: Annotated[int | None, typer.Option(help="train.max_steps")] = None,
             max_time: Annotated[str | None, typer.Option(help="train.max_time: a wall-clock budget such as 30m; "
                                                               "the schedule is fitted to it (where neither "
                                                               "--max-steps nor the recipe gives a step count, it "
                                                               "alone ends the run); none: no clock, "
                                                               "even where the recipe sets one (the run ends at "
                                                               "--max-steps or the recipe's max_steps).")] = None,
             text_field: TextFieldOption = None, skip_bad_lines: SkipBadOption = False,
             streaming: Annotated[bool, typer.Option(
                 "--streaming", help="data.streaming: read the corpus through datasets' streaming API and pack it "
                                     "on the fly (nothing read whole or cached: corpora larger than the disk; "
                                     "--corpus hf:NAME streams a Hub dataset).")] = False,
             progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
             accept_changed_data: Annotated[bool, typer.Option(
                 "--accept-changed-data", help="With --resume: go on although the corpus's content changed since "
                                               "the run began; warned and recorded in inputs.json (default: "
                                               "refused).")] = False,
             set_: SetOption = None) -> None:
    """Pretrain on your corpus: a BERT with masked LM (or ELECTRA's replaced-token detection, --objective rtd), or a
    GPT-style decoder with causal LM (--objective clm).
    Runs on the CPU, one GPU, or many (`accelerate launch -m bertkit pretrain`)."""
    from bertkit.recipes import PRETRAIN_READS, load_recipe, parse_value, set_keys, with_values
    from bertkit.jobs import pretrain as job

    # the default recipe follows the objective, given as --objective or as --set objective=
    sets = set_keys(set_ or [])
    wanted = objective or parse_value("train", "objective", sets.get(("train", "objective"), ("", "mlm"))[1])
    recipe = recipe or ("decoder-mini" if wanted == "clm" else "mini")
    config = load_recipe(recipe, set_ or [], PRETRAIN_READS)
    values = {"train.objective": objective, "data.corpus": tuple(corpus) if corpus else None,
              "train.max_steps": max_steps, "data.text_field": text_field,
              "data.skip_bad_lines": skip_bad_lines or None, "data.streaming": streaming or None}
    given_once(config, {**values, "train.max_time": max_time}, set_)
    training = [f"tokenizer.{key}" for section, key in sets if section == "tokenizer"]
    if tokenizer is not None and training:  # they do nothing (the review found them taken without a word)
        from rich.console import Console

        Console(stderr=True).print(f"[yellow]warning: --set {', '.join(training)} does nothing with --tokenizer "
                                   f"{tokenizer}: a trained tokenizer keeps its own settings")
    config = with_max_time(with_values(config, values), max_time)  # a budget alone ends the run: with_values
    if resume:  # the run's own limits unless this command changes them
        from bertkit.run.directory import keep_run_limits

        config = keep_run_limits(config, out, {"max_steps": max_steps, "max_time": max_time}, set_ or [])
    job.run(job.PretrainJob(config, out, tokenizer=tokenizer, resume=resume, progress=progress,
                            accept_changed_data=accept_changed_data))


@app.command("fill-mask")
@user_errors
def fill_mask(model: Annotated[Path, typer.Argument(help="A run directory with an MLM head.")],
              text: Annotated[str, typer.Argument(help="Text with one or more [MASK] tokens.")],
              top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, help="Candidates per mask (never a special "
                                                                           "token).")] = 5,
              json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
              ) -> None:
    """Fill each [MASK] with the model's top-k guesses."""
    from bertkit.jobs import fill_mask as job
    from bertkit.run.files import to_json

    result = job.run(job.FillMaskJob(model, text, top_k))
    if json_out:
        typer.echo(to_json(result.masks, indent=None))
        return
    for index, options in enumerate(result.masks, start=1):
        typer.echo(f"[MASK] #{index}:")
        for option in options:
            typer.echo(f"  {option.score:.3f}  {option.token!r:16}  {option.sequence}")


@app.command()
@user_errors
def plot(run: Annotated[Path, typer.Argument(help="A run directory with metrics.jsonl.")],
         out: Annotated[Path | None, typer.Option("--out", "-o", help="PNG to write (default RUN/curves.png).")]
         = None) -> None:
    """Plot a run's curves to a PNG: loss and masked-token accuracy (train, validation, unigram baseline) for a
    pretraining (next-token loss and accuracy for a decoder's); loss and the validation metric that picks the best
    checkpoint (accuracy, f1, spearman, ...) for a finetuning."""
    from bertkit.jobs import plot as job

    typer.echo(f"wrote {job.run(job.PlotJob(run, out)).path}")
