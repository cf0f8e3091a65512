"""The `bertkit` command line: thin parse → config → job.run(); user errors become one line and exit code 2.

`common.py` holds the app and the shared options; this module the general commands; the job families register
their commands from `pretrain.py` (tokenizer, pretrain, fill-mask, plot), `finetune.py` (finetune, predict, evaluate),
`sentence.py` (evaluate-sts, embed, similarity, index, search) and `generate.py` (generate, perplexity, translate,
evaluate-seq2seq, attention).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from bertkit.cli.common import SetOption, app, user_errors
from bertkit.errors import BertkitError


@app.command()
@user_errors
def info(target: Annotated[str, typer.Argument(help="A recipe name (tiny, mini, …), a recipe .toml, or a run "
                                                     "directory.")],
         set_: SetOption = None) -> None:
    """Print a model's architecture, parameter counts (embeddings / blocks / heads) and training FLOPs per token
    (a finetuned run's: its task's, the encoder with its head or loss); for a run directory also its measured
    tokens/s, TFLOP/s and MFU."""
    from bertkit.jobs import info as job

    job.run(job.InfoJob(target, tuple(set_ or ())))


@app.command()
@user_errors
def recipes() -> None:
    """List the bundled recipes, each with the first sentence of its description (the recipe file has the rest)."""
    from bertkit.recipes import describe_recipe, list_recipes

    for name, path in list_recipes().items():
        typer.echo(f"{name:24s} {describe_recipe(name, path)}")


@app.command()
@user_errors
def demo(out: Annotated[Path, typer.Option("--out", "-o", help="Where the demo's runs go (OUT/pretrain, "
                                                             "OUT/classifier, OUT/sentence, OUT/index; a previous "
                                                             "demo there is replaced).")]
         = Path("runs/demo"),
         max_time: Annotated[str | None, typer.Option(help="Budget of each training stage (default: 2m "
                                                           "pretraining, 1m finetuning, 1m SBERT).")] = None) -> None:
    """The main job on defaults: tokenizer → pretrain → finetune → embed and search, in about five minutes.

    Every recipe builds → BPE tokenizer → MLM pretraining (2 min) → fill-mask → sentiment classifier finetuned on a
    slice of SST-2 (1 min) → predictions for two sentences → SBERT training on STS-B (1 min) → an index over 3,000
    sentences → two searches."""
    from bertkit.jobs import demo as job

    job.run(job.DemoJob(out, max_time=max_time))


@app.command("import-hf")
@user_errors
def import_hf(src: Annotated[Path, typer.Argument(help="A Hugging Face BERT folder (config.json + "
                                                       "model.safetensors or pytorch_model.bin).")],
              out: Annotated[Path, typer.Argument(help="The bertkit run directory to create.")],
              overwrite: Annotated[bool, typer.Option(help="Replace OUT if it is a run import-hf wrote (never a "
                                                                    "trained run), atomically.")] = False,
              ) -> None:
    """Make a bertkit run directory from a Hugging Face BERT checkpoint (e.g. all-MiniLM-L6-v2): an encoder, a
    sentence-transformers folder, or a finetuned BertForSequenceClassification / BertForTokenClassification (a
    classifier, regressor or NER tagger that predict and evaluate take, its labels from id2label)."""
    from bertkit import interop

    summary = interop.import_hf(src, out, overwrite=overwrite)
    st = summary["sentence"]
    typer.echo(f"wrote {summary['out']}: {summary['parameters']:,} parameters"
               + ("" if summary["tokenizer"] else " (no tokenizer found in the source folder)")
               + (f"; sentence-transformers: {st.pooling} pooling{', normalised' if st.normalize else ''}, "
                  f"max length {st.max_seq_length}" if st else "")
               + (f"; {_task_shown(summary)}: predict, evaluate and export take it" if summary["task"] else ""))
    if summary["head_left_out"]:
        typer.echo(f"left its task head out ({summary['head_left_out']}): the encoder is imported; finetune it "
                   "with `bertkit finetune classify|ner`", err=True)
    if summary["skipped"]:
        typer.echo(f"skipped {len(summary['skipped'])} tensors bertkit does not map yet "
                   f"(e.g. {summary['skipped'][0]})", err=True)


def _task_shown(summary: dict) -> str:
    """An imported task model in a few words: its kind and labels (the first five, and how many in all)."""
    length = f", inputs cut at {summary['max_length']} tokens" if summary["max_length"] else ""
    if summary["task"] == "regress":
        logit = "" if summary["problem_type"] == "regression" else \
            ": the classifier's raw logit, to which transformers' pipeline applies a sigmoid"
        return f"a finetuned regressor (one score{logit}{length})"
    labels = summary["labels"]
    listed = ", ".join(labels[:5]) + (f", … {len(labels)} in all" if len(labels) > 5 else "")
    return f"a finetuned {'NER tagger' if summary['task'] == 'ner' else 'classifier'} ({listed}{length})"


@app.command()
@user_errors
def export(run: Annotated[Path, typer.Argument(help="A bertkit run directory.")],
           out: Annotated[Path, typer.Option("--out", "-o", help="The folder to write.")],
           format: Annotated[Literal["hf", "sentence-transformers", "onnx"], typer.Option(
               "--format", help="hf: a folder transformers loads unchanged (BertModel; AutoModelForMaskedLM with an "
                                "MLM head; a finetuned run's BertForSequenceClassification or "
                                "BertForTokenClassification, its labels as id2label); "
                                "sentence-transformers: a folder SentenceTransformer(path) loads, embedding like "
                                "bertkit; onnx: one graph with everything the run does (an encoder's pooling and "
                                "normalisation, a task model's logits) that every inference command takes as "
                                "--model.")] = "hf",
           quantize: Annotated[Optional[Literal["int8"]], typer.Option(
               help="With --format onnx: onnxruntime's dynamic int8 on the matrix products (about 4x smaller; "
                    "refused unless it keeps the run's outputs: a mean cosine of 0.99 and 0.95 on every probe text, "
                    "90% of a classifier's or tagger's decisions, a regressor's scores within 0.25 of their "
                    "spread).")] = None,
           overwrite: Annotated[bool, typer.Option(help="Replace OUT if it is an export of the same format "
                                                        "(never anything else), atomically.")] = False) -> None:
    """Export a run directory for another library, or as an ONNX graph for onnxruntime."""
    if quantize is not None and format != "onnx":
        raise BertkitError(f"--quantize {quantize} needs --format onnx (the {format} export keeps the run's weights)")
    if format == "onnx":
        from bertkit.deploy.export import export_onnx

        summary = export_onnx(run, out, quantize=quantize, overwrite=overwrite, say=typer.echo)
        typer.echo(f"wrote {summary['out']} (onnx, {summary['kind']}, {summary['precision']}, "
                   f"{summary['bytes'] / 1e6:.1f} MB) in {summary['seconds']:.0f} s")
        return
    from bertkit.interop import hf
    from bertkit.interop.sentence_transformers import export_sentence_transformers

    exporter = export_sentence_transformers if format == "sentence-transformers" else hf.export_hf
    summary = exporter(run, out, overwrite=overwrite)
    typer.echo(f"wrote {summary['out']} ({format}, {summary['tensors']} tensors)")


# The job families add their commands to `app` (imported here so `bertkit.cli:app` has them all).
from bertkit.cli import analyze, finetune, generate, pretrain, sentence  # noqa: E402, F401


# Below this many columns (80 is a terminal's default, and what a pipe gets) rich's help table cut option names and
# long words short ("--accept-changed-da…", "task.validation_spl…"): click's plain help, which wraps them, is used.
RICH_HELP_COLUMNS = 100


def command(columns: int | None = None):
    """`app` as the click command the entry point runs: rich help where the terminal (`columns`, None: its own width)
    has RICH_HELP_COLUMNS or more, else click's plain help throughout, without the rich markup escapes (`\\[task]`)."""
    built = typer.main.get_command(app)
    _short_helps(built)
    if (columns or shutil.get_terminal_size().columns) < RICH_HELP_COLUMNS:
        _plain_help(built)
    return built


def _short_helps(node) -> None:
    """Each command listed by its whole first paragraph as one paragraph: rich kept the docstring's line breaks
    (a listing broke mid-sentence at 120 columns), click cut it at 45 characters."""
    for sub in getattr(node, "commands", {}).values():
        if sub.short_help is None and sub.help:
            sub.short_help = " ".join(sub.help.split("\n\n")[0].split())
        _short_helps(sub)


def _plain_help(node) -> None:
    """A click command (and its subcommands) set to click's plain help formatting: lines broken between words only
    (click broke `--max-new-tokens` and `finetune-stsb` at their hyphens, so an example did not copy), each command
    listed with its whole first paragraph (`_short_helps`), without rich's markup escapes."""
    _whole_words()
    node.rich_markup_mode = None
    node.help = node.help and _unescaped(node.help)
    for param in node.params:
        if getattr(param, "help", None):
            param.help = _unescaped(param.help)
    for sub in getattr(node, "commands", {}).values():
        sub.short_help = sub.short_help and _unescaped(sub.short_help)
        _plain_help(sub)


def _unescaped(text: str) -> str:
    """Help text without rich's markup escapes (`\\[task]` is rich's way of writing "[task]")."""
    return text.replace("\\[", "[")


def _whole_words() -> None:
    """click's text wrapper, made to break lines between words only (its default breaks at hyphens too). The
    wrapper is Typer's vendored click's from Typer 0.2x; another one is left as it is."""
    try:
        from typer._click import _textwrap
    except ImportError:
        return
    if getattr(_textwrap.TextWrapper, "bertkit_whole_words", False):
        return

    class WholeWords(_textwrap.TextWrapper):
        bertkit_whole_words = True

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "break_on_hyphens": False})

    _textwrap.TextWrapper = WholeWords


def run() -> None:
    """Console-script entry point. A usage error (an unknown option, a value of the wrong type, a missing argument)
    is one `error:` line naming the command's --help and its exit code (2), like every other user error, where
    Typer drew a usage block and a box."""
    try:
        code = command()(prog_name="bertkit", standalone_mode=False)
    except typer.Abort as exc:
        typer.echo("Aborted.", err=True)
        sys.exit(130 if isinstance(exc.__cause__, KeyboardInterrupt) else 1)  # Ctrl-C: the shell's 128 + SIGINT
    except Exception as exc:
        # click's own errors, by what they have: Typer vendors click (typer._click) from 0.2x, older ones use click
        if not (hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)):
            raise  # a bug: its traceback
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group in plain help: its help, on stdout as rich's
            typer.echo(exc.format_message())
            sys.exit(exc.exit_code)
        ctx, message = getattr(exc, "ctx", None), " ".join(exc.format_message().split())
        if message:  # none where a bare group printed its help (no_args_is_help)
            where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            typer.echo(f"error: {message}{where}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)  # typer.Exit(n) comes back as n without standalone mode


if __name__ == "__main__":
    sys.exit(run())
