"""`bertkit finetune classify|ner|sentence`: a pretrained (or imported) encoder + a task head (or, for SBERT, a
pooling), trained by the one loop.

MODEL is any bertkit run directory with an encoder: pretrained by `bertkit pretrain` or imported with
`bertkit import-hf` — the same code path. Its backbone weights and tokenizer are reused; the heads it carried
(MLM, pooler) are dropped and the task head is initialised fresh.

The output is a run directory like every other, plus labels.json (the label set, in head order) and results.json
(the best checkpoint's validation metrics); model.safetensors holds the best checkpoint's weights. A sentence run
also stores its `[sentence]` settings (pooling, normalisation, length), which `embed` and `search` use.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from accelerate.utils import set_seed
from rich.console import Console

from bertkit.config import Config
from bertkit.errors import BertkitError, a_or_an
from bertkit.nn.model import Model
from bertkit.recipes import FINETUNE_READS, check_reads
from bertkit.run.directory import (CONFIG_FILE, LABELS_FILE, RESULTS_FILE, RESUMABLE_TRAIN_KEYS,
                                   is_finished, load_config, load_run, read_labels, write_config,
                                   write_json, write_labels)
from bertkit.run.resume import check_run_output
from bertkit.paths import resolve_data_path
from bertkit.run import inputs
from bertkit.run.checkpoints import latest_checkpoint
from bertkit.run.files import atomic_dir
from bertkit.run.lock import locked
from bertkit.run.outputs import refuse_nested
from bertkit.tasks.base import FinetuneTask
from bertkit.tasks.registry import finetune_task
from bertkit.text.features import Encoded, TaskEncoder
from bertkit.text.labels import written_otherwise
from bertkit.text.tasks import hold_out
from bertkit.text.tokenizer import load_run_tokenizer, save_tokenizer, special_ids
from bertkit.train.defaults import finetune_learning_rate, with_learning_rate
from bertkit.train.elastic import with_processes
from bertkit.train.accelerator import make_accelerator, run_precision, with_sharding
from bertkit.train.loop import already_finished, plan_text, train_best
from bertkit.train.batch_size import require_number
from bertkit.train.memory import check_fits
from bertkit.train.results import FinetuneJob, FinetuneResult

SINGLETON_CLASSES = 10  # fewer classes than this are not judged by how many label one example only


def run(job: FinetuneJob, console: Console | None = None) -> FinetuneResult:
    """Finetune `job.model` on `job.config.task`; returns the kept checkpoint's validation scores and where the run
    is."""
    require_number(job.config, "finetuning")
    if (reads := FINETUNE_READS.get(job.config.task.kind)) is not None:
        check_reads(job.config, reads)  # a key this finetuning never reads, given from Python: refused, as --set's
    refuse_nested(job.out)  # before the lock, whose file would be created inside the other run
    with locked(job.out):  # one writer per run directory, for the whole job
        return _run(job.config, job.model, Path(job.out), job.resume, job.progress, console or Console(stderr=True),
                    job.accept_changed_data, job.skip_bad_lines, job.step_cap)


def _begin(config: Config, task: FinetuneTask, model_dir: Path | None, out: Path, resume: bool):
    """The options checked against the task and the stored run, the base run read (or, resuming, the run's own
    config), the learning rate and the task's settings resolved: (config, model_dir, base config, base model or
    None, restart — a run killed before its first checkpoint starts again from its base)."""
    task_config = config.task
    if task_config.train_file is None:
        raise BertkitError("task.train_file: no training file (pass --train FILE)")
    if config.heads.names or config.heads.num_labels:
        raise BertkitError("heads.names / heads.num_labels: finetuning sets them from the task and its labels (of "
                           "[heads], only classifier_pooling is yours to set)")
    if resume and (out / CONFIG_FILE).is_file():  # an automatic learning rate is the one the run chose
        config = with_learning_rate(config, load_config(out).train.learning_rate)
    # what the kind reads must match the stored run ([sentence] is resolved against the base: the task checks it);
    # the heads' names and sizes come from the task and its labels
    sections = tuple(s for s in FINETUNE_READS[task.kind].sections if s != "sentence")
    check_run_output(out, config, resume, sections, RESUMABLE_TRAIN_KEYS | {"heads.names", "heads.num_labels"}
                     | FINETUNE_READS[task.kind].unread())
    # killed before its first checkpoint: nothing trained yet (a finished run whose checkpoints went is finished)
    restart = resume and not is_finished(out) and latest_checkpoint(out) is None
    if restart:  # start it again exactly as it began: from the same base model
        model_dir = inputs.base_of(out, model_dir, required=True)
    elif resume and model_dir is not None:  # a --model given to a resume must be the one the run began from
        inputs.base_of(out, model_dir, required=False)
    if resume and not restart:  # the run's own config and tokenizer; the weights come from its checkpoint
        model_dir, base = out, None
        base_config = load_config(out)
    elif model_dir is None:
        raise BertkitError("no --model: give a bertkit run directory (pretrained, or imported with import-hf)")
    else:
        base_config, base = load_run(model_dir)
    config = with_learning_rate(config, finetune_learning_rate(task_config.kind, base_config.model))
    if base_config.model.architecture != "encoder":
        arch = base_config.model.architecture
        raise BertkitError(f"{model_dir}: finetuning needs an encoder, this is {a_or_an(arch)}"
                           + (" (train encoder-decoders with `finetune seq2seq`)" if arch == "encoder-decoder" else ""))
    config = task.settings(config, base_config, model_dir, out, resume and not restart)
    if restart and config.sentence != load_config(out).sentence:  # resolved against the base, as when it began
        raise BertkitError(f"{out}: holds a different run ([sentence] {dataclasses.asdict(load_config(out).sentence)},"
                           f" now {dataclasses.asdict(config.sentence)}); resume with the same settings")
    return config, model_dir, base_config, base, restart


def _examples(config: Config, task_config, task: FinetuneTask, out: Path, resume: bool, skip_bad_lines: bool,
              warn):
    """The training and validation examples (rows with no label or text skipped and counted, or refused; the
    optional slice; the validation file or the held-out split) and the label set (a resumed run's own):
    (train, validation, labels). `task_config`: the [task] the run was asked for."""
    examples = task.read(config, task_config.train_file, skip_bad_lines, warn)
    if task_config.max_train_examples is not None:
        examples = examples[:task_config.max_train_examples]
    if resume:
        if not (out / LABELS_FILE).is_file():
            raise BertkitError(f"{out}: has no {LABELS_FILE}; it is not a finetuning run to resume")
        labels = read_labels(out)[1]
        examples = _as_stored(task, examples, labels)
    else:
        labels = task.label_set(examples)
        _check_singletons(task, examples, labels, task_config.train_file, warn)
    if task_config.validation_file is not None:
        validation = task.read(config, task_config.validation_file, skip_bad_lines, warn)
        train_examples, validation = examples, _as_stored(task, validation, labels) if resume else validation
    else:
        train_examples, validation = hold_out(examples, task_config.validation_split, config.train.seed,
                                              task.example_labels)
    unknown = sorted({label for e in train_examples for label in task.example_labels(e)} - set(labels))
    if unknown:  # only on resume: the training file changed since the run began
        raise BertkitError(f"{task_config.train_file}: labels {', '.join(unknown[:5])} are not in "
                           f"{out / LABELS_FILE}; resume with the training file the run began with")
    _check_unseen(task, validation, labels, task_config.validation_file or task_config.train_file, warn)
    return train_examples, validation, labels


def _as_stored(task: FinetuneTask, examples: list, labels: list[str]) -> list:
    """A resumed classifier's examples with their labels spelled as the run stored them where only the spelling
    differs: a run from before 2026-11-28 stored fractions as Python prints them ("0.5" for its file's "0.50"; the
    resume has checked that the file is the one it began with), and refused its own file as 'labels not in
    labels.json'. Before the split, so the held-out rows are the run's."""
    if task.kind != "classify":
        return examples
    spelled = {label: stored for label in {e.label for e in examples} - set(labels)
               if (stored := written_otherwise(label, labels)) is not None}
    return [dataclasses.replace(e, label=spelled[e.label]) if e.label in spelled else e for e in examples] \
        if spelled else examples


def _train_settings(train_cfg, steps_per_epoch: float, step_cap: int | None):
    """The run's step count (from its epochs, where it has them; at most `step_cap`, `glue --steps`: the epochs or
    the cap, whichever ends first) and its evaluation interval."""
    if train_cfg.epochs is not None:
        train_cfg = dataclasses.replace(train_cfg, max_steps=max(1, math.ceil(train_cfg.epochs * steps_per_epoch)))
    if step_cap is not None:
        train_cfg = dataclasses.replace(train_cfg, max_steps=min(train_cfg.max_steps, step_cap))
    return evaluated_each_epoch(train_cfg, steps_per_epoch)


def evaluated_each_epoch(train_cfg, steps_per_epoch: float):
    """The run's train settings, evaluating once an epoch where `eval_every` would evaluate it only at its end: on
    a small training file (300 examples: 10 steps an epoch, 29 in 3 epochs) `eval_every` 200 evaluated once, so the
    "best checkpoint" was the last step's. An interval shorter than the run is left as given (patience counts its
    evaluations; a time budget pays for them). config.json records the interval the run used, as it records the
    step count its epochs made."""
    per_epoch = max(1, math.ceil(steps_per_epoch))
    if train_cfg.eval_every < train_cfg.max_steps or train_cfg.max_steps <= per_epoch:
        return train_cfg
    return dataclasses.replace(train_cfg, eval_every=per_epoch)


def _longest(encoded: list, max_length: int) -> int:
    """The longest encoded example, at most max_length: what a micro-batch is padded to."""
    return min(max((len(e.input_ids) for e in encoded if hasattr(e, "input_ids")), default=max_length), max_length)


def _model(config: Config, task_config, task: FinetuneTask, base_config: Config, base, labels: list[str],
           train_cfg, longest: int, accelerator) -> tuple[Config, Model]:
    """The run's config with its model, heads and step count, and the model: the base backbone (or a random one,
    task.init = random) under a fresh task head; refused before any write when it cannot fit in memory."""
    dropout = task_config.finetune_dropout
    model_cfg = base_config.model if dropout is None else dataclasses.replace(
        base_config.model, dropout=dropout, attention_dropout=dropout)
    heads = dataclasses.replace(config.heads, names=task.heads(labels), num_labels=len(labels))
    config = dataclasses.replace(config, model=model_cfg, heads=heads, tokenizer=base_config.tokenizer,
                                 train=dataclasses.replace(config.train, max_steps=train_cfg.max_steps,
                                                           eval_every=train_cfg.eval_every))
    check_fits(model_cfg, heads, config.train.batch_size * longest, accelerator.device,
               accelerator.num_processes if config.train.sharding == "fsdp" else 1)
    model = Model(model_cfg, heads)
    if task_config.init == "pretrained" and base is not None:
        model.backbone.load_state_dict(base.backbone.state_dict())
    return config, model


def _write_results(out: Path, summary: dict, validation: dict, console: Console) -> None:
    """results.json: the kept weights' validation scores; the closing line."""
    summary["validation"] = validation
    write_json(out / RESULTS_FILE, summary)
    headline = {k: v for k, v in summary["validation"].items() if isinstance(v, float)}
    kept = f"best step {summary['best_step']}" if not summary.get("no_best") else \
        f"no evaluation gave a finite {summary['metric']}: the last step's weights, step {summary['best_step']}"
    console.print(f"wrote {out} ({kept} of {summary['steps']}): validation "
                  + "  ".join(f"{k} {v:.4f}" for k, v in headline.items()))


def _run(config: Config, model_dir: Path | None, out: Path, resume: bool, progress: bool,
         console: Console, accept_changed_data: bool = False, skip_bad_lines: bool = False,
         step_cap: int | None = None) -> FinetuneResult:
    task_config = config.task
    task = finetune_task(task_config.kind)
    config, model_dir, base_config, base, restart = _begin(config, task, model_dir, out, resume)
    tokenizer = load_run_tokenizer(model_dir, base_config)
    pad_id = special_ids(tokenizer).pad
    config = with_sharding(config)
    accelerator = make_accelerator(config.train.precision, config.train.sharding)
    config = with_processes(config, out, resume, accelerator.num_processes, console, accelerator.is_main_process,
                            task.pools_processes(config))
    main = accelerator.is_main_process
    set_seed(config.train.seed)
    # what the run trains on, by content (and the base model's weights): a resume on other data is refused
    files = {"task.train_file": [resolve_data_path(task_config.train_file)]}
    if task_config.validation_file is not None:
        files["task.validation_file"] = [resolve_data_path(task_config.validation_file)]
    with_base = not resume or restart  # the base model is compared when it is used again
    recorded = inputs.check(out, files, accept_changed_data, console, main, model_dir, with_base) if resume else \
        inputs.describe(files, model_dir, with_base)

    # Data: read (rows with no label or text skipped and counted, or refused), label set, optional slice, validation
    # split.
    def warn(message: str) -> None:
        if main:
            console.print(f"[yellow]warning: {message}")

    train_examples, validation, labels = _examples(config, task_config, task, out, resume, skip_bad_lines, warn)
    max_length = task.max_length(config, base_config)
    if max_length > base_config.model.max_len:
        raise BertkitError(f"{task.length_key}: {max_length} is longer than the model's max_len "
                           f"({base_config.model.max_len}); set it to {base_config.model.max_len} or less (--set "
                           f"{task.length_key}={base_config.model.max_len})")
    objective, encoded = task.objective(config, train_examples, validation, labels, TaskEncoder(tokenizer, max_length),
                                        pad_id, accelerator.num_processes)
    if main:
        _say_truncated(console, task, encoded, objective, max_length)
    train_cfg = _train_settings(config.train, objective.steps_per_epoch, step_cap)
    per_epoch = train_cfg.eval_every != config.train.eval_every  # said in the opening line

    config, model = _model(config, task_config, task, base_config, base, labels, train_cfg,
                           _longest(encoded, max_length), accelerator)
    del base
    objective.init_head(model)  # from the data (a regressor's bias at the mean score); a resume loads over it
    metric = _metric(config.train.metric, objective, task, validation, task_config, warn)
    if resume and (done := already_finished(out, train_cfg, console, accelerator)) is not None:
        return FinetuneResult.from_results(out, done, already_done=True)
    if main:
        console.print(f"{task.kind}: {len(train_examples):,} training / {len(validation):,} validation examples, "
                      f"{task.summary(config, labels, accelerator.num_processes)}; "
                      f"{plan_text(train_cfg, objective.steps_per_epoch, objective.global_batch)}; "
                      f"learning rate {train_cfg.learning_rate:g}; "
                      f"{'random init' if task_config.init == 'random' else f'backbone from {model_dir}'}; "
                      f"best checkpoint by validation {metric}"
                      + (f", evaluated once an epoch (every {train_cfg.eval_every:,} steps)"
                         if per_epoch else ""))
        if not resume:
            with atomic_dir(out, exists_hint="pass --resume to continue it, or choose another --out") as tmp:
                write_config(tmp, config)
                save_tokenizer(tokenizer, tmp)
                write_labels(tmp, task.kind, labels)
                inputs.write(tmp, recorded)
    accelerator.wait_for_everyone()

    summary, whole = train_best(model, objective, train_cfg, out, accelerator, metric, resume=resume,
                                console=console, progress=progress, resumed=lambda: main and inputs.keep(out, recorded))
    if main:
        _write_results(out, summary, task.final_validation(out, whole, objective, validation, accelerator.device,
                                                           run_precision(accelerator)), console)
    accelerator.wait_for_everyone()
    return FinetuneResult.from_results(out, summary)


def _check_singletons(task: FinetuneTask, examples: list, labels: list[str], source: str,
                      warn: Callable[[str], None]) -> None:
    """Warn when most of ten or more classes label one training example each: a class cannot be learnt from one
    example, and it most often means an ID (or text) column given as the label column. A warning, not an error:
    validation on the same IDs would still run, and a user may mean it."""
    counts = Counter(label for e in examples for label in task.example_labels(e))
    once = sum(counts[label] == 1 for label in labels)
    if len(labels) >= SINGLETON_CLASSES and once > len(labels) / 2:
        warn(f"{source}: {once:,} of its {len(labels):,} labels label one row each (a classifier cannot learn a "
             f"class from one example): is that the label column? ({task.label_option} picks it)")


def _say_truncated(console: Console, task: FinetuneTask, encoded: list[Encoded], objective, max_length: int) -> None:
    """The training and validation examples cut at the maximum length, one warning each. Validation's too: what
    they lose (a sentence's words past the cut, tagged O) the metric that picks the checkpoint counts as misses."""
    scored = [e for e in getattr(objective, "validation", ()) if isinstance(e, Encoded)]
    counts_against = ": what they lose counts against the validation metric"
    for examples, name, lost in ((encoded, task.examples_name, ""), (scored, "validation examples", counts_against)):
        if cut := sum(e.truncated for e in examples):
            console.print(f"[yellow]warning: {cut:,} of {len(examples):,} {name} are longer than {max_length} tokens "
                          f"and were truncated ({task.length_key}){lost}")


def _metric(given: str | None, objective, task: FinetuneTask, validation: list, task_config,
            warn: Callable[[str], None]) -> str:
    """The validation metric that picks the best checkpoint. A NER validation set without an entity scores entity
    F1 0 whatever the model tags, so the first evaluation was kept as "best" while the loss still fell: picked by
    val_loss instead (by default; asked for, refused)."""
    metric = given or objective.default_metric
    if metric not in objective.metric_names:
        raise BertkitError(f"train.metric: {metric!r} is not a validation metric of {task.kind} (allowed: "
                           f"{'|'.join(objective.metric_names)})")
    entity_metric = task.kind == "ner" and metric in ("precision", "recall", "f1")
    if entity_metric and validation and all(tag == "O" for sentence in validation for tag in sentence.tags):
        source = task_config.validation_file or f"{task_config.train_file}'s held-out part"
        said = (f"validation ({source}) has no entity: entity {metric} is 0 whatever the model tags")
        if given is not None:
            raise BertkitError(f"train.metric: {said}; pick by --set train.metric=val_loss, or give a validation "
                               "file with entities")
        warn(f"{said}, so the best checkpoint is picked by validation val_loss")
        metric = "val_loss"
    return metric


def _check_unseen(task: FinetuneTask, validation: list, labels: list[str], source: str,
                  warn: Callable[[str], None]) -> None:
    """Warn of validation labels the training file lacks (each counts as an error); refuse a validation set none of
    whose labels the model can learn. That is an error rather than a warning: every prediction would be wrong, so
    the metric that picks the best checkpoint would be constant (val_loss nan) and the run would train its whole
    budget to keep an arbitrary checkpoint. It most often means the wrong --validation file or label column."""
    unseen, graded, names = task.unseen(validation, labels)
    if not unseen:
        return
    listed = ", ".join(names[:5]) + (", …" if len(names) > 5 else "")
    if unseen == graded:
        known = ", ".join(labels[:5]) + (", …" if len(labels) > 5 else "")
        raise BertkitError(f"{source}: none of its {graded:,} validation {task.graded_name} has a label the "
                           f"training file has (validation: {listed}; training: {known}): validation would measure "
                           f"nothing; check --validation and {task.label_option}, or leave --validation out to hold "
                           "out part of --train")
    warn(f"validation ({source}): {unseen:,} of {graded:,} {task.graded_name} carry labels the training file lacks "
         f"({listed}): counted as errors")
