"""`bertkit pretrain`: corpus → (BPE tokenizer) → packed blocks → masked-LM or replaced-token-detection (ELECTRA)
pretraining of an encoder, or causal-LM pretraining of a decoder → a run directory.

Runs unchanged on the CPU, one GPU, or N processes (`accelerate launch -m bertkit pretrain …`,
`torchrun --nproc_per_node 2 -m bertkit pretrain …`): every process builds the same data (the main process first,
the others then hit the cache) and takes its rows of each global batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate.utils import set_seed
from rich.console import Console

from bertkit.config import Config
from bertkit.errors import BertkitError, need_config
from bertkit.nn.model import Model
from bertkit.paths import cache_root
from bertkit.recipes import PRETRAIN_READS, check_reads
from bertkit.run.directory import (BASELINE_FILE, CONFIG_FILE, RESULTS_FILE, RESUMABLE_TRAIN_KEYS, TOKENIZER_FILE,
                                   WEIGHTS_FILE, load_config, read_json, write_config, write_json,
                                   write_weights)
from bertkit.run.resume import check_run_output
from bertkit.run import inputs
from bertkit.run.files import atomic_dir
from bertkit.run.lock import locked
from bertkit.run.outputs import refuse_nested
from bertkit.tasks.registry import PRETRAINING, with_pretraining_heads
from bertkit.text.bpe import SAMPLING, train_on_corpus
from bertkit.text.corpus import corpus_fingerprint, find_files, load_corpus
from bertkit.text.packing import pack_corpus
from bertkit.text.stream import HUB_PREFIX, streamed_packed
from bertkit.text.tokenizer import check_vocab_matches, load_tokenizer, save_tokenizer, special_ids, vocab_span
from bertkit.train.defaults import DEFAULT_LEARNING_RATE, with_learning_rate
from bertkit.train.elastic import with_processes
from bertkit.train.accelerator import make_accelerator, run_precision, with_sharding
from bertkit.train.batch_size import resolve_batch_size
from bertkit.train.loop import already_finished, train
from bertkit.train.memory import check_fits
from bertkit.train.results import as_stored
from bertkit.train.sharding import full_weights


def _check_output(out: Path, config: Config, resume: bool) -> None:
    # model.vocab_size and the heads are set by pretraining itself (from the tokenizer; the objective's heads);
    # [sentence] (how `embed` pools the encoder) is stored with the run, so a resume that changes it is refused, not
    # ignored
    check_run_output(out, config, resume, ("model", "tokenizer", "data", "train", "sentence"),
                     RESUMABLE_TRAIN_KEYS | {"model.vocab_size"} | PRETRAIN_READS.unread())


@dataclass(frozen=True)
class PretrainJob:
    """What `bertkit pretrain` is asked: the recipe (after `--set` and the command's options), the run directory to
    write, a tokenizer to use instead of training one, and whether to continue the run in `out`."""

    config: Config
    out: Path
    tokenizer: Path | None = None
    resume: bool = False
    progress: bool = True
    accept_changed_data: bool = False  # resume on a corpus whose content changed since the run began (recorded)

    def __post_init__(self) -> None:
        need_config(self.config, "PretrainJob")


@dataclass(frozen=True)
class PretrainResult:
    """A finished pretraining: the run directory, its final step, validation metrics and unigram baseline (the run's
    results.json; the baseline is None on the other processes of a distributed run), and the seconds spent inside
    training steps (None when `--resume` found the run complete and changed nothing: then `already_done`)."""

    out: Path
    step: int
    evaluation: dict[str, float]
    step_seconds: float | None = None
    skipped_steps: int = 0
    precision: str = "fp32"
    baseline: dict[str, float] | None = None
    already_done: bool = False

    @classmethod
    def from_results(cls, out: Path, results: dict, step_seconds: float | None = None,
                     already_done: bool = False) -> PretrainResult:
        """From a run's results.json (written at the end of every pretraining)."""
        results = as_stored(results)
        return cls(out=Path(out), step=int(results["step"]), evaluation=dict(results["evaluation"]),
                   step_seconds=step_seconds, skipped_steps=int(results.get("skipped_steps", 0)),
                   precision=results.get("precision", "fp32"),
                   baseline=results.get("baseline"), already_done=already_done)


TASK_HEADS = ("classifier", "tagger", "pair_classifier")  # finetuning's heads (config.HEADS), sized by its labels


def run(job: PretrainJob, console: Console | None = None) -> PretrainResult:
    """Pretrain an encoder with the MLM (or RTD) objective or a decoder with the causal-LM objective
    (`train.objective`); returns the final evaluation and where the run is."""
    console = console or Console(stderr=True)
    check_reads(job.config, PRETRAIN_READS)  # a key pretraining never reads, given from Python: refused, as --set's
    config = with_learning_rate(job.config, DEFAULT_LEARNING_RATE)
    if config.data.block_size > config.model.max_len:
        raise BertkitError(f"data.block_size: {config.data.block_size} is longer than model.max_len="
                           f"{config.model.max_len}")
    objective = config.train.objective
    wanted = PRETRAINING[objective].architecture
    if config.model.architecture != wanted:
        raise BertkitError(f"model.architecture: {PRETRAINING[objective].description} (--objective {objective}) needs "
                           f"{'an' if wanted == 'encoder' else 'a'} {wanted}, the recipe has "
                           f"{config.model.architecture!r} (use --objective "
                           f"{'clm' if config.model.architecture == 'decoder' else 'mlm or rtd'}, or another recipe)")
    untrained = [head for head in config.heads.names if head in TASK_HEADS]
    if untrained:  # a task head pretraining never trains: stored random, as if it were part of the model
        raise BertkitError(f"heads.names: pretraining trains its objective's heads, not {', '.join(untrained)} (a "
                           "finetuning command adds a task's head from its labels)")
    config = with_sharding(config)
    accelerator = make_accelerator(config.train.precision, config.train.sharding)
    out = Path(job.out)
    refuse_nested(out)  # before the lock, whose file would be created inside the other run
    with locked(out, enabled=accelerator.is_main_process):  # one writer per run directory, for the whole job
        return _run(config, out, accelerator, job.tokenizer, job.resume, job.progress, console,
                    job.accept_changed_data)


def _other_tokenizer(path: Path, own) -> str:
    """How `path` differs from the run's `own` tokenizer ("": it is the same). Gone or unreadable is said, not
    refused: a resume does not need it (re-running the first command line with --resume after its folder went was
    refused)."""
    try:
        return "is not the run's own tokenizer" if load_tokenizer(path).to_str() != own.to_str() else ""
    except BertkitError as exc:
        return f"cannot be read ({exc})"


def _data(config: Config, out: Path, tokenizer_path: Path | None, resume: bool, accelerator, console: Console):
    """The tokenizer (the run's own on resume, a given one, or a new one trained on the corpus) and the packed
    corpus (cached, or streamed and packed on the fly): (tokenizer, packed, read stats or None when streamed)."""
    main, stats = accelerator.is_main_process, None
    with accelerator.main_process_first():
        if resume:
            tokenizer = load_tokenizer(out)
            if tokenizer_path is not None and main and (other := _other_tokenizer(tokenizer_path, tokenizer)):
                console.print(f"[yellow]warning: --tokenizer {tokenizer_path} {other}: a resume keeps {out}'s "
                              "tokenizer (its model was trained on that tokenizer's ids)")
        elif tokenizer_path is not None:
            tokenizer = load_tokenizer(tokenizer_path)
        else:
            tokenizer = _cached_tokenizer(config, console if main else Console(quiet=True))
        quiet = console if main else Console(quiet=True)
        if config.data.streaming:  # tokenised and packed on the fly: nothing read whole, nothing cached
            packed = streamed_packed(config.data.corpus, config.data.text_field, tokenizer, config.data.block_size,
                                     config.data.validation_fraction, config.data.max_validation_blocks)
        else:
            dataset, stats, corpus_key = load_corpus(config.data.corpus, config.data.text_field,
                                                     config.data.skip_bad_lines, console=quiet)
            packed = pack_corpus(dataset, corpus_key, tokenizer, config.data.block_size,
                                 config.data.validation_fraction, config.data.max_validation_blocks,
                                 config.data.tokenize_workers, console=quiet)
            if stats.bad_lines and main:
                console.print(f"[yellow]skipped {stats.bad_lines:,} line(s) that are not valid UTF-8")
            if stats.bad_rows and main:
                console.print(f"[yellow]skipped {stats.bad_rows:,} CSV / TSV row(s) with more fields than the header")
    return tokenizer, packed, stats


def _opening(config: Config, objective, packed, stats, vocab: int, console: Console) -> None:
    """The corpus line (documents, blocks, vocabulary, global batch) and the settings' warnings."""
    corpus = (f"streamed corpus ({config.data.shuffle_window} batches shuffled together), "
              if config.data.streaming else
              f"corpus: {stats.documents:,} documents, {packed.stats['train_blocks']:,} training and ")
    weight = config.train.contrastive_weight  # > 0: every block takes two rows (tasks/contrast.py)
    views = f"2 halves of {config.data.block_size // 2} tokens" if config.train.halves else "2 maskings"
    batch = (f"{objective.global_batch} rows ({objective.global_batch // 2} blocks x {views}, contrastive weight "
             f"{weight:g})" if weight > 0 else objective.global_batch)
    console.print(f"{corpus}{len(packed.validation):,} validation blocks of {config.data.block_size} tokens; "
                  f"vocab {vocab:,}; global batch {batch}")
    for warning in _setting_warnings(config, len(packed.validation)):
        console.print(f"[yellow]warning: {warning}")


def _run(config: Config, out: Path, accelerator, tokenizer_path: Path | None, resume: bool, progress: bool,
         console: Console, accept_changed_data: bool = False) -> PretrainResult:
    main = accelerator.is_main_process
    set_seed(config.train.seed)
    if resume and (out / CONFIG_FILE).is_file():  # keep the stored vocab size (and an auto batch's rows) for the
        stored = load_config(out)                   # comparison below
        batch = stored.train.batch_size if config.train.batch_size == "auto" else config.train.batch_size
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, batch_size=batch),
                                     model=dataclasses.replace(config.model, vocab_size=stored.model.vocab_size))
    _check_output(out, config, resume)
    # a finished run is "already finished" under any process count (its limits do not depend on it)
    if resume and (done := already_finished(out, config.train, console, accelerator)) is not None:
        return PretrainResult.from_results(out, done, already_done=True)
    config = with_processes(config, out, resume, accelerator.num_processes, console, main)
    # what the run trains on, by content: a resume on another corpus is refused (a Hub stream has no file to digest)
    local = [c for c in config.data.corpus if not str(c).startswith(HUB_PREFIX)]
    files = {"data.corpus": find_files(local) if local else []}
    recorded = inputs.check(out, files, accept_changed_data, console, main) if resume else inputs.describe(files)

    tokenizer, packed, stats = _data(config, out, tokenizer_path, resume, accelerator, console)
    vocab = vocab_span(tokenizer)
    if resume:
        check_vocab_matches(tokenizer, config.model.vocab_size, out)
    elif vocab != config.model.vocab_size and main:
        console.print(f"model.vocab_size follows the tokenizer: {vocab:,} (the recipe said "
                      f"{config.model.vocab_size:,})")
    config = with_pretraining_heads(dataclasses.replace(config, model=dataclasses.replace(config.model,
                                                                                          vocab_size=vocab)))
    if config.train.batch_size == "auto":  # measured on a GPU (train/batch_size.py); stored as the number chosen
        config = _auto_batch(config, accelerator, console)
    # before the run directory is written: a model that cannot fit is one line, not a dead allocation
    check_fits(config.model, config.heads, config.train.batch_size * config.data.block_size, accelerator.device,
               accelerator.num_processes if config.train.sharding == "fsdp" else 1)
    special = special_ids(tokenizer)
    if config.model.pad_token_id != special.pad:  # else stored as the pad id, as an HF export then says
        raise BertkitError(f"model.pad_token_id: {config.model.pad_token_id}, but the tokenizer pads with id "
                           f"{special.pad} ([PAD]); leave model.pad_token_id at {special.pad}")
    objective = PRETRAINING[config.train.objective].objective(packed, special, vocab, config.data, config.train,
                                                   accelerator.num_processes)

    if main:
        _opening(config, objective, packed, stats, vocab, console)
        if not resume:
            with atomic_dir(out, exists_hint="pass --resume to continue it, or choose another --out") as tmp:
                write_config(tmp, config)
                save_tokenizer(tokenizer, tmp)
                write_json(tmp / BASELINE_FILE, {"unigram": objective.unigram_baseline()})
                inputs.write(tmp, recorded)
    accelerator.wait_for_everyone()

    model = Model(config.model, config.heads)
    result = train(model, objective, config.train, out, accelerator, resume=resume, console=console,
                   progress=progress, resumed=lambda: main and inputs.keep(out, recorded))
    results = {"step": result["state"]["step"], "evaluation": result["evaluation"],
               "skipped_steps": result["state"]["skipped_steps"], "precision": result["state"]["precision"],
               "baseline": read_json(out / BASELINE_FILE, "baseline").get("unigram") if main else None,
               # 0: an empty evaluation means no validation text, not a run whose evaluation was lost
               "validation_blocks": len(packed.validation)}
    whole = full_weights(model)  # a sharded model is gathered into one model.safetensors (every process takes part)
    if main:
        write_weights(out / WEIGHTS_FILE, whole, step=str(result["state"]["step"]))
        write_json(out / RESULTS_FILE, results)
        console.print(f"wrote {out} (step {result['state']['step']}): "
                      + ("  ".join(f"{k} {v:.4f}" for k, v in result["evaluation"].items())
                         or "no validation blocks, no validation loss"))
    accelerator.wait_for_everyone()
    return PretrainResult.from_results(out, results, step_seconds=result["state"]["step_seconds"])


def _auto_batch(config: Config, accelerator, console: Console) -> Config:
    """`config` with `train.batch_size = "auto"` replaced by the rows it stands for on this device, the same on
    every process (the smallest any measured)."""
    def agree(rows: int) -> int:
        if accelerator.num_processes == 1:
            return rows
        return int(accelerator.gather(torch.tensor([rows], device=accelerator.device)).min())

    say = console.print if accelerator.is_main_process else (lambda line: None)
    rows = resolve_batch_size(config, accelerator.device, run_precision(accelerator), say, agree)
    return dataclasses.replace(config, train=dataclasses.replace(config.train, batch_size=rows))


def _setting_warnings(config: Config, validation_blocks: int) -> list[str]:
    """What the run's settings will not do, said before it trains (issue 38: never silently)."""
    data, warnings = config.data, []
    if data.streaming and data.tokenize_workers > 1:
        warnings.append(f"data.tokenize_workers={data.tokenize_workers} does nothing when streaming (a streamed "
                        "corpus is tokenised as it is read, in the training process); leave it at 1, or pack the "
                        "corpus (data.streaming = false) to tokenise it with workers")
    if validation_blocks == 0:
        why = ("data.validation_fraction = 0" if data.validation_fraction == 0 else
               f"the corpus is too small for data.validation_fraction={data.validation_fraction:g} "
               f"({data.validation_fraction * 100:g}% of the documents, spread evenly, are held out: too few "
               f"documents, or too little text in them for a block of {data.block_size} tokens)")
        warnings.append(f"no validation blocks: {why}; the run has no validation loss (add documents, or raise "
                        "data.validation_fraction)")
    return warnings


def _cached_tokenizer(config: Config, console: Console):
    """Train a BPE tokenizer on the corpus once per (corpus, settings); later runs and other processes reuse it."""
    if any(str(c).startswith(HUB_PREFIX) for c in config.data.corpus):
        raise BertkitError("data.corpus: a streamed Hub dataset is not read whole to train a tokenizer; pass "
                           "--tokenizer (train one on a sample with `bertkit tokenizer train`)")
    files = find_files(config.data.corpus)
    # (the sampling only where max_documents samples: a tokenizer of the whole corpus is the one it was)
    sampled = [SAMPLING] if config.tokenizer.max_documents else []
    key = hashlib.sha256(json.dumps([corpus_fingerprint(files, config.data.text_field, config.data.skip_bad_lines),
                                     config.model.vocab_size, dataclasses.asdict(config.tokenizer), *sampled]).encode())
    folder = cache_root() / "tokenizers" / key.hexdigest()[:20]
    if (folder / TOKENIZER_FILE).is_file():
        try:
            return load_tokenizer(folder)
        except BertkitError:  # a damaged cache entry is rebuilt, never a dead end
            console.print(f"[yellow]{folder}: damaged tokenizer cache; training it again")
    tokenizer = train_on_corpus(config.data.corpus, config.model.vocab_size, config.tokenizer,
                                config.data.text_field, config.data.skip_bad_lines, console, config.data.streaming)
    with atomic_dir(folder, overwrite=True) as tmp:
        save_tokenizer(tokenizer, tmp)
    return tokenizer

