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
import re
from pathlib import Path

from accelerate.utils import set_seed
from rich.console import Console

from bertkit.config import Config, TaskConfig
from bertkit.errors import BertkitError
from bertkit.inference import TaskModel
from bertkit.nn.model import Model
from bertkit.run.directory import (CONFIG_FILE, LABELS_FILE, RESULTS_FILE, RESUMABLE_TRAIN_KEYS, check_run_output,
                                   load_config, load_run, load_run_tokenizer, read_labels, write_config, write_json,
                                   write_labels)
from bertkit.run.files import atomic_dir
from bertkit.run.lock import locked
from bertkit.text.features import TaskEncoder, join_words
from bertkit.text.tasks import SentencePair, hold_out, read_task_file
from bertkit.text.tokenizer import save_tokenizer, special_ids
from bertkit.train.defaults import finetune_learning_rate, with_learning_rate
from bertkit.train.loop import already_finished, make_accelerator, plan_text, run_precision, train_best
from bertkit.train.sentence_objectives import SentenceObjective
from bertkit.train.task_objectives import ClassifyObjective, TagObjective

HEAD = {"classify": "classifier", "ner": "tagger"}


def label_set(kind: str, examples) -> list[str]:
    """Label names in head order. classify (and sentence pairs with labels): sorted (numerically when every label is
    an integer). ner: O first, then B-X, I-X for every entity type seen (both, so decoding can continue any entity
    it starts). Sentence pairs with scores (or none): no labels."""
    if kind == "sentence" and not any(e.label is not None for e in examples):
        return []
    if kind in ("classify", "sentence"):
        names = sorted({e.label for e in examples})
        if all(re.fullmatch(r"-?[0-9]+", n) for n in names):
            names.sort(key=int)
        if len(names) < 2:
            raise BertkitError(f"the training data has only one label ({names[0]!r}): a classifier needs two or more")
        return names
    types = sorted({t[2:] for e in examples for t in e.tags if t != "O"})
    if not types:
        raise BertkitError("the training data has no entities (every tag is O)")
    return ["O"] + [f"{p}-{t}" for t in types for p in ("B", "I")]


def _sentence_objective(config: Config, train_examples: list[SentencePair], validation: list[SentencePair],
                        labels: list[str], encoder: TaskEncoder, pad_id: int, world: int):
    """SBERT training data: each side of the pairs tokenised once (a hard-negative side when every row has one)."""
    task = config.task
    negatives = task.loss == "mnrl" and all(e.negative for e in train_examples)
    if task.loss == "mnrl" and task.negative_column and not negatives:
        missing = sum(not e.negative for e in train_examples)
        raise BertkitError(f"task.negative_column: {missing:,} training rows have no hard negative in "
                           f"'{task.negative_column}' (give one per row, or leave the column out)")

    def sides(examples: list[SentencePair], with_negatives: bool):
        texts = [[e.text for e in examples], [e.pair for e in examples]]
        if with_negatives:
            texts.append([e.negative or "" for e in examples])
        return [encoder.texts(t) for t in texts]

    def targets(examples: list[SentencePair], gold: bool):
        if task.loss == "cosine":
            return [e.score / task.max_score for e in examples]
        if task.loss == "softmax":
            index = {name: i for i, name in enumerate(labels)}
            return [e.label for e in examples] if gold else [index[e.label] for e in examples]
        return None

    train_sides = sides(train_examples, negatives)
    validation_negatives = negatives and all(e.negative for e in validation)
    objective = SentenceObjective(task.loss, train_sides, targets(train_examples, False),
                                  sides(validation, validation_negatives), targets(validation, True),
                                  config.sentence.pooling, task.scale, pad_id, config.train, world, labels)
    return objective, [e for side in train_sides for e in side]


def run(config: Config, model_dir: Path | None, out: Path, resume: bool = False, progress: bool = True,
        console: Console | None = None) -> dict:
    """Finetune `model_dir` on `config.task`; returns the best validation metrics and where things are."""
    with locked(out):  # one writer per run directory, for the whole job
        return _run(config, model_dir, Path(out), resume, progress, console or Console(stderr=True))


def _run(config: Config, model_dir: Path | None, out: Path, resume: bool, progress: bool, console: Console) -> dict:
    task = config.task
    if task.train_file is None:
        raise BertkitError("task.train_file: no training file (pass --train FILE)")
    if resume and (out / CONFIG_FILE).is_file():  # an automatic learning rate is the one the run chose
        config = with_learning_rate(config, load_config(out).train.learning_rate)
    check_run_output(out, config, resume, ("task", "train"), RESUMABLE_TRAIN_KEYS)
    if resume:  # the run's own config and tokenizer; the weights come from its checkpoint
        model_dir, base = out, None
        base_config = load_config(out)
    elif model_dir is None:
        raise BertkitError("no --model: give a bertkit run directory (pretrained, or imported with import-hf)")
    else:
        base_config, base = load_run(model_dir)
    config = with_learning_rate(config, finetune_learning_rate(task.kind, base_config.model))
    if base_config.model.architecture != "encoder":
        arch = base_config.model.architecture
        raise BertkitError(f"{model_dir}: finetuning needs an encoder, this is a{'n' if arch[0] == 'e' else ''} {arch}"
                           + (" (train encoder-decoders with `finetune seq2seq`)" if arch == "encoder-decoder" else ""))
    tokenizer = load_run_tokenizer(model_dir, base_config)
    pad_id = special_ids(tokenizer).pad
    accelerator = make_accelerator(config.train.precision)
    main = accelerator.is_main_process
    set_seed(config.train.seed)

    # Data: read, label set, optional slice, validation split.
    examples = read_task_file(config.task, task.train_file)
    if task.max_train_examples is not None:
        examples = examples[:task.max_train_examples]
    if resume:
        if not (out / LABELS_FILE).is_file():
            raise BertkitError(f"{out}: has no {LABELS_FILE}; it is not a finetuning run to resume")
        labels = read_labels(out)[1]
    else:
        labels = label_set(task.kind, examples)
    if task.kind == "classify" and task.text_pair_column and base_config.model.type_vocab_size < 2:
        raise BertkitError(f"task.text_pair_column: {model_dir} has no segment embeddings for a second text "
                           f"(model.type_vocab_size = {base_config.model.type_vocab_size})")
    if task.validation_file is not None:
        train_examples, validation = examples, read_task_file(config.task, task.validation_file)
    else:
        train_examples, validation = hold_out(examples, task.validation_fraction, config.train.seed)
    sentence = config.sentence if task.kind == "sentence" else base_config.sentence
    if task.kind == "sentence":  # the embedding length: what training saw (task.max_length) unless set, or the base's
        sentence = dataclasses.replace(sentence, max_length=sentence.max_length or task.max_length
                                       or base_config.sentence.max_length)
        if task.pooling != TaskConfig().pooling:
            raise BertkitError("task.pooling is the classifier head's; sentence training pools with "
                               "sentence.pooling (--pooling, or --set sentence.pooling=...)")
        if resume and sentence != base_config.sentence:
            raise BertkitError(f"{out}: holds a different run ([sentence] {dataclasses.asdict(base_config.sentence)}, "
                               f"now {dataclasses.asdict(sentence)}); resume with the same settings")
    max_length = (sentence.max_length if task.kind == "sentence" else task.max_length) or base_config.model.max_len
    if max_length > base_config.model.max_len:
        raise BertkitError(f"{'sentence' if task.kind == 'sentence' else 'task'}.max_length: {max_length} is longer "
                           f"than the model's max_len ({base_config.model.max_len})")
    encoder = TaskEncoder(tokenizer, max_length)
    index = {name: i for i, name in enumerate(labels)}
    unknown = sorted({label for e in train_examples
                      for label in (e.tags if task.kind == "ner" else [e.label] if e.label is not None else [])
                      if label not in index})
    if unknown:  # only on resume: the training file changed since the run began
        raise BertkitError(f"{task.train_file}: labels {', '.join(unknown[:5])} are not in {out / LABELS_FILE}; "
                           "resume with the training file the run began with")
    world = accelerator.num_processes
    if task.kind == "sentence":
        objective, encoded = _sentence_objective(config, train_examples, validation, labels, encoder, pad_id,
                                                 world)
    elif task.kind == "classify":
        encoded = encoder.texts([e.text for e in train_examples],
                                [e.pair or "" for e in train_examples] if task.text_pair_column else None)
        val_encoded = encoder.texts([e.text for e in validation],
                                    [e.pair or "" for e in validation] if task.text_pair_column else None)
        objective = ClassifyObjective(encoded, [index[e.label] for e in train_examples], val_encoded,
                                      [e.label for e in validation], labels, pad_id, config.train, world)
    else:
        joined = [join_words(e.tokens) for e in train_examples]
        encoded = encoder.words([t for t, _ in joined], [s for _, s in joined])
        val_joined = [join_words(e.tokens) for e in validation]
        val_encoded = encoder.words([t for t, _ in val_joined], [s for _, s in val_joined])
        objective = TagObjective(encoded, [[index[t] for t in e.tags] for e in train_examples], val_encoded,
                                 [list(e.tags) for e in validation], labels, pad_id, config.train, world)
    truncated = sum(e.truncated for e in encoded)
    if truncated and main:
        what, key = ("sentences", "sentence.max_length") if task.kind == "sentence" else \
            ("training examples", "task.max_length")
        console.print(f"[yellow]warning: {truncated:,} of {len(encoded):,} {what} are longer than {max_length} "
                      f"tokens and were truncated ({key})")
    train_cfg = config.train
    if train_cfg.epochs is not None:
        train_cfg = dataclasses.replace(train_cfg, max_steps=max(1, math.ceil(train_cfg.epochs
                                                                               * objective.steps_per_epoch)))

    # The model: the base backbone (or a random one) under a fresh task head.
    dropout = base_config.model.dropout if task.dropout is None else task.dropout
    attention_dropout = base_config.model.attention_dropout if task.dropout is None else task.dropout
    heads = (HEAD[task.kind],) if task.kind != "sentence" else ("pair_classifier",) if labels else ()
    model_cfg = dataclasses.replace(base_config.model, heads=heads, num_labels=len(labels),
                                    pooling=task.pooling, dropout=dropout, attention_dropout=attention_dropout)
    config = dataclasses.replace(config, model=model_cfg, tokenizer=base_config.tokenizer, sentence=sentence,
                                 train=dataclasses.replace(config.train, max_steps=train_cfg.max_steps))
    model = Model(model_cfg)
    if task.init == "pretrained" and base is not None:
        model.backbone.load_state_dict(base.backbone.state_dict())
    del base
    metric = config.train.metric or objective.default_metric
    if metric not in objective.metric_names:
        raise BertkitError(f"train.metric: {metric!r} is not a validation metric of {task.kind} (allowed: "
                           f"{'|'.join(objective.metric_names)})")
    if resume and (done := already_finished(out, train_cfg, console, accelerator)) is not None:
        return done
    if main:
        what = f"{len(labels)} labels" if task.kind != "sentence" else \
            f"loss {task.loss}" + (f", {len(labels)} labels" if labels else "") + f", {sentence.pooling} pooling"
        console.print(f"{task.kind}: {len(train_examples):,} training / {len(validation):,} validation examples, "
                      f"{what}; {plan_text(train_cfg, objective.steps_per_epoch, objective.global_batch)}; "
                      f"learning rate {train_cfg.learning_rate:g}; "
                      f"{'random init' if task.init == 'random' else f'backbone from {model_dir}'}; "
                      f"best checkpoint by validation {metric}")
        if not resume:
            with atomic_dir(out, exists_hint="pass --resume to continue it, or choose another --out") as tmp:
                write_config(tmp, config)
                save_tokenizer(tokenizer, tmp)
                write_labels(tmp, task.kind, labels)
    accelerator.wait_for_everyone()

    summary = train_best(model, objective, train_cfg, out, accelerator, metric, resume=resume, console=console,
                         progress=progress)
    if main:
        if task.kind == "sentence":  # the best weights, through the embedding path `embed` and `evaluate-sts` use
            summary["validation"] = objective.evaluate(model.to(accelerator.device))
        else:
            summary["validation"] = TaskModel(out, device=accelerator.device,
                                              precision=run_precision(accelerator)).evaluate(validation)
        write_json(out / RESULTS_FILE, summary)
        headline = {k: v for k, v in summary["validation"].items() if isinstance(v, float)}
        console.print(f"wrote {out} (best step {summary['best_step']} of {summary['steps']}): validation "
                      + "  ".join(f"{k} {v:.4f}" for k, v in headline.items()))
    accelerator.wait_for_everyone()
    return summary
