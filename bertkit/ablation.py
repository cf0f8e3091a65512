"""Ablation plans: which variants of a base recipe to train, and under what budget.

`--vary KEY=V1,V2,…` names a config key (as `--set` does: `positions` or `model.positions`) and its values. By
default each variant changes one key from the base recipe (values equal to the base's are the base itself and not
repeated); `grid=True` crosses every key's values. A variant whose config is invalid (rotary positions with an odd
head size, say) is kept in the plan with the reason, so the report can list it instead of the run crashing.

A budget is the same for every variant: wall-clock time (`5m`, `90s`, `1h`: the schedule is fitted to it, so a
slower variant trains on fewer tokens), tokens (`2Mtok`, `500ktok`: every variant sees the same data), or
optimiser steps (`300steps`).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from bertkit.config import Config, parse_duration
from bertkit.errors import BertkitError, ConfigError
from bertkit.recipes import resolve_key
from bertkit.run.metrics import read_metrics

_AMOUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgb]?)\s*(tok|tokens|steps?)\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}
# one row of ablation.csv: a variant-seed
COLUMNS = ("variant", "changes", "seed", "status", "params", "steps", "tokens", "train_seconds", "tokens_per_s",
           "val_loss", "val_accuracy", "downstream_metric", "downstream", "downstream_examples", "message")
FEW_DOWNSTREAM = 100  # validation examples below which a downstream score is said to be too few to compare


@dataclass(frozen=True)
class Budget:
    """What every variant gets: `kind` time (seconds) | tokens | steps, and the amount."""

    kind: str
    amount: float
    text: str

    @classmethod
    def parse(cls, text: str, option: str = "--budget", tokens: bool = True) -> Budget:
        """'5m' / '90s' / '1.5h' (time), '2Mtok' / '500k tokens' (tokens; unless `tokens` is False), '300steps'
        (optimiser steps). Errors name `option`, and suggest only the kinds it takes."""
        match = _AMOUNT.match(str(text))
        if match:
            amount = float(match.group(1)) * _SCALE[match.group(2).lower()]
            kind = "steps" if match.group(3).lower().startswith("step") else "tokens"
            if kind == "tokens" and not tokens:
                raise BertkitError(f"{option} {text!r}: give a time (2m) or steps (200steps), not tokens")
            if amount < 1:
                raise BertkitError(f"{option} {text!r}: must be at least 1 {kind[:-1]}")
            return cls(kind, amount, str(text))
        number = str(text).strip()
        if re.fullmatch(r"[0-9]*\.?[0-9]+", number):  # seconds to `--max-time`, but here steps (or tokens) too
            raise BertkitError(f"{option} {text!r}: a number alone is ambiguous; write {number}s (seconds), "
                               f"{number}steps" + (f" or {number}tok" if tokens else ""))
        if number.endswith("M"):  # "2M" reads as two million, but as a duration it is two minutes
            raise BertkitError(f"{option} {text!r}: ambiguous; write {number[:-1]}m for minutes"
                               + (f" or {number}tok for tokens" if tokens else ""))
        try:
            return cls("time", parse_duration(text, option), str(text))
        except ConfigError:
            raise BertkitError(f"{option} {text!r}: expected a time (90s, 5m, 1h), "
                               + ("tokens (2Mtok, 500ktok) or " if tokens else "") + "steps (300steps)") from None

    def overrides(self, tokens_per_step: int) -> list[str]:
        """`--set` overrides that impose the budget on a recipe whose optimiser step consumes `tokens_per_step`."""
        if self.kind == "time":  # time decides: the step cap is out of the way
            return [f"train.max_time={self.amount}s", "train.max_steps=1000000000", "train.epochs=none"]
        steps = self.amount if self.kind == "steps" else math.ceil(self.amount / tokens_per_step)
        return [f"train.max_steps={max(1, int(steps))}", "train.max_time=none", "train.epochs=none"]


@dataclass(frozen=True)
class Variant:
    """One configuration of the ablation: its name, the `section.key=value` changes to the base, and its config
    (None with `invalid` saying why, when the combination is not a valid model)."""

    name: str
    changes: tuple[str, ...]
    config: Config | None
    invalid: str | None = None

    @property
    def slug(self) -> str:
        """A directory name for the variant: its name, or where that had to be cleaned or cut, the cleaned name
        plus a hash of the changes (two variants never share a directory)."""
        plain = re.sub(r"[^A-Za-z0-9_.=+-]", "_", self.name)
        if plain == self.name and len(plain) <= 100:
            return plain
        return f"{plain[:80]}-{hashlib.sha1(' '.join(self.changes).encode()).hexdigest()[:8]}"


@dataclass
class Plan:
    """The base recipe's config, the keys varied with their values, and the variants to run (base first)."""

    base: Config
    varied: dict[str, list[str]]
    variants: list[Variant] = field(default_factory=list)
    same: list[tuple[str, str]] = field(default_factory=list)  # (variant left out, the one it equals): said


def parse_vary(items: list[str]) -> dict[str, list[str]]:
    """['positions=learned,rotary', …] -> {'model.positions': ['learned', 'rotary'], …}; errors name the flag."""
    varied: dict[str, list[str]] = {}
    for item in items:
        if "=" not in item:
            raise BertkitError(f"--vary {item!r}: expected KEY=VALUE1,VALUE2,… (e.g. positions=learned,rotary)")
        key, raw = (s.strip() for s in item.split("=", 1))
        section, name = resolve_key(key, "--vary")
        dotted = f"{section}.{name}"
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not values:
            raise BertkitError(f"--vary {key}: no values")
        if dotted in varied:
            raise BertkitError(f"--vary {dotted}: given twice (list every value in one --vary)")
        if len(set(values)) != len(values):
            raise BertkitError(f"--vary {dotted}: a value is repeated ({raw})")
        varied[dotted] = values
    if not varied:
        raise BertkitError("--vary: give at least one KEY=VALUE1,VALUE2,…")
    return varied


def build_plan(load: callable, varied: dict[str, list[str]], grid: bool) -> Plan:
    """Variants of the base config `load([])`; `load(changes)` builds the config with `section.key=value` changes
    (raising ConfigError / BertkitError for an invalid one)."""
    base = load([])
    for dotted in varied:  # an unknown key is the user's mistake in the flag, not an invalid variant
        section, name = dotted.split(".", 1)
        if not hasattr(getattr(base, section), name):
            raise BertkitError(f"--vary {dotted}: unknown key")

    def make(changes: tuple[str, ...]) -> Variant:
        name = "+".join(_short(c) for c in changes) or "base"
        try:
            return Variant(name, changes, load(list(changes)))
        except (ConfigError, BertkitError) as exc:
            return Variant(name, changes, None, str(exc))

    options = [[f"{key}={value}" for value in values] for key, values in varied.items()]
    if grid:
        changes = list(itertools.product(*options))
    else:
        changes = [(option,) for key_options in options for option in key_options]
    plan = Plan(base, varied, [Variant("base", (), base)])
    for variant in map(make, changes):
        # a value equal to the base's gives the base itself, already first; one spelled otherwise than another
        # (1e-3, 0.001) the same variant: run once, and said (it trained twice, shown as two rows)
        twin = next((v for v in plan.variants if variant.config is not None and v.config == variant.config), None)
        if twin is None:
            plan.variants.append(variant)
        else:
            plan.same.append((variant.name, twin.name))
    return plan


# Keys two sections shared before issue 17's config step: their variants were named with the section, and stay so
# that a variant finished then is found again.
FORMERLY_SHARED = ("dropout", "pooling", "max_length", "validation_fraction")


def _short(change: str) -> str:
    """'model.positions=rotary' -> 'positions=rotary' ('model.dropout=0' stays whole: FORMERLY_SHARED)."""
    rest = change.split(".", 1)[1]
    return change if rest.split("=", 1)[0] in FORMERLY_SHARED else rest


def check_plan_file(path: Path, plan_record: dict) -> None:
    """An ablation directory belongs to one base, budget and task: resuming with another would mix numbers that
    cannot be compared. New variants may be added to it."""
    import json

    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise BertkitError(f"{path}: unreadable; use another --out") from None
    for key in ("base", "finetune"):  # a plan written before a config key moved compares in today's shape
        if isinstance(old.get(key), dict):
            try:
                old[key] = json.loads(json.dumps(Config.from_dict(old[key], stored=True).to_dict()))
            except ConfigError:
                pass  # not a config this bertkit reads: it differs, and the message below says where
    for key in ("base", "budget", "task", "finetune"):
        if old.get(key) != plan_record.get(key):
            detail = _first_difference(old.get(key), plan_record.get(key))
            raise BertkitError(f"{path.parent}: holds an ablation with a different {key}{detail}; use another --out "
                               "(finished variants are reused only under the same base recipe, budget and task)")


def _first_difference(old, new, prefix: str = "") -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                return _first_difference(old.get(key), new.get(key), f"{prefix}{key}.")
        return ""
    return f" ({prefix.rstrip('.') or 'value'}: {old!r} there, {new!r} now)"


# ------------------------------------------------------------------------------------------- results

def variant_folder(out: Path, variant: Variant, seed: int) -> Path:
    """Where one variant-seed's runs live: OUT/variants/<slug>/seed-<s>/ (pretrain/, finetune/, result.json)."""
    return out / "variants" / variant.slug / f"seed-{seed}"


def row_variant(row: dict) -> Variant:
    """The variant a CSV row belongs to (its name and changes; enough to find its directory)."""
    return Variant(row["variant"], tuple(row["changes"].split()) if row["changes"] else (), None)


def eval_curve(run: Path, tokens_per_step_: int) -> list[tuple[float, float]]:
    """(tokens seen, validation loss) at every evaluation of a pretraining run."""
    return [(r["step"] * tokens_per_step_, r["val_loss"]) for r in read_metrics(run)
            if r.get("kind") == "eval" and "val_loss" in r]


def summarise(rows: list[dict]) -> list[dict]:
    """Per variant (plan order): mean and standard deviation over its finished seeds, and each finished seed's
    validation loss (`seed_losses`: a Δ against the base pairs the seeds both finished)."""
    by_variant: dict[str, list[dict]] = {}
    for row in rows:
        by_variant.setdefault(row["variant"], []).append(row)
    out = []
    for name, group in by_variant.items():
        ok = [r for r in group if r["status"] == "ok"]
        entry = {"variant": name, "changes": group[0]["changes"], "seeds": len(ok), "status":
                 "ok" if ok else group[0]["status"], "message": None if ok else group[0]["message"]}
        for key in ("params", "tokens", "tokens_per_s", "val_loss", "val_accuracy", "downstream"):
            values = [r[key] for r in ok if r.get(key) is not None]
            entry[key] = statistics.fmean(values) if values else None
            entry[f"{key}_std"] = statistics.stdev(values) if len(values) > 1 else None
        entry["downstream_metric"] = next((r["downstream_metric"] for r in ok if r.get("downstream_metric")), None)
        entry["seed_losses"] = {r["seed"]: r["val_loss"] for r in ok if r.get("val_loss") is not None}
        out.append(entry)
    return out
