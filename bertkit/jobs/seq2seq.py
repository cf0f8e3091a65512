"""`bertkit finetune seq2seq`: an encoder-decoder trained on parallel text (translation), by the one loop.

Two starts, one code path: `--recipe` builds a new encoder-decoder from its [model] table and trains its BPE
vocabulary on the training pairs (one joint vocabulary for both sides by default, `seq2seq.joint_vocab = false` for one
per side); `--model RUN` continues from an encoder-decoder run's weights and tokenizers. The output is a run
directory like every other (model + `lm` head, tokenizer.json, target/tokenizer.json for a separate target
vocabulary) plus results.json; model.safetensors holds the best checkpoint by validation BLEU (or loss).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from accelerate.utils import set_seed
from rich.console import Console

from bertkit.config import Config, HeadsConfig
from bertkit.errors import BertkitError
from bertkit.nn.model import Model
from bertkit.run.directory import (RESULTS_FILE, RESUMABLE_TRAIN_KEYS, is_finished, load_config,
                                   load_run, write_config, write_json)
from bertkit.run.resume import check_run_output
from bertkit.paths import resolve_data_path
from bertkit.recipes import FINETUNE_READS, check_reads
from bertkit.run import inputs
from bertkit.run.checkpoints import latest_checkpoint
from bertkit.run.files import atomic_dir
from bertkit.run.lock import locked
from bertkit.run.outputs import refuse_nested
from bertkit.tasks.seq2seq import Seq2SeqObjective
from bertkit.text.tasks import hold_out, read_parallel
from bertkit.text.tokenizer import check_vocab_matches, train_bpe
from bertkit.train.defaults import DEFAULT_LEARNING_RATE, with_learning_rate
from bertkit.train.elastic import with_processes
from bertkit.train.accelerator import make_accelerator, run_precision, with_sharding
from bertkit.train.loop import already_finished, plan_text, train_best
from bertkit.train.batch_size import require_number
from bertkit.train.memory import check_fits
from bertkit.train.results import FinetuneJob, FinetuneResult
from bertkit.translation import PairTokenizers, Translator


def _tokenizers(config: Config, pairs: list[tuple[str, str]], console: Console) -> PairTokenizers:
    """BPE vocabularies trained on the training pairs: one joint (both sides) or one per side."""
    tok, vocab = config.tokenizer, config.model.vocab_size
    options = {"byte_level": tok.byte_level, "lowercase": tok.lowercase, "nfkc": tok.nfkc,
               "min_frequency": tok.min_frequency}
    if config.seq2seq.joint_vocab:
        console.print(f"training a joint {vocab:,}-token BPE on both sides of {len(pairs):,} pairs")
        joint = train_bpe([t for pair in pairs for t in pair], vocab, **options)
        return PairTokenizers(joint, joint)
    if config.model.share_embeddings:
        raise BertkitError("seq2seq.joint_vocab = false gives each side its own vocabulary: set "
                           "model.share_embeddings = false too (one embedding table cannot index two vocabularies)")
    console.print(f"training a {vocab:,}-token BPE per side on {len(pairs):,} pairs")
    return PairTokenizers(train_bpe([s for s, _ in pairs], vocab, **options),
                          train_bpe([t for _, t in pairs], vocab, **options))


Seq2SeqJob = FinetuneJob  # the same fields: the recipe, an encoder-decoder run (None: from scratch), out, resume


def run(job: Seq2SeqJob, console: Console | None = None) -> FinetuneResult:
    """Train an encoder-decoder on `seq2seq.train_source` / `seq2seq.train_target`; returns the kept checkpoint's
    validation scores and where the run is."""
    require_number(job.config, "seq2seq training")
    check_reads(job.config, FINETUNE_READS["seq2seq"])  # a key it never reads, given from Python: refused
    refuse_nested(job.out)  # before the lock, whose file would be created inside the other run
    with locked(job.out):  # one writer per run directory, for the whole job
        return _run(job.config, job.model, Path(job.out), job.resume, job.progress, console or Console(stderr=True),
                    job.accept_changed_data)


def _begin(config: Config, model_dir: Path | None, out: Path, resume: bool):
    """The options checked, the run's config with its model and tokenizer settings (the base run's, or the resumed
    run's own), the base model's weights where they are used, and whether a killed run starts again from scratch:
    (config, model_dir, base model or None, restart)."""
    text = config.seq2seq
    if text.train_source is None or text.train_target is None:
        raise BertkitError("seq2seq.train_source / seq2seq.train_target: give both sides of the training text "
                           "(--train-source FILE --train-target FILE)")
    if (text.validation_source is None) != (text.validation_target is None):
        raise BertkitError("seq2seq.validation_source / seq2seq.validation_target: give both sides or neither")
    config = with_learning_rate(config, DEFAULT_LEARNING_RATE)
    check_run_output(out, config, resume, ("task", "seq2seq", "train"),
                     RESUMABLE_TRAIN_KEYS | FINETUNE_READS["seq2seq"].unread())
    base = None
    # killed before its first checkpoint: nothing trained yet (a finished run whose checkpoints went is finished)
    restart = resume and not is_finished(out) and latest_checkpoint(out) is None
    if restart:  # start it again exactly as it began: from the same base model, if it had one
        model_dir = inputs.base_of(out, model_dir, required=False)
    elif resume and model_dir is not None:  # a --model given to a resume must be the one the run began from
        inputs.base_of(out, model_dir, required=False)
    if resume:
        stored = load_config(out)
        config = dataclasses.replace(config, model=stored.model, tokenizer=stored.tokenizer)
        if restart and model_dir is not None:
            base = load_run(model_dir)[1]
    elif model_dir is not None:
        base_config, base = load_run(model_dir)
        config = dataclasses.replace(config, model=base_config.model, tokenizer=base_config.tokenizer)
    if config.model.architecture != "encoder-decoder":
        where = f"{model_dir}" if model_dir is not None else "the recipe"
        raise BertkitError(f"model.architecture: seq2seq training needs an encoder-decoder, {where} has "
                           f"{config.model.architecture!r} (try --recipe translate-multi30k)")
    return config, model_dir, base, restart


def _pairs(config: Config, console: Console) -> tuple[list, list]:
    """The training pairs and the validation pairs (its own files, or held out of the training pairs)."""
    task, text = config.task, config.seq2seq
    pairs, skipped = read_parallel(text.train_source, text.train_target)
    if task.max_train_examples is not None:
        pairs = pairs[:task.max_train_examples]
    if text.validation_source is not None:
        train_pairs = pairs
        validation, dropped = read_parallel(text.validation_source, text.validation_target)
        if dropped:  # validation scores are over the other pairs: say so, as for training
            console.print(f"[yellow]skipped {dropped:,} validation pair(s) with an empty side")
    else:
        train_pairs, validation = hold_out(pairs, task.validation_split, config.train.seed)
    if skipped:
        console.print(f"[yellow]skipped {skipped:,} training pair(s) with an empty side")
    return train_pairs, validation


def _encode(config: Config, tokenizers: PairTokenizers, train_pairs: list, validation: list, console: Console):
    """Both sides of the training and validation pairs as ids, cut to the window (the cut ones counted):
    (max_length, (source, target, validation source, validation target))."""
    task = config.task
    max_length = task.max_length or config.model.max_len
    if max_length > config.model.max_len:
        raise BertkitError(f"task.max_length: {max_length} is longer than the model's max_len ({config.model.max_len})")
    source, cut_s = tokenizers.encode_source([s for s, _ in train_pairs], max_length)
    target, cut_t = tokenizers.encode_target([t for _, t in train_pairs], max_length)
    val_source, _ = tokenizers.encode_source([s for s, _ in validation], max_length)
    val_target, _ = tokenizers.encode_target([t for _, t in validation], max_length)
    if cut_s or cut_t:
        console.print(f"[yellow]warning: {cut_s:,} source and {cut_t:,} target sentences are longer than "
                      f"{max_length} tokens and were truncated (task.max_length)")
    return max_length, (source, target, val_source, val_target)


def _metric(config: Config, objective: Seq2SeqObjective) -> str:
    """The validation metric that picks the best checkpoint (train.metric, else the objective's own), checked."""
    metric = config.train.metric or objective.default_metric
    if metric not in objective.metric_names:
        raise BertkitError(f"train.metric: {metric!r} is not a validation metric of seq2seq (allowed: "
                           f"{'|'.join(objective.metric_names)})")
    if metric == "bleu" and not config.seq2seq.bleu_examples:
        raise BertkitError("train.metric: bleu needs seq2seq.bleu_examples > 0")
    return metric


def _write_results(out: Path, summary: dict, objective: Seq2SeqObjective, model: Model, console: Console) -> None:
    """results.json: the kept weights' validation scores (and sacrebleu's line); the closing line."""
    summary["validation"] = objective.evaluate(model)
    if objective.last_bleu is not None:  # the evaluation's own decoding: sacrebleu's line and signature
        summary["validation"]["bleu_detail"] = objective.last_bleu
    write_json(out / RESULTS_FILE, summary)
    headline = {k: v for k, v in summary["validation"].items() if isinstance(v, float)}
    kept = f"best step {summary['best_step']}" if not summary.get("no_best") else \
        f"no evaluation gave a finite {summary['metric']}: the last step's weights, step {summary['best_step']}"
    console.print(f"wrote {out} ({kept} of {summary['steps']}): validation "
                  + "  ".join(f"{k} {v:.4f}" for k, v in headline.items()))


def _run(config: Config, model_dir: Path | None, out: Path, resume: bool, progress: bool,
         console: Console, accept_changed_data: bool = False) -> FinetuneResult:
    config, model_dir, base, restart = _begin(config, model_dir, out, resume)
    task, text = config.task, config.seq2seq
    config = with_sharding(config)
    accelerator = make_accelerator(config.train.precision, config.train.sharding)
    config = with_processes(config, out, resume, accelerator.num_processes, console, accelerator.is_main_process)
    main = accelerator.is_main_process
    set_seed(config.train.seed)
    # what the run trains on, by content (and the base model's weights): a resume on other data is refused
    files = {f"seq2seq.{key}": [resolve_data_path(getattr(text, key))]
             for key in ("train_source", "train_target", "validation_source", "validation_target")
             if getattr(text, key) is not None}
    with_base = not resume or restart  # the base model is compared when it is used again
    recorded = inputs.check(out, files, accept_changed_data, console, main, model_dir, with_base) if resume else \
        inputs.describe(files, model_dir, with_base)

    train_pairs, validation = _pairs(config, console if main else Console(quiet=True))

    if resume:
        tokenizers = PairTokenizers.load(out)
    elif model_dir is not None:
        tokenizers = PairTokenizers.load(model_dir)
    else:
        tokenizers = _tokenizers(config, train_pairs, console if main else Console(quiet=True))
    for side in (tokenizers.source, tokenizers.target):
        check_vocab_matches(side, config.model.vocab_size, out if resume else model_dir or "the recipe")
    max_length, (source, target, val_source, val_target) = _encode(config, tokenizers, train_pairs, validation,
                                                                  console if main else Console(quiet=True))

    model_cfg, heads = config.model, HeadsConfig(names=("lm",))
    if model_dir is not None and task.finetune_dropout is not None:  # continuing a run: the task's dropout, as finetune
        model_cfg = dataclasses.replace(model_cfg, dropout=task.finetune_dropout,
                                        attention_dropout=task.finetune_dropout)
    # before any write: a micro-batch is padded to its longest sentence, at most max_length
    longest = max((len(ids) for ids in (*source, *target)), default=max_length)
    check_fits(model_cfg, heads, config.train.batch_size * min(longest, max_length), accelerator.device,
               accelerator.num_processes if config.train.sharding == "fsdp" else 1)
    model = Model(model_cfg, heads)
    if base is not None:
        model.load_state_dict(base.state_dict(), strict=False)  # the same architecture; heads hold no weights
    del base
    special = tokenizers.special
    translator = Translator(out, model=model, tokenizers=tokenizers, max_length=max_length,
                            batch_size=max(64, config.train.batch_size), precision=run_precision(accelerator))
    world = accelerator.num_processes
    objective = Seq2SeqObjective(source, target, val_source, val_target, [t for _, t in validation], special.cls,
                                 special.pad, text.label_smoothing, config.train, world, text.bleu_examples,
                                 translator)
    train_cfg = config.train
    if train_cfg.epochs is not None:
        train_cfg = dataclasses.replace(train_cfg, max_steps=max(1, math.ceil(train_cfg.epochs
                                                                               * objective.steps_per_epoch)))
    config = dataclasses.replace(config, model=model_cfg, heads=heads,
                                 train=dataclasses.replace(config.train, max_steps=train_cfg.max_steps))
    metric = _metric(config, objective)
    if resume and (done := already_finished(out, train_cfg, console, accelerator)) is not None:
        return FinetuneResult.from_results(out, done, already_done=True)
    if main:
        counts = model.parameter_counts()
        console.print(f"seq2seq: {len(train_pairs):,} training / {len(validation):,} validation pairs; vocab "
                      f"{tokenizers.source.get_vocab_size():,}{' (joint)' if tokenizers.joint else ''}; "
                      f"{counts['total'] / 1e6:.1f} M parameters; "
                      f"{plan_text(train_cfg, objective.steps_per_epoch, objective.global_batch)}; "
                      f"best checkpoint by validation {metric}")
        if not resume:
            with atomic_dir(out, exists_hint="pass --resume to continue it, or choose another --out") as tmp:
                write_config(tmp, config)
                tokenizers.save(tmp)
                inputs.write(tmp, recorded)
    accelerator.wait_for_everyone()

    summary, whole = train_best(model, objective, train_cfg, out, accelerator, metric, resume=resume,
                                console=console, progress=progress, resumed=lambda: main and inputs.keep(out, recorded))
    if main:
        _write_results(out, summary, objective, whole.to(accelerator.device), console)
    accelerator.wait_for_everyone()
    return FinetuneResult.from_results(out, summary)
