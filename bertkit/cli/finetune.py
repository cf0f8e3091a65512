"""`bertkit finetune classify|ner|sentence|seq2seq`, `predict`, `evaluate`: task models from any encoder run, and
encoder-decoder translation models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from bertkit.cli.common import (PrecisionOption, ProgressOption, SetOption, app, given_once,
                                 user_errors, with_max_time)

finetune_app = typer.Typer(help="Finetune a pretrained or imported encoder: text classification, NER, or sentence "
                                "embeddings (SBERT); or train an encoder-decoder on parallel text (seq2seq).",
                           no_args_is_help=True)
app.add_typer(finetune_app, name="finetune")

ModelOption = Annotated[Path | None, typer.Option("--model", "-m", help="A bertkit run directory: pretrained with "
                                                  "`bertkit pretrain` or imported with `bertkit import-hf`.")]
TrainFileOption = Annotated[str | None, typer.Option("--train", help="Training file (data-root relative is fine).")]
ValidationOption = Annotated[str | None, typer.Option(
    "--validation", help="Validation file for evaluation, early stopping and the best checkpoint (default: hold "
                         "out task.validation_split of --train).")]
FinetuneOut = Annotated[Path, typer.Option("--out", "-o", help="The finetuned run directory to write.")]
ResumeOption = Annotated[bool, typer.Option(help="Continue the run in --out from its latest checkpoint.")]
AcceptChangedOption = Annotated[bool, typer.Option(
    "--accept-changed-data", help="With --resume: go on although a training or validation file (or the base model) "
                                  "changed since the run began; the change is warned and recorded in inputs.json "
                                  "(default: refused).")]
SkipBadRowsOption = Annotated[bool, typer.Option(
    "--skip-bad-lines", help="Skip (and count) rows of the training or validation file that have no label (or score), "
                             "an empty text, or more fields than the header (an unquoted comma in a text), instead "
                             "of stopping.")]
EpochsOption = Annotated[float | None, typer.Option(help="train.epochs: passes over the training set.")]
MaxStepsOption = Annotated[int | None, typer.Option(help="train.max_steps: replaces the recipe's epochs (not to "
                                                         "be given with --epochs).")]
MaxTimeOption = Annotated[str | None, typer.Option(help="train.max_time: a wall-clock budget such as 10m (where no "
                                                            "step count or epochs are given, it alone ends the "
                                                            "run); none: no clock, even where the recipe sets one "
                                                            "(the run ends at --max-steps or its epochs).")]
InitOption = Annotated[str | None, typer.Option(help="task.init: pretrained (default) or random — the same "
                                                     "architecture and tokenizer from random weights.")]


def _same_kind(recipe: str, kind: str) -> None:
    """A recipe for another task kind is refused: the command's kind replaced it without a word (`finetune classify
    --recipe finetune-ner` trained a classifier). A classify recipe serves --regression too."""
    from bertkit.errors import BertkitError
    from bertkit.recipes import recipe_tables

    task = recipe_tables(recipe).get("task")
    stated = task.get("kind") if isinstance(task, dict) else None  # a malformed [task]: load_recipe names it
    if stated in (None, kind) or (stated, kind) == ("classify", "regress"):
        return
    command = {"regress": "finetune classify --regression", "classify": "finetune classify"}.get(stated,
                                                                                                 f"finetune {stated}")
    raise BertkitError(f"--recipe {recipe}: a recipe for task.kind = {stated!r}, not {kind!r}; use `bertkit "
                       f"{command}` with it, or another recipe")


def _finetune(kind: str, recipe: str, model: Path | None, out: Path, resume: bool, progress: bool,
              set_: list[str] | None, train: str | None, validation: str | None, init: str | None,
              max_train_examples: int | None, epochs: float | None, max_steps: int | None, max_time: str | None,
              values: dict, accept_changed_data: bool = False, skip_bad_lines: bool = False) -> None:
    """Every finetune command: the options they share, plus each command's own `values` (config keys)."""
    from bertkit.recipes import FINETUNE_READS, load_recipe, with_values

    if kind == "seq2seq":
        from bertkit.jobs.seq2seq import Seq2SeqJob as Job, run
    else:
        from bertkit.jobs.finetune import FinetuneJob as Job, run

    values = {"task.kind": kind, "task.train_file": train, "task.validation_file": validation, "task.init": init,
              "task.max_train_examples": max_train_examples, "train.epochs": epochs, "train.max_steps": max_steps,
              **values}
    _same_kind(recipe, kind)  # first: another kind's recipe has tables this command does not read, named less clearly
    recipe_config = load_recipe(recipe, set_ or [], FINETUNE_READS[kind])
    given_once(recipe_config, {**values, "train.max_time": max_time}, set_)
    # --max-steps (or --set max_steps) wins over the recipe's epochs, as a step count given in the command should;
    # beside epochs given in the same command it would win, or lose, without a word: that is refused
    steps, epochs_said = _said("max_steps", "--max-steps", values, set_), _said("epochs", "--epochs", values, set_)
    if steps is not None and epochs_said is not None:
        from bertkit.errors import BertkitError

        raise BertkitError(f"{steps} and {epochs_said} both set the run's length; give one (epochs set the "
                           "steps, a step count replaces the recipe's epochs)")
    # a step count replaces the recipe's epochs there: --max-steps in with_values, --set max_steps in load_recipe
    config = with_max_time(with_values(recipe_config, values), max_time)  # a budget alone ends the run, too
    if resume:  # the run's own limits unless this command changes them
        from bertkit.run.directory import keep_run_limits

        config = keep_run_limits(config, out, {"max_steps": max_steps, "max_time": max_time, "epochs": epochs},
                                 set_ or [])
    run(Job(config, model, out, resume=resume, progress=progress, accept_changed_data=accept_changed_data,
            skip_bad_lines=skip_bad_lines))


def _said(name: str, flag: str, values: dict, set_: list[str] | None) -> str | None:
    """How this command gave train.NAME: `flag`, or "--set key=value"; None where it did not (`none` gives
    nothing)."""
    from bertkit.config import means_none
    from bertkit.recipes import set_keys

    if values.get(f"train.{name}") is not None:
        return flag
    given = set_keys(set_ or []).get(("train", name))
    return None if given is None or means_none(given[1]) else f"--set {given[0]}={given[1]}"


@finetune_app.command("classify")
@user_errors
def finetune_classify(
        model: ModelOption = None, train: TrainFileOption = None, validation: ValidationOption = None,
        text_column: Annotated[str | None, typer.Option(help="task.text_column (default text).")] = None,
        text_pair_column: Annotated[str | None, typer.Option(help="task.text_pair_column: the second text of "
                                                                  "sentence-pair tasks.")] = None,
        label_column: Annotated[str | None, typer.Option(help="task.label_column (default label).")] = None,
        pooling: Annotated[str | None, typer.Option(help="heads.classifier_pooling: cls | mean | max.")] = None,
        recipe: Annotated[str, typer.Option(help="Recipe name or .toml with \\[task], \\[heads] and "
                                                 "\\[train].")] = "finetune-classify",
        out: FinetuneOut = Path("runs/classify"), resume: ResumeOption = False,
        accept_changed_data: AcceptChangedOption = False, epochs: EpochsOption = None,
        max_steps: MaxStepsOption = None, max_time: MaxTimeOption = None, init: InitOption = None,
        max_train_examples: Annotated[int | None, typer.Option(help="task.max_train_examples: the first N examples "
                                                                    "of the file only (without --validation, the "
                                                                    "held-out share comes out of them).")] = None,
        regression: Annotated[bool, typer.Option(help="task.kind = regress: the label column holds a number (e.g. "
                                                      "STS-B's 0-5 similarity); one output trained by mean squared "
                                                      "error, validation Spearman / Pearson.")] = False,
        skip_bad_lines: SkipBadRowsOption = False, progress: ProgressOption = True, set_: SetOption = None) -> None:
    """Finetune a text (or text-pair) classifier from CSV / TSV / JSONL; labels may be names or integers (1, "1",
    1.0 and true are one class, "1"). With --regression, a score per text (or pair) instead of a label.

    Example: bertkit finetune classify --model runs/mini-imdb --train sst2/train.tsv --text-column sentence
    """
    _finetune("regress" if regression else "classify", recipe, model, out, resume, progress, set_, train, validation,
              init, max_train_examples, epochs, max_steps, max_time,
              {"task.text_column": text_column, "task.text_pair_column": text_pair_column,
               "task.label_column": label_column, "heads.classifier_pooling": pooling},
              accept_changed_data, skip_bad_lines)


@finetune_app.command("ner")
@user_errors
def finetune_ner(
        model: ModelOption = None, train: TrainFileOption = None, validation: ValidationOption = None,
        tag_column: Annotated[int | None, typer.Option(help="task.tag_column: the column holding the tag "
                                                            "(-1: the last).")] = None,
        recipe: Annotated[str, typer.Option(help="Recipe name or .toml with \\[task] and \\[train].")] = "finetune-ner",
        out: FinetuneOut = Path("runs/ner"), resume: ResumeOption = False,
        accept_changed_data: AcceptChangedOption = False, epochs: EpochsOption = None,
        max_steps: MaxStepsOption = None, max_time: MaxTimeOption = None, init: InitOption = None,
        max_train_examples: Annotated[int | None, typer.Option(help="task.max_train_examples.")] = None,
        progress: ProgressOption = True, set_: SetOption = None) -> None:
    """Finetune a NER tagger on CoNLL column files (IOB1, IOB2 or BIOES; entity-level F1 with seqeval).

    Example: bertkit finetune ner --model runs/mini-imdb --train conll2003/train.txt --validation conll2003/dev.txt
    """
    _finetune("ner", recipe, model, out, resume, progress, set_, train, validation, init, max_train_examples,
              epochs, max_steps, max_time, {"task.tag_column": tag_column}, accept_changed_data)


@finetune_app.command("sentence")
@user_errors
def finetune_sentence(
        model: ModelOption = None, train: TrainFileOption = None, validation: ValidationOption = None,
        loss: Annotated[str | None, typer.Option(help="sentence_loss.loss: cosine (scored pairs: MSE of cos(u, v) "
                                                      "against score / max_score) | mnrl (anchor, positive[, negative] "
                                                      "rows; in-batch negatives) | softmax (labelled pairs).")]
        = None,
        text_column: Annotated[str | None, typer.Option(help="task.text_column: the first sentence (anchor); a "
                                                             "name, or a 0-based position for a file without a "
                                                             "header.")] = None,
        text_pair_column: Annotated[str | None, typer.Option(help="task.text_pair_column: the second sentence "
                                                                  "(positive).")] = None,
        label_column: Annotated[str | None, typer.Option(help="task.label_column: the gold score (cosine) or label "
                                                              "(softmax).")] = None,
        negative_column: Annotated[str | None, typer.Option(help="sentence_loss.negative_column: a hard negative "
                                                                 "per row (mnrl).")] = None,
        max_score: Annotated[float | None, typer.Option(help="sentence_loss.max_score: the top of the gold score "
                                                             "scale, the cosine loss's targets being score / it "
                                                             "(default 5, STS-B's; 1 for a 0..1 file).")] = None,
        pooling: Annotated[str | None, typer.Option(help="sentence.pooling: mean | cls | max.")] = None,
        recipe: Annotated[str, typer.Option(help="Recipe name or .toml with \\[task], \\[sentence_loss], "
                                                 "\\[sentence] and \\[train].")]
        = "finetune-sentence",
        out: FinetuneOut = Path("runs/sentence"), resume: ResumeOption = False,
        accept_changed_data: AcceptChangedOption = False, epochs: EpochsOption = None,
        max_steps: MaxStepsOption = None, max_time: MaxTimeOption = None, init: InitOption = None,
        max_train_examples: Annotated[int | None, typer.Option(help="task.max_train_examples.")] = None,
        skip_bad_lines: SkipBadRowsOption = False, progress: ProgressOption = True, set_: SetOption = None) -> None:
    """Train a SentenceBERT bi-encoder on sentence pairs (cosine, multiple-negatives ranking or softmax loss).

    Example: bertkit finetune sentence --model runs/mini-imdb --recipe finetune-stsb --out runs/sbert
    """
    _finetune("sentence", recipe, model, out, resume, progress, set_, train, validation, init, max_train_examples,
              epochs, max_steps, max_time, {
                  "sentence_loss.loss": loss, "task.text_column": text_column,
                  "task.text_pair_column": text_pair_column, "task.label_column": label_column,
                  "sentence_loss.negative_column": negative_column, "sentence_loss.max_score": max_score,
                  "sentence.pooling": pooling}, accept_changed_data, skip_bad_lines)


@finetune_app.command("seq2seq")
@user_errors
def finetune_seq2seq(
        train_source: Annotated[str | None, typer.Option(help="seq2seq.train_source: source sentences, one per line.")]
        = None,
        train_target: Annotated[str | None, typer.Option(help="seq2seq.train_target: their translations, line by "
                                                              "line.")] = None,
        validation_source: Annotated[str | None, typer.Option(help="seq2seq.validation_source (default: hold "
                                                                   "out task.validation_split of the pairs).")]
        = None,
        validation_target: Annotated[str | None, typer.Option(help="seq2seq.validation_target.")] = None,
        model: Annotated[Path | None, typer.Option("--model", "-m", help="Continue from an encoder-decoder run "
                                                   "(its weights and vocabulary); default: a new model from "
                                                   "--recipe.")] = None,
        recipe: Annotated[str, typer.Option(help="Recipe name or .toml: \\[model] for a new model, \\[task], "
                                                 "\\[seq2seq], \\[train].")] = "seq2seq",
        label_smoothing: Annotated[float | None, typer.Option(help="seq2seq.label_smoothing (default 0.1).")] = None,
        joint_vocab: Annotated[bool | None, typer.Option(help="seq2seq.joint_vocab: one BPE for both sides (default) "
                                                              "or one per side (needs model.share_embeddings = "
                                                              "false).")] = None,
        out: FinetuneOut = Path("runs/seq2seq"), resume: ResumeOption = False,
        accept_changed_data: AcceptChangedOption = False, epochs: EpochsOption = None,
        max_steps: MaxStepsOption = None, max_time: MaxTimeOption = None,
        max_train_examples: Annotated[int | None, typer.Option(help="task.max_train_examples: the first N "
                                                                    "pairs.")] = None,
        progress: ProgressOption = True, set_: SetOption = None) -> None:
    """Train an encoder-decoder (the original Transformer) on parallel text: teacher forcing, label smoothing, a
    joint BPE vocabulary; validation BLEU picks the best checkpoint.

    Example: bertkit finetune seq2seq --recipe translate-multi30k --out runs/multi30k
    """
    _finetune("seq2seq", recipe, model, out, resume, progress, set_, None, None, None, max_train_examples,
              epochs, max_steps, max_time, {
                  "seq2seq.train_source": train_source, "seq2seq.train_target": train_target,
                  "seq2seq.validation_source": validation_source, "seq2seq.validation_target": validation_target,
                  "seq2seq.label_smoothing": label_smoothing, "seq2seq.joint_vocab": joint_vocab},
              accept_changed_data)


@app.command()
@user_errors
def predict(model: Annotated[Path, typer.Option(
        "--model", "-m", help="A finetuned run directory (or its ONNX export folder).")],
            source: Annotated[Path | None, typer.Argument(
                metavar="INPUT", help="Texts: a .txt file (one per line; blank lines are skipped, with a "
                                      "warning), .jsonl / .csv / .tsv (the text column; cells stripped as in "
                                      "finetuning), or - / nothing for stdin.")] = None,
            out: Annotated[Path | None, typer.Option("--out", "-o", help="JSONL file to write (default "
                                                                         "stdout).")] = None,
            text_column: Annotated[str | None, typer.Option(help="Column of .jsonl/.csv/.tsv input (default: "
                                                                 "the one used in finetuning).")] = None,
            text_pair_column: Annotated[str | None, typer.Option(
                help="A pair model's second text column (default: the one used in finetuning; a 0-based position "
                     "with --text-column's means no header row).")] = None,
            input_format: Annotated[Literal["auto", "text", "jsonl", "csv", "tsv"], typer.Option(
                help="How INPUT is read: auto (by its suffix: .jsonl / .json, .csv, .tsv are rows with columns, "
                     "anything else lines of text; stdin: lines of text), or rows on stdin (jsonl, csv, tsv: "
                     "`head -5 dev.jsonl | bertkit predict --input-format jsonl`).")] = "auto",
            keep_column: Annotated[list[str] | None, typer.Option(
                help="A column of .jsonl/.csv/.tsv input copied into each output record as written (an id, "
                     "say; not one of the record's own fields: text, pair, label, score, scores, entities); "
                     "repeatable.")] = None,
            batch_size: Annotated[int, typer.Option(min=1, help="Inputs per batch (sorted by length).")] = 64,
            precision: PrecisionOption = "auto",
            overwrite: Annotated[bool, typer.Option(help="Replace an existing --out predictions file "
                                                                      "bertkit wrote.")] = False) -> None:
    """Label texts (classify) or find entities with character offsets (NER); one JSON line per input, in order."""
    from bertkit.jobs import predict as job

    job.run(job.PredictJob(model, source, out, text_column=text_column, text_pair_column=text_pair_column,
                           batch_size=batch_size, overwrite=overwrite, precision=precision,
                           input_format=input_format, keep_columns=tuple(keep_column or ())))


@app.command()
@user_errors
def evaluate(model: Annotated[Path, typer.Option(
        "--model", "-m", help="A finetuned run directory (or its ONNX export folder).")],
             data: Annotated[Path, typer.Option("--data", help="Labelled file: like the training data.")],
             text_column: Annotated[str | None, typer.Option(help="Override the finetuning text column.")] = None,
             label_column: Annotated[str | None, typer.Option(help="Override the label column.")] = None,
             tag_column: Annotated[int | None, typer.Option(help="Override the CoNLL tag column.")] = None,
             text_pair_column: Annotated[str | None, typer.Option(
                 help="Override the pair's second-text column (an imported transformers pair model, e.g. MRPC, "
                      "needs it).")] = None,
             out: Annotated[Path | None, typer.Option("--out", "-o", help="Also write the metrics as JSON.")]
             = None,
             predictions: Annotated[Path | None, typer.Option(
                 help="Also write each example's gold and predicted answer as JSON lines, in file order (a "
                      "tagger's: the tokens, gold and predicted tags and entities), for error analysis.")] = None,
             batch_size: Annotated[int, typer.Option(min=1, help="Examples per batch (batches sorted by length).")]
             = 64,
             precision: PrecisionOption = "auto",
             overwrite: Annotated[bool, typer.Option(help="Replace an existing --out evaluation report (or "
                                                          "--predictions file) bertkit wrote.")] = False,
             skip_bad_lines: Annotated[bool, typer.Option(
                 "--skip-bad-lines", help="Skip (and count) rows that have no label (or score), an empty text, or "
                                          "more fields than the header, instead of stopping.")] = False) -> None:
    """Metrics on a labelled file: accuracy / macro-F1 / MCC + confusion matrix, or entity P/R/F1 per type."""
    from bertkit.jobs import evaluate as job

    job.run(job.EvaluateJob(model, data, text_column, label_column, tag_column, out, overwrite,
                            precision=precision, skip_bad_lines=skip_bad_lines, text_pair_column=text_pair_column,
                            batch_size=batch_size, predictions=predictions))
