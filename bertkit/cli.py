"""The `bertkit` command line: thin parse → config → job.run(); user errors become one line and exit code 2."""

from __future__ import annotations

import functools
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


def user_errors(fn):
    """Report a BertkitError as `error: …` on stderr and exit 2; anything else is a bug and keeps its traceback."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BertkitError as exc:
            typer.echo(f"error: {exc}", err=True)
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


@app.command()
@user_errors
def info(target: Annotated[str, typer.Argument(help="A recipe name (tiny, mini, …), a recipe .toml, or a run "
                                                     "directory.")],
         set_: SetOption = None) -> None:
    """Print a model's architecture and parameter counts (embeddings / blocks / heads)."""
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
                                                             "OUT/classifier; a previous demo there is replaced).")]
         = Path("runs/demo"),
         max_time: Annotated[str | None, typer.Option(help="Budget of each training stage (default: 2m "
                                                           "pretraining, 1m finetuning).")] = None) -> None:
    """The main job on defaults: every recipe builds → BPE tokenizer → MLM pretraining (2 min) → fill-mask →
    sentiment classifier finetuned on a slice of SST-2 (1 min) → predictions for two sentences."""
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
    sentence = summary["sentence"]
    typer.echo(f"wrote {summary['out']}: {summary['parameters']:,} parameters"
               + ("" if summary["tokenizer"] else " (no tokenizer found in the source folder)")
               + (f"; sentence-transformers: {sentence.pooling} pooling"
                  f"{', normalised' if sentence.normalize else ''}, max length {sentence.max_length}"
                  if sentence else ""))
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


tokenizer_app = typer.Typer(help="Train BPE tokenizers.", no_args_is_help=True)
app.add_typer(tokenizer_app, name="tokenizer")

CorpusOption = Annotated[list[str] | None, typer.Option(
    "--corpus", help="Corpus file or directory (.txt .gz .jsonl .csv .tsv .parquet); repeat for several.")]
TextFieldOption = Annotated[str | None, typer.Option(help="JSONL field / CSV, TSV or Parquet column with the text.")]
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
                    text_field: TextFieldOption = None, skip_bad_lines: SkipBadOption = False,
                    overwrite: Annotated[bool, typer.Option(help="Replace OUT if it exists.")] = False) -> None:
    """Train a BPE tokenizer ([PAD] [UNK] [CLS] [SEP] [MASK], BERT templates) and save it as tokenizer.json."""
    from bertkit.config import TokenizerConfig
    from bertkit.jobs import tokenizer as job

    cfg = TokenizerConfig(byte_level=byte_level, lowercase=lowercase, nfkc=nfkc, min_frequency=min_frequency)
    job.run(corpus, vocab_size, out, cfg, text_field or "text", skip_bad_lines, overwrite)


@app.command()
@user_errors
def pretrain(recipe: Annotated[str, typer.Option(help="Recipe name or .toml file.")] = "mini",
             corpus: CorpusOption = None,
             tokenizer: Annotated[Path | None, typer.Option(help="A tokenizer directory or tokenizer.json to use "
                                                                 "(default: train one on the corpus).")] = None,
             out: Annotated[Path, typer.Option("--out", "-o", help="The run directory to write.")]
             = Path("runs/pretrain"),
             resume: Annotated[bool, typer.Option(help="Continue the run in --out from its latest checkpoint.")]
             = False,
             max_steps: Annotated[int | None, typer.Option(help="train.max_steps")] = None,
             max_time: Annotated[str | None, typer.Option(help="train.max_time: a wall-clock budget such as 30m; "
                                                               "the schedule is fitted to it.")] = None,
             text_field: TextFieldOption = None, skip_bad_lines: SkipBadOption = False,
             progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
             set_: SetOption = None) -> None:
    """Masked-LM pretraining of a BERT on your corpus (CPU, one GPU, or `accelerate launch -m bertkit pretrain`)."""
    from bertkit.config import load_recipe, with_values
    from bertkit.jobs import pretrain as job

    config = load_recipe(recipe, set_ or [])
    config = with_values(config, {"data.corpus": tuple(corpus) if corpus else None, "train.max_steps": max_steps,
                                  "train.max_time": max_time, "data.text_field": text_field,
                                  "data.skip_bad_lines": skip_bad_lines or None})
    job.run(config, out, tokenizer_path=tokenizer, resume=resume, progress=progress)


finetune_app = typer.Typer(help="Finetune a pretrained or imported encoder: text classification, NER, or sentence "
                                "embeddings (SBERT).",
                           no_args_is_help=True)
app.add_typer(finetune_app, name="finetune")

ModelOption = Annotated[Path | None, typer.Option("--model", "-m", help="A bertkit run directory: pretrained with "
                                                  "`bertkit pretrain` or imported with `bertkit import-hf`.")]
TrainFileOption = Annotated[str | None, typer.Option("--train", help="Training file (data-root relative is fine).")]
ValidationOption = Annotated[str | None, typer.Option(
    "--validation", help="Validation file for evaluation, early stopping and the best checkpoint (default: hold "
                         "out task.validation_fraction of --train).")]
FinetuneOut = Annotated[Path, typer.Option("--out", "-o", help="The finetuned run directory to write.")]
ResumeOption = Annotated[bool, typer.Option(help="Continue the run in --out from its latest checkpoint.")]
EpochsOption = Annotated[float | None, typer.Option(help="train.epochs: passes over the training set.")]
MaxStepsOption = Annotated[int | None, typer.Option(help="train.max_steps (when --epochs is not set).")]
MaxTimeOption = Annotated[str | None, typer.Option(help="train.max_time: a wall-clock budget such as 10m.")]
InitOption = Annotated[str | None, typer.Option(help="task.init: pretrained (default) or random — the same "
                                                     "architecture and tokenizer from random weights.")]
ProgressOption = Annotated[bool, typer.Option(help="Show a progress bar.")]


def _finetune(kind: str, recipe: str, model: Path | None, out: Path, resume: bool, progress: bool,
              set_: list[str] | None, values: dict) -> None:
    from bertkit.config import load_recipe, with_values
    from bertkit.jobs import finetune as job

    config = with_values(load_recipe(recipe, set_ or []), {"task.kind": kind, **values})
    if values.get("train.max_steps") is not None and values.get("train.epochs") is None:
        # --max-steps given on the command line wins over the recipe's epochs
        config = _clear_epochs(config)
    job.run(config, model, out, resume=resume, progress=progress)


def _clear_epochs(config):
    import dataclasses

    return dataclasses.replace(config, train=dataclasses.replace(config.train, epochs=None))


@finetune_app.command("classify")
@user_errors
def finetune_classify(
        model: ModelOption = None, train: TrainFileOption = None, validation: ValidationOption = None,
        text_column: Annotated[str | None, typer.Option(help="task.text_column (default text).")] = None,
        text_pair_column: Annotated[str | None, typer.Option(help="task.text_pair_column: the second text of "
                                                                  "sentence-pair tasks.")] = None,
        label_column: Annotated[str | None, typer.Option(help="task.label_column (default label).")] = None,
        pooling: Annotated[str | None, typer.Option(help="task.pooling: cls | mean | max.")] = None,
        recipe: Annotated[str, typer.Option(help="Recipe name or .toml with [task] and [train].")]
        = "finetune-classify",
        out: FinetuneOut = Path("runs/classify"), resume: ResumeOption = False, epochs: EpochsOption = None,
        max_steps: MaxStepsOption = None, max_time: MaxTimeOption = None, init: InitOption = None,
        max_train_examples: Annotated[int | None, typer.Option(help="task.max_train_examples: train on the first "
                                                                    "N examples only.")] = None,
        progress: ProgressOption = True, set_: SetOption = None) -> None:
    """Finetune a text (or text-pair) classifier from CSV / TSV / JSONL; labels may be strings or ints.

    Example: bertkit finetune classify --model runs/mini-imdb --train sst2/train.tsv --text-column sentence
    """
    _finetune("classify", recipe, model, out, resume, progress, set_, {
        "task.train_file": train, "task.validation_file": validation, "task.text_column": text_column,
        "task.text_pair_column": text_pair_column, "task.label_column": label_column, "task.pooling": pooling,
        "task.init": init, "task.max_train_examples": max_train_examples, "train.epochs": epochs,
        "train.max_steps": max_steps, "train.max_time": max_time})


@finetune_app.command("ner")
@user_errors
def finetune_ner(
        model: ModelOption = None, train: TrainFileOption = None, validation: ValidationOption = None,
        tag_column: Annotated[int | None, typer.Option(help="task.tag_column: the column holding the tag "
                                                            "(-1: the last).")] = None,
        recipe: Annotated[str, typer.Option(help="Recipe name or .toml with [task] and [train].")] = "finetune-ner",
        out: FinetuneOut = Path("runs/ner"), resume: ResumeOption = False, epochs: EpochsOption = None,
        max_steps: MaxStepsOption = None, max_time: MaxTimeOption = None, init: InitOption = None,
        max_train_examples: Annotated[int | None, typer.Option(help="task.max_train_examples.")] = None,
        progress: ProgressOption = True, set_: SetOption = None) -> None:
    """Finetune a NER tagger on CoNLL column files (IOB1, IOB2 or BIOES; entity-level F1 with seqeval).

    Example: bertkit finetune ner --model runs/mini-imdb --train conll2003/train.txt --validation conll2003/dev.txt
    """
    _finetune("ner", recipe, model, out, resume, progress, set_, {
        "task.train_file": train, "task.validation_file": validation, "task.tag_column": tag_column,
        "task.init": init, "task.max_train_examples": max_train_examples, "train.epochs": epochs,
        "train.max_steps": max_steps, "train.max_time": max_time})


@finetune_app.command("sentence")
@user_errors
def finetune_sentence(
        model: ModelOption = None, train: TrainFileOption = None, validation: ValidationOption = None,
        loss: Annotated[str | None, typer.Option(help="task.loss: cosine (scored pairs: MSE of cos(u, v) against "
                                                      "score / max_score) | mnrl (anchor, positive[, negative] "
                                                      "rows; in-batch negatives) | softmax (labelled pairs).")]
        = None,
        text_column: Annotated[str | None, typer.Option(help="task.text_column: the first sentence (anchor); a "
                                                             "name, or a 0-based position for a file without a "
                                                             "header.")] = None,
        text_pair_column: Annotated[str | None, typer.Option(help="task.text_pair_column: the second sentence "
                                                                  "(positive).")] = None,
        label_column: Annotated[str | None, typer.Option(help="task.label_column: the gold score (cosine) or label "
                                                              "(softmax).")] = None,
        negative_column: Annotated[str | None, typer.Option(help="task.negative_column: a hard negative per row "
                                                                 "(mnrl).")] = None,
        pooling: Annotated[str | None, typer.Option(help="sentence.pooling: mean | cls | max.")] = None,
        recipe: Annotated[str, typer.Option(help="Recipe name or .toml with [task], [sentence] and [train].")]
        = "finetune-sentence",
        out: FinetuneOut = Path("runs/sentence"), resume: ResumeOption = False, epochs: EpochsOption = None,
        max_steps: MaxStepsOption = None, max_time: MaxTimeOption = None, init: InitOption = None,
        max_train_examples: Annotated[int | None, typer.Option(help="task.max_train_examples.")] = None,
        progress: ProgressOption = True, set_: SetOption = None) -> None:
    """Train a SentenceBERT bi-encoder on sentence pairs (cosine, multiple-negatives ranking or softmax loss).

    Example: bertkit finetune sentence --model runs/mini-imdb --recipe finetune-stsb --out runs/sbert
    """
    _finetune("sentence", recipe, model, out, resume, progress, set_, {
        "task.train_file": train, "task.validation_file": validation, "task.loss": loss,
        "task.text_column": text_column, "task.text_pair_column": text_pair_column,
        "task.label_column": label_column, "task.negative_column": negative_column, "sentence.pooling": pooling,
        "task.init": init, "task.max_train_examples": max_train_examples, "train.epochs": epochs,
        "train.max_steps": max_steps, "train.max_time": max_time})


@app.command("evaluate-sts")
@user_errors
def evaluate_sts(model: Annotated[Path, typer.Option("--model", "-m", help="Any encoder run directory.")],
                 data: Annotated[Path, typer.Option("--data", help="Scored pairs: the STS benchmark's sts-*.csv, or "
                                                                  "a file with sentence1 / sentence2 / score "
                                                                  "columns.")],
                 sentence1_column: Annotated[str | None, typer.Option(help="Name or 0-based position.")] = None,
                 sentence2_column: Annotated[str | None, typer.Option(help="Name or 0-based position.")] = None,
                 score_column: Annotated[str | None, typer.Option(help="Name or 0-based position.")] = None,
                 max_score: Annotated[float, typer.Option(help="Top of the gold score scale.")] = 5.0,
                 batch_size: Annotated[int, typer.Option(min=1, help="Sentences per batch.")] = 64,
                 out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the result as JSON.")]
                 = None,
                 overwrite: Annotated[bool, typer.Option(help="Replace an existing --out file.")] = False) -> None:
    """Spearman / Pearson correlation of cosine similarities with gold scores (STS benchmark style)."""
    from bertkit.jobs import sts as job

    job.evaluate_sts(model, data, (sentence1_column, sentence2_column, score_column), max_score, batch_size, out,
                     overwrite)


@app.command()
@user_errors
def embed(model: Annotated[Path, typer.Option("--model", "-m", help="Any encoder run directory.")],
          inputs: Annotated[list[str], typer.Argument(metavar="INPUT...", help="Text files (.txt one per line, "
                                                      ".gz, .jsonl, .csv, .tsv, .parquet) or directories.")],
          out: Annotated[Path, typer.Option("--out", "-o", help="OUT.npy (the matrix) or OUT.parquet (file, line, "
                                                                "[id,] embedding).")],
          text_field: TextFieldOption = None,
          id_field: Annotated[str | None, typer.Option(help="A JSONL field / column with unique ids (written to "
                                                            "Parquet output).")] = None,
          batch_size: Annotated[int, typer.Option(min=1, help="Texts per batch (batches sorted by length).")] = 64,
          chunk_size: Annotated[int, typer.Option(min=1, help="Texts read, embedded and written at a time (memory "
                                                              "stays constant).")] = 8192,
          keep_empty: Annotated[bool, typer.Option(help="Embed empty lines as \"\" instead of skipping them.")]
          = False,
          overwrite: Annotated[bool, typer.Option(help="Replace an existing OUT.")] = False,
          progress: ProgressOption = True) -> None:
    """Embed sentences (one vector per text, the run's pooling and normalisation) into .npy or .parquet."""
    from bertkit.jobs import embed as job

    job.run(model, inputs, out, text_field or "text", id_field, batch_size, chunk_size, keep_empty, overwrite,
            progress)


@app.command()
@user_errors
def similarity(model: Annotated[Path, typer.Argument(help="Any encoder run directory.")],
               a: Annotated[str, typer.Argument(help="First sentence.")],
               b: Annotated[str, typer.Argument(help="Second sentence.")]) -> None:
    """Cosine similarity of two sentences' embeddings."""
    from bertkit.jobs import search as job

    typer.echo(f"{job.similarity(model, a, b):.4f}")


index_app = typer.Typer(help="Build, extend and inspect sentence-embedding indexes for `bertkit search`.",
                        no_args_is_help=True)
app.add_typer(index_app, name="index")


@index_app.command("build")
@user_errors
def index_build(model: Annotated[Path, typer.Option("--model", "-m", help="The encoder run that embeds the corpus "
                                                                          "(and, later, the queries).")],
                corpus: Annotated[list[str], typer.Argument(help="Corpus files or directories, one text per "
                                                                 "line / record.")],
                out: Annotated[Path, typer.Option("--out", "-o", help="The index directory to write.")],
                backend: Annotated[str, typer.Option(help="auto (exact below 100,000 vectors, FAISS IVF from "
                                                          "there) | exact | faiss.")] = "auto",
                text_field: TextFieldOption = None,
                id_field: Annotated[str | None, typer.Option(help="Field / column with unique document ids "
                                                                  "(default: file:line).")] = None,
                nlist: Annotated[int | None, typer.Option(help="FAISS: inverted lists (default ~4 sqrt(N)).")]
                = None,
                nprobe: Annotated[int | None, typer.Option(help="FAISS: lists searched per query (default: "
                                                                "recall@10 ~0.95).")] = None,
                batch_size: Annotated[int, typer.Option(min=1, help="Texts per batch.")] = 64,
                overwrite: Annotated[bool, typer.Option(help="Replace an existing index.")] = False,
                progress: ProgressOption = True) -> None:
    """Embed a corpus into a new index (written atomically)."""
    from bertkit.jobs import search as job

    job.build(model, corpus, out, text_field or "text", id_field, backend, nlist, nprobe, batch_size,
              overwrite=overwrite, progress=progress)


@index_app.command("add")
@user_errors
def index_add(index: Annotated[Path, typer.Argument(help="An index directory.")],
              corpus: Annotated[list[str], typer.Argument(help="Corpus files or directories to append.")],
              model: Annotated[Path | None, typer.Option("--model", "-m", help="The index's model, if it moved "
                                                                               "(must embed identically).")] = None,
              text_field: TextFieldOption = None,
              id_field: Annotated[str | None, typer.Option(help="Field / column with unique ids.")] = None,
              progress: ProgressOption = True) -> None:
    """Append texts to an index (ids must be new; the index is replaced in one rename)."""
    from bertkit.jobs import search as job

    job.add(index, corpus, model, text_field or "text", id_field, progress=progress)


@index_app.command("info")
@user_errors
def index_info(index: Annotated[Path, typer.Argument(help="An index directory.")]) -> None:
    """What an index holds: vectors, dimension, backend, model (every file is checked)."""
    import json

    from bertkit.jobs import search as job

    typer.echo(json.dumps(job.info(index), indent=2))


@app.command()
@user_errors
def search(index: Annotated[Path, typer.Argument(help="An index directory from `bertkit index build`.")],
           queries: Annotated[list[str], typer.Argument(metavar="QUERY...", help="Text(s) to search for.")],
           k: Annotated[int, typer.Option("-k", "--top-k", help="Results per query.")] = 5,
           model: Annotated[Path | None, typer.Option("--model", "-m", help="The index's model, if it moved.")]
           = None,
           exact: Annotated[bool | None, typer.Option("--exact/--approximate", help="Force exact search (or the "
                                                      "FAISS index); default: the index's backend.")] = None,
           nprobe: Annotated[int | None, typer.Option(help="FAISS: lists searched per query.")] = None,
           truncate: Annotated[bool, typer.Option(help="Search with the first max_length tokens of a longer "
                                                       "query instead of refusing it.")] = False,
           json_out: Annotated[bool, typer.Option("--json", help="One JSON line per query.")] = False) -> None:
    """The k most similar documents of an index for each query (cosine similarity)."""
    import json

    from bertkit.jobs import search as job

    results = job.search(index, queries, k, model, exact, nprobe, truncate)
    for query, hits in zip(queries, results):
        if json_out:
            typer.echo(json.dumps({"query": query, "hits": [h.__dict__ for h in hits]}, ensure_ascii=False))
            continue
        typer.echo(f"{query}")
        for rank, hit in enumerate(hits, start=1):
            typer.echo(f"  {rank:2d}. {hit.score:.3f}  [{hit.id}]  {hit.text}")


@app.command()
@user_errors
def predict(model: Annotated[Path, typer.Option("--model", "-m", help="A finetuned run directory.")],
            source: Annotated[Path | None, typer.Argument(
                metavar="INPUT", help="Texts: a .txt file (one per line), .jsonl / .csv / .tsv (the text column), "
                                      "or - / nothing for stdin.")] = None,
            out: Annotated[Path | None, typer.Option("--out", "-o", help="JSONL file to write (default "
                                                                         "stdout).")] = None,
            text_column: Annotated[str | None, typer.Option(help="Column of .jsonl/.csv/.tsv input (default: "
                                                                 "the one used in finetuning).")] = None,
            batch_size: Annotated[int, typer.Option(min=1, help="Inputs per batch (sorted by length).")] = 64,
            overwrite: Annotated[bool, typer.Option(help="Replace an existing --out file.")] = False) -> None:
    """Label texts (classify) or find entities with character offsets (NER); one JSON line per input, in order."""
    from bertkit.jobs import predict as job

    job.run(model, source, out, text_column=text_column, batch_size=batch_size, overwrite=overwrite)


@app.command()
@user_errors
def evaluate(model: Annotated[Path, typer.Option("--model", "-m", help="A finetuned run directory.")],
             data: Annotated[Path, typer.Option("--data", help="Labelled file: like the training data.")],
             text_column: Annotated[str | None, typer.Option(help="Override the finetuning text column.")] = None,
             label_column: Annotated[str | None, typer.Option(help="Override the label column.")] = None,
             tag_column: Annotated[int | None, typer.Option(help="Override the CoNLL tag column.")] = None,
             out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the metrics as JSON.")]
             = None,
             overwrite: Annotated[bool, typer.Option(help="Replace an existing --out file.")] = False) -> None:
    """Metrics on a labelled file: accuracy / macro-F1 / MCC + confusion matrix, or entity P/R/F1 per type."""
    from bertkit.jobs import evaluate as job
    from bertkit.paths import resolve_data_path

    job.run(model, resolve_data_path(data), {"text_column": text_column, "label_column": label_column,
                                             "tag_column": tag_column}, out, overwrite)


@app.command("fill-mask")
@user_errors
def fill_mask(model: Annotated[Path, typer.Argument(help="A run directory with an MLM head.")],
              text: Annotated[str, typer.Argument(help="Text with one or more [MASK] tokens.")],
              top_k: Annotated[int, typer.Option(min=1, help="Candidates per mask.")] = 5,
              json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
              ) -> None:
    """Fill each [MASK] with the model's top-k guesses."""
    import json

    from bertkit.jobs import fill_mask as job

    results = job.run(model, text, top_k)
    if json_out:
        typer.echo(json.dumps(results, ensure_ascii=False))
        return
    for index, options in enumerate(results, start=1):
        typer.echo(f"[MASK] #{index}:")
        for option in options:
            typer.echo(f"  {option['score']:.3f}  {option['token']!r:16}  {option['sequence']}")


@app.command()
@user_errors
def plot(run: Annotated[Path, typer.Argument(help="A run directory with metrics.jsonl.")],
         out: Annotated[Path | None, typer.Option("--out", "-o", help="PNG to write (default RUN/curves.png).")]
         = None) -> None:
    """Plot a run's loss and accuracy curves (train, validation, unigram baseline) to a PNG."""
    from bertkit.jobs import plot as job

    typer.echo(f"wrote {job.run(run, out)}")


def run() -> None:
    """Console-script entry point."""
    app(prog_name="bertkit")


if __name__ == "__main__":
    sys.exit(run())
