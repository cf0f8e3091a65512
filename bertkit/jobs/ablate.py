"""`bertkit ablate`: train a base recipe and its variants under one budget, seed(s) and corpus; report the table.

Layout of OUT:
  plan.json                       the base config, budget, task (checked on every re-run)
  variants/<variant>/seed-<s>/    pretrain/ (a normal run directory), finetune/ (--task classify), result.json
  ablation.csv                    one row per variant and seed (invalid and failed ones included, with the reason)
  ablation.md                     the Markdown table (mean ± std over seeds)
  ablation.png                    validation loss per variant (bars) and validation-loss curves against tokens

Resumable: a variant-seed with result.json is reused, not re-run; one interrupted half-way starts again from
scratch (so every variant gets its budget in one piece). Adding `--vary` values to a finished ablation runs only the
new variants.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import traceback
from pathlib import Path

from rich.console import Console

from bertkit.paths import one_is_one
from bertkit.ablation import (COLUMNS, FEW_DOWNSTREAM, Budget, Plan, Variant, build_plan, check_plan_file, parse_vary,
                              variant_folder)
from bertkit.config import Config
from bertkit.errors import BertkitError
from bertkit.jobs import finetune as finetune_job
from bertkit.jobs import pretrain as pretrain_job
from bertkit.jobs.finetune import FinetuneJob
from bertkit.jobs.pretrain import PretrainJob
from bertkit.jobs.ablate_report import write_report
from bertkit.nn.model import Model
from bertkit.recipes import (FINETUNE_READS, PRETRAIN_READS, apply_overrides, is_model_recipe, load_recipe,
                             resolve_recipe, with_values)
from bertkit.run.directory import load_config
from bertkit.run.files import atomic_file
from bertkit.run.outputs import refuse_nested
from bertkit.train.batch_size import require_number
from bertkit.tasks.registry import finetune_task

TASKS = ("pretrain", "classify")
RESULT_FILE = "result.json"


@dataclasses.dataclass(frozen=True)
class AblationJob:
    """Everything `bertkit ablate` is asked: the base recipe, the keys to vary and how, the budget per variant, the
    ablation directory, seeds, and (`task = "classify"`) the finetune that scores each variant downstream."""

    recipe: str
    vary: tuple[str, ...]
    budget: str
    out: Path
    sets: tuple[str, ...] = ()
    grid: bool = False
    seeds: tuple[int, ...] = ()  # empty: the recipe's train.seed
    task: str = "pretrain"
    corpus: tuple[str, ...] = ()
    finetune_recipe: str = "finetune-sst2"
    finetune_sets: tuple[str, ...] = ()
    finetune_budget: str = "2m"
    progress: bool = True

    def __post_init__(self) -> None:
        one_is_one(self, "vary", "sets", "corpus", "finetune_sets")  # one given as a str is one item


@dataclasses.dataclass(frozen=True)
class AblationResult:
    """One row per variant × seed (the columns of ablation.csv: `ablation.COLUMNS`; `status` ok, invalid or
    failed) and the files written (ablation.csv, ablation.md, ablation.png)."""

    rows: list[dict]
    files: list[Path]


def tokens_per_step(config: Config) -> int:
    """Tokens of corpus text one optimiser step consumes in pretraining (packed blocks are full): a contrastive
    variant's rows are two views of each block (two maskings of it, or its two halves), so a step reads half as many
    blocks. Counted per row, a `2Mtok` budget gave such a variant half the text of the others, and its halves'
    tokens seen and tokens/s read twice what it trained on."""
    views = 2 if config.train.contrastive_weight > 0 else 1
    return config.train.batch_size * config.train.accumulation_steps * config.data.block_size // views


def make_plan(spec: AblationJob) -> tuple[Plan, Budget]:
    """The variants and the budget (errors in the flags are raised here, before anything runs)."""
    if spec.task not in TASKS:
        raise BertkitError(f"--task {spec.task!r}: not allowed (allowed: {'|'.join(TASKS)})")
    budget = Budget.parse(spec.budget)
    path = resolve_recipe(spec.recipe)
    load_recipe(path, spec.sets)  # a malformed recipe or --set is one clear error here
    if not is_model_recipe(path):
        raise BertkitError(f"--recipe {spec.recipe}: has no [model] table; ablate a pretraining recipe (tiny, mini, "
                           "…) and give the finetuning one with --finetune-recipe")
    load_recipe(path, spec.sets, PRETRAIN_READS)  # and a key pretraining never reads
    varied = parse_vary(list(spec.vary))
    for dotted in varied:  # variants differing only in a key pretraining never reads would be one run, shown as many
        if (why := PRETRAIN_READS.ignored(*dotted.split(".", 1))) is not None:
            raise BertkitError(f"--vary {dotted}: does nothing in pretraining: {why}")

    def load(changes: list[str]) -> Config:
        config = load_recipe(path, [*spec.sets, *changes], PRETRAIN_READS, layered=True)  # a change replaces a --set
        return with_values(config, {"data.corpus": tuple(spec.corpus) if spec.corpus else None})

    plan = build_plan(load, varied, spec.grid)
    changed = [v for v in plan.variants if v.changes]
    if changed and all(v.config is None for v in changed):  # the base alone would train: nothing to compare it with
        reasons = "; ".join(f"{v.name}: {v.invalid}" for v in changed[:3]) + ("; …" if len(changed) > 3 else "")
        raise BertkitError(f"--vary: every variant is invalid ({reasons}); nothing to compare with the base")
    if not plan.base.data.corpus:
        raise BertkitError("data.corpus: the recipe names no corpus (pass --corpus FILE)")
    for config in (plan.base, *(v.config for v in plan.variants if v.config is not None)):
        require_number(config, "an ablation (its variants compare at one batch)")  # a token budget needs it
    return plan, budget


def _finetune_config(spec: AblationJob) -> Config | None:
    if spec.task != "classify":
        return None
    budget = Budget.parse(spec.finetune_budget, "--finetune-budget", tokens=False)
    config = load_recipe(spec.finetune_recipe, [*spec.finetune_sets, *budget.overrides(1)], FINETUNE_READS["classify"],
                         layered=True)  # the budget's limits replace --finetune-set's
    if config.task.kind != "classify":
        raise BertkitError(f"--finetune-recipe {spec.finetune_recipe}: task.kind is {config.task.kind!r}, "
                           "--task classify needs a classify recipe")
    if config.task.train_file is None:
        raise BertkitError(f"--finetune-recipe {spec.finetune_recipe}: no task.train_file (add --finetune-set "
                           "task.train_file=FILE)")

    # a bad file or column stops here, before any training
    finetune_task(config.task.kind).read(config, config.task.train_file)
    return config


def run(spec: AblationJob, console: Console | None = None) -> AblationResult:
    """Run every variant × seed not already finished; write the CSV, Markdown table and plot; return the rows."""
    console = console or Console(stderr=True)
    progress = spec.progress
    plan, budget = make_plan(spec)
    finetune = _finetune_config(spec)
    seeds: list[int | None] = list(spec.seeds) or [None]  # None: each variant's own train.seed
    if len(set(seeds)) != len(seeds):
        raise BertkitError(f"--seed: a seed is repeated ({', '.join(map(str, seeds))})")
    if spec.seeds and "train.seed" in plan.varied:
        raise BertkitError("--seed and --vary seed=…: give one of them (--vary seed=1,2 makes the seeds variants)")
    out = Path(spec.out)
    if out.exists() and not out.is_dir():
        raise BertkitError(f"{out}: exists and is not a directory")
    refuse_nested(out)
    if out.is_dir() and any(out.iterdir()) and not _is_ablation(out):  # a run, an index, a folder of the user's
        raise BertkitError(f"{out}: exists and is not an ablation folder (no plan.json of `bertkit ablate`); choose "
                           "another -o")
    record = json.loads(json.dumps({
        "recipe": spec.recipe, "base": plan.base.to_dict(), "budget": {"kind": budget.kind, "amount": budget.amount},
        "task": spec.task,
        "finetune": finetune.to_dict() if finetune else None}))
    if any((out / "variants").glob(f"*/seed-*/{RESULT_FILE}")):  # nothing finished yet: nothing to mix up
        check_plan_file(out / "plan.json", record)
    out.mkdir(parents=True, exist_ok=True)
    _write_json(out / "plan.json", {**record, "seeds": seeds, "varied": plan.varied, "grid": spec.grid})
    runnable = [v for v in plan.variants if v.config is not None]
    console.print(f"ablation: {len(plan.variants)} variants ({len(runnable)} valid) × {len(seeds)} seed(s), budget "
                  f"{budget.text} ({budget.kind}) each, task {spec.task}; writing {out}")
    for name, twin in plan.same:
        console.print(f"{name}: the same config as {twin}, run once")
    for variant in plan.variants:  # said before any training: a typo should not wait for the base's budget
        if variant.config is None:
            console.print(f"[yellow]{variant.name}: invalid, skipped: {variant.invalid}")
    rows: list[dict] = []
    total, done = len(runnable) * len(seeds), 0
    for variant in plan.variants:
        for given in seeds:
            seed = given if given is not None else (variant.config or plan.base).train.seed
            if variant.config is None:
                rows.append(_row(variant, seed, "invalid", message=variant.invalid))
                continue
            done += 1
            rows.append(_run_one(variant, seed, budget, finetune, out, done, total, progress, console))
            write_report(out, rows, spec.task)  # after every variant: a long ablation shows its table as it grows
    paths = write_report(out, rows, spec.task)
    sizes = [r["downstream_examples"] for r in rows if r.get("downstream_examples") is not None]
    if sizes and min(sizes) < FEW_DOWNSTREAM:
        console.print(f"[yellow]warning: the downstream scores come from {min(sizes):,} validation examples: too few "
                      "to tell variants apart (a larger --finetune-set task.validation_split, or a "
                      "task.validation_file)")
    console.print(f"wrote {', '.join(str(p) for p in paths)}")
    return AblationResult(rows, list(paths))


def _row(variant: Variant, seed: int, status: str, message: str | None = None, **values) -> dict:
    row = {column: None for column in COLUMNS}
    row.update(variant=variant.name, changes=" ".join(variant.changes), seed=seed, status=status, message=message,
               **values)
    return row


def _run_one(variant: Variant, seed: int, budget: Budget, finetune: Config | None, out: Path, index: int,
             total: int, progress: bool, console: Console) -> dict:
    """Train (and finetune) one variant with one seed, or reuse its finished result."""
    folder = variant_folder(out, variant, seed)
    result_file = folder / RESULT_FILE
    if result_file.is_file():
        try:
            row = json.loads(result_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            row = {}
        if row.get("changes") == " ".join(variant.changes) and row.get("seed") == seed:
            console.print(f"[{index}/{total}] {variant.name} (seed {seed}): finished earlier, reused")
            return row
    if folder.exists():
        console.print(f"[yellow][{index}/{total}] {variant.name} (seed {seed}): unfinished earlier, starting again")
        shutil.rmtree(folder)
    console.rule(f"[bold][{index}/{total}] {variant.name} (seed {seed})")
    config = Config.from_dict(apply_overrides(variant.config.to_dict(), [
        *budget.overrides(tokens_per_step(variant.config)), f"train.seed={seed}"]))
    try:
        result = pretrain_job.run(PretrainJob(config, folder / "pretrain", progress=progress), console=console)
        evaluation, seconds = result.evaluation, result.step_seconds or 0.0  # a fresh run: always timed
        row = _row(variant, seed, "ok", params=_backbone_params(folder / "pretrain"), steps=result.step,
                   tokens=result.step * tokens_per_step(config), train_seconds=round(seconds, 2),
                   val_loss=evaluation.get("val_loss"), val_accuracy=evaluation.get("val_accuracy"))
        row["tokens_per_s"] = round(row["tokens"] / max(seconds, 1e-9), 1)
        if finetune is not None:
            seeded = dataclasses.replace(finetune, train=dataclasses.replace(finetune.train, seed=seed))
            tuned = finetune_job.run(FinetuneJob(seeded, folder / "pretrain", folder / "finetune", progress=progress),
                                     console=console)
            row.update(downstream_metric=tuned.metric, downstream=tuned.score,
                       downstream_examples=tuned.validation.get("examples"))
    except BertkitError as exc:  # a combination the job refuses (e.g. block_size > max_len): reported, not fatal
        if not variant.changes:  # ... unless it is the base recipe itself: then nothing can be compared
            raise
        console.print(f"[yellow]{variant.name}: invalid: {exc}")
        return _row(variant, seed, "invalid", message=str(exc))
    except Exception as exc:  # noqa: BLE001  a variant that breaks (diverges, runs out of memory) is a result too
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
        console.print(f"[red]{variant.name}: failed: {type(exc).__name__}: {exc} (traceback in {folder}/error.txt)")
        return _row(variant, seed, "failed", message=f"{type(exc).__name__}: {exc}")
    _write_json(result_file, row)  # last: its presence means "finished"
    return row


def _is_ablation(out: Path) -> bool:
    """A folder `bertkit ablate` wrote: its plan.json names a recipe, a budget and the varied keys."""
    try:
        plan = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(plan, dict) and {"recipe", "budget", "varied"} <= set(plan)


def _write_json(path: Path, data: dict) -> None:
    """Write JSON through a temporary file and a rename: a reader never sees half of it."""
    with atomic_file(path, overwrite=True) as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _backbone_params(run: Path) -> int:
    """Parameters of the backbone (embeddings and blocks; heads excluded: they are not what an ablation varies)."""
    counts = Model(load_config(run).model).parameter_counts()
    return counts["total"]
