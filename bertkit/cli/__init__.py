"""The `bertkit` command line: thin parse → config → job.run(); user errors become one line and exit code 2.

This module holds the app, the shared options and the general commands; the job families register their
commands from `pretrain.py` (tokenizer, pretrain, fill-mask, plot), `finetune.py` (finetune, predict, evaluate),
`sentence.py` (evaluate-sts, embed, similarity, index, search) and `generate.py` (generate, perplexity, translate,
evaluate-seq2seq, attention).
"""

from __future__ import annotations

import functools
import signal
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

import bertkit
from bertkit.errors import BertkitError

app = typer.Typer(
    name="bertkit",
    help="BERT-style pretrain-and-finetune toolkit: a from-scratch transformer, recipes, and Hugging Face interop.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

SetOption = Annotated[list[str] | None, typer.Option(
    "--set", metavar="KEY=VALUE", help="Override a recipe value, e.g. --set d_model=64 --set model.positions=rotary.")]
TextFieldOption = Annotated[str | None, typer.Option(help="JSONL field / CSV, TSV or Parquet column with the text.")]
ProgressOption = Annotated[bool, typer.Option(help="Show a progress bar.")]
PrecisionOption = Annotated[Literal["auto", "fp32", "bf16"], typer.Option(
    help="Inference precision. auto: bf16 where the device computes it natively (a GPU with bf16; a CPU with "
         "AVX512-BF16 or AMX whose bf16 matrix products measure faster), else fp32.")]


def user_errors(fn):
    """Report a BertkitError (or a full disk) as `error: …` on stderr and exit 2; anything else is a bug and keeps
    its traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from bertkit.run.files import is_disk_full

        try:
            return fn(*args, **kwargs)
        except BertkitError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        except Exception as exc:  # a full disk met outside a disk_errors block
            if not is_disk_full(exc):
                raise
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            typer.echo(f"error: {where}no space left on the device; nothing was committed, free some space and run "
                       "again", err=True)
            raise typer.Exit(2) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        typer.echo(f"bertkit {bertkit.__version__}")
        raise typer.Exit()


@app.callback()
def main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                               help="Print the version and exit.")] = False) -> None:
    """BERT-style pretrain-and-finetune toolkit."""
    if hasattr(signal, "SIGXFSZ"):  # over a file-size limit, writes fail with EFBIG (one error line), not a kill
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


@app.command()
@user_errors
def info(target: Annotated[str, typer.Argument(help="A recipe name (tiny, mini, …), a recipe .toml, or a run "
                                                     "directory.")],
         set_: SetOption = None) -> None:
    """Print a model's architecture, parameter counts (embeddings / blocks / heads) and training FLOPs per token;
    for a run directory also its measured tokens/s, TFLOP/s and MFU."""
    from bertkit.jobs import info as job

    job.run(target, set_ or [])


@app.command()
@user_errors
def recipes() -> None:
    """List the bundled recipes with their one-line descriptions."""
    from bertkit.config import list_recipes

    for name, path in list_recipes().items():
        first = path.read_text(encoding="utf-8").splitlines()[0].lstrip("# ") if path.stat().st_size else ""
        first = first.removeprefix(f"{name}:").strip()
        typer.echo(f"{name:24s} {first}")


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

    job.run(out, max_time=max_time)


@app.command("import-hf")
@user_errors
def import_hf(src: Annotated[Path, typer.Argument(help="A Hugging Face BERT folder (config.json + "
                                                       "model.safetensors or pytorch_model.bin).")],
              out: Annotated[Path, typer.Argument(help="The bertkit run directory to create.")],
              overwrite: Annotated[bool, typer.Option(help="Replace OUT if it exists (atomically).")] = False,
              ) -> None:
    """Make a bertkit run directory from a Hugging Face BERT checkpoint (e.g. all-MiniLM-L6-v2)."""
    from bertkit.interop import hf

    summary = hf.import_hf(src, out, overwrite=overwrite)
    st = summary["sentence"]
    typer.echo(f"wrote {summary['out']}: {summary['parameters']:,} parameters"
               + ("" if summary["tokenizer"] else " (no tokenizer found in the source folder)")
               + (f"; sentence-transformers: {st.pooling} pooling{', normalised' if st.normalize else ''}, "
                  f"max length {st.max_length}" if st else ""))
    if summary["skipped"]:
        typer.echo(f"skipped {len(summary['skipped'])} tensors bertkit does not map yet "
                   f"(e.g. {summary['skipped'][0]})", err=True)


@app.command()
@user_errors
def export(run: Annotated[Path, typer.Argument(help="A bertkit run directory.")],
           out: Annotated[Path, typer.Option("--out", "-o", help="The folder to write.")],
           format: Annotated[Literal["hf", "sentence-transformers"], typer.Option(
               "--format", help="hf: a folder transformers.BertModel (or AutoModelForMaskedLM) loads unchanged; "
                                "sentence-transformers: a folder SentenceTransformer(path) loads, embedding like "
                                "bertkit.")] = "hf",
           overwrite: Annotated[bool, typer.Option(help="Replace OUT if it exists (atomically).")] = False) -> None:
    """Export a run directory for another library."""
    from bertkit.interop import hf
    from bertkit.interop.sentence_transformers import export_sentence_transformers

    exporter = export_sentence_transformers if format == "sentence-transformers" else hf.export_hf
    summary = exporter(run, out, overwrite=overwrite)
    typer.echo(f"wrote {summary['out']} ({format}, {summary['tensors']} tensors)")


# The job families add their commands to `app` (imported here so `bertkit.cli:app` has them all).
from bertkit.cli import analyze, finetune, generate, pretrain, sentence  # noqa: F401


def run() -> None:
    """Console-script entry point."""
    app(prog_name="bertkit")


if __name__ == "__main__":
    sys.exit(run())
