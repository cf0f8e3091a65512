"""Recipes: named TOML files (recipes/ in a checkout, bertkit/_recipes in the wheel) read into a `Config`, and the
`--set section.key=value` overrides the CLI and `bertkit ablate --vary` apply to them. `config.py` holds the typed
dataclasses and their validation; this module is the text around them (so nn/ depends only on the dataclasses)."""

from __future__ import annotations

import dataclasses
import re
import tomllib
import typing
from pathlib import Path
from typing import Any

from bertkit.config import BUDGET_STEPS, DERIVED_MODEL_KEYS, MOVED, Config, TrainConfig, means_none, section_type
from bertkit.errors import ConfigError, suggest

def recipe_dirs() -> list[Path]:
    """Where named recipes live: the checkout's recipes/ (editable installs) or the copy inside the wheel."""
    package = Path(__file__).resolve().parent  # bertkit/
    return [d for d in (package.parent / "recipes", package / "_recipes") if d.is_dir()]


def list_recipes() -> dict[str, Path]:
    """Every named recipe: name -> path (first directory wins)."""
    found: dict[str, Path] = {}
    for directory in recipe_dirs():
        for path in sorted(directory.glob("*.toml")):
            found.setdefault(path.stem, path)
    return found


def describe_recipe(name: str, path: Path) -> str:
    """A recipe's one-sentence description: the first sentence of its opening comment, whose lines it may span
    ("# NAME: what it is. ..."), without the NAME: prefix."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    text = " ".join(lines).removeprefix(f"{name}:").strip()
    # a period before a space ends it; "2.5", "et al. ", "e.g. ", "vs. " do not
    end = re.search(r"(?<!\bal)(?<!\bvs)(?<!e\.g)(?<!i\.e)\.(\s|$)", text)
    return text[:end.start() + 1] if end else text


def model_recipes() -> dict[str, Path]:
    """Recipes that define a model (a [model] table); finetuning recipes take theirs from --model."""
    return {name: path for name, path in list_recipes().items() if is_model_recipe(path)}


def resolve_recipe(name_or_path: str | Path) -> Path:
    """A TOML file path, or the name of a bundled recipe (`tiny`, `mini`, …)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    recipes = list_recipes()
    if str(name_or_path) in recipes:
        return recipes[str(name_or_path)]
    raise ConfigError(f"recipe: '{name_or_path}' is neither a file nor a bundled recipe "
                      f"(bundled: {', '.join(recipes) or 'none found'})")


def recipe_tables(name_or_path: str | Path) -> dict[str, Any]:
    """A recipe's TOML as it is (before defaults and overrides); invalid TOML is one error naming the file."""
    path = resolve_recipe(name_or_path)
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"recipe {path}: not valid TOML: {exc}") from None


def is_model_recipe(name_or_path: str | Path) -> bool:
    """Whether a recipe describes a model (it has a [model] table: tiny, mini, …), not only a finetuning task (whose
    model comes from the run it finetunes)."""
    return isinstance(recipe_tables(name_or_path).get("model"), dict)


def load_recipe(name_or_path: str | Path, overrides: list[str] | tuple[str, ...] = (),
                reads: Reads | None = None, layered: bool = False) -> Config:
    """Read a recipe and apply `key=value` overrides. With `reads` (a command and the sections it reads), a table
    or an override of a section the command does not read is an error, not a setting silently ignored. A key
    given twice in `overrides` with different values is an error (which one did the user mean?), unless `layered`:
    the caller put later overrides there to replace earlier ones (ablate's variants and budget over its --set)."""
    path = resolve_recipe(name_or_path)
    overrides = (overrides,) if isinstance(overrides, str) else overrides  # one item, not its characters
    data = recipe_tables(path)
    if not data:  # 0 bytes or only comments: every default, surely not what the file was meant to say
        raise ConfigError(f"{path}: empty recipe (no sections); give a bundled recipe's name or add [model], "
                          "[train], … tables")
    if not layered and (repeated := repeated_overrides(overrides)):
        raise ConfigError(repeated[0])
    if reads is not None:
        for name, value in data.items():
            if isinstance(value, dict) and name not in reads.sections:
                raise ConfigError(f"recipe {path}: [{name}] is not read by {reads.command} (it reads "
                                  f"{reads.listed()})")
            for key in value if isinstance(value, dict) else ():
                if (why := reads.ignored(name, key)) is not None:
                    raise ConfigError(f"recipe {path}: {name}.{key} does nothing in {reads.command}: {why}")
    merged = apply_overrides(data, overrides, reads)
    said = set_keys(overrides)
    if ("train", "max_steps") in said and merged["train"].get("max_steps") is not None \
            and merged["train"].get("epochs") is not None:
        # a step count given replaces the recipe's epochs, as --max-steps does (they won without a word: `glue --set
        # train.max_steps=5` trained 5 epochs); beside epochs given too it would win, or lose: refused
        if ("train", "epochs") in said:
            raise ConfigError("--set train.max_steps and --set train.epochs both set the run's length; give one "
                              "(epochs set the steps, a step count replaces the recipe's epochs)")
        merged["train"]["epochs"] = None
    given = frozenset(f"{name}.{key}" for name, table in merged.items() if isinstance(table, dict)
                      for key, value in table.items() if value is not None)
    return _with_limits(Config.from_dict(merged, source=str(path)), given)


def _with_limits(config: Config, given: frozenset[str]) -> Config:
    """The config with its run's length settled as the CLI settles it, `given` being the dotted keys the recipe,
    its overrides and `with_values` gave: a time budget with no step count and no epochs given ends the run by the
    clock (max_steps BUDGET_STEPS; the default step cap, 1,000, had ended a 30-minute Python run at half its
    budget), and without a budget that lifted cap is the default again. `given` is kept on the config (not a
    field: equality and the stored config ignore it), so that `with_values` can tell a recipe's max_steps from the
    default and a job can refuse a key its command never reads (`check_reads`); a config built otherwise has none,
    and its max_steps is left as it is."""
    train = config.train
    if "train.max_steps" not in given:
        lifted = train.max_time is not None and train.epochs is None
        default = BUDGET_STEPS if lifted else TrainConfig.max_steps
        if train.max_steps != default and train.max_steps in (BUDGET_STEPS, TrainConfig.max_steps):
            config = dataclasses.replace(config, train=dataclasses.replace(train, max_steps=default))
    object.__setattr__(config, "given", given)
    return config


def check_reads(config: Config, reads: Reads) -> None:
    """A config's given keys (a recipe's tables and overrides, `with_values`' keys) checked against what
    `reads.command` reads, as `--set` is checked on the command line: from Python a key the command never reads
    (`model.n_layers` or `train.objective` for a classifier) trained as if it had not been given, and was stored as
    if it had counted. A config without a record of its keys (built otherwise) is not checked."""
    for dotted in sorted(getattr(config, "given", ())):
        section, name = dotted.split(".", 1)
        if section not in reads.sections:
            raise ConfigError(f"{dotted} is not read by {reads.command} (it reads {reads.listed()})")
        if (why := reads.ignored(section, name)) is not None:
            raise ConfigError(f"{dotted} does nothing in {reads.command}: {why}")


@dataclasses.dataclass(frozen=True)
class Reads:
    """A command and the config sections it reads (finetune takes [model] from --model, pretraining has no [task])."""

    command: str
    sections: tuple[str, ...]
    # keys of a read section that this command never reads, and why: refused, not stored as if they had counted
    # (`pretrain --set patience=1` ran without early stopping; a classifier's config.json said `objective: clm`)
    ignores: tuple[tuple[str, str], ...] = ()

    def listed(self) -> str:
        return ", ".join(f"[{name}]" for name in self.sections)

    def ignored(self, section: str, name: str) -> str | None:
        """Why `section.name` does nothing in this command, or None when it is read."""
        return dict(self.ignores).get(f"{section}.{name}")

    def unread(self) -> set[str]:
        """The dotted keys this command never reads: a resume does not compare them (a run written before they were
        refused may hold any value)."""
        return {key for key, _ in self.ignores}

    def check(self, key: str, section: str, name: str) -> None:
        """`--set key` resolved to section.name: an error naming what the command reads, and the key's new name
        where a bare key meant another section's setting before (`MOVED`)."""
        if section in self.sections:
            if (why := self.ignored(section, name)) is not None:
                raise ConfigError(f"--set {key}: {section}.{name} does nothing in {self.command}: {why}")
            return
        moved = [new for old, new in MOVED.items() if old in (key, f"{section}.{name}")
                 or old.split(".", 1)[1] == key and new.split(".")[0] in self.sections]
        hint = f" (did you mean {moved[0]}?)" if moved else ""
        raise ConfigError(f"--set {key}: {section}.{name} is not read by {self.command} (it reads "
                          f"{self.listed()}){hint}")


# The sections each training command reads from its recipe and --set (finetuning takes [model] and [tokenizer] from
# --model; a task model keeps its base's [sentence]; pretraining has no task).
_FINETUNING_ONLY = tuple((f"train.{key}", why) for key, why in (
    ("epochs", "a finetuning setting (pretraining ends at max_steps or max_time)"),
    ("metric", "a finetuning setting (pretraining keeps no best checkpoint)"),
    ("patience", "a finetuning setting (pretraining never stops early)")))
_PRETRAINING_ONLY = tuple((f"train.{key}", f"a pretraining setting ({why})") for key, why in (
    ("objective", "a finetuning's objective is its task"), ("rtd_weight", "objective rtd's"),
    ("contrastive_weight", "the contrastive term's"), ("contrastive_scale", "the contrastive term's"),
    ("contrastive_views", "the contrastive term's")))
PRETRAIN_READS = Reads("pretrain", ("model", "heads", "tokenizer", "data", "train", "sentence"), _FINETUNING_ONLY)
FINETUNE_READS = {
    "classify": Reads("finetune classify", ("task", "heads", "train"), _PRETRAINING_ONLY),
    "regress": Reads("finetune classify --regression", ("task", "heads", "train"), _PRETRAINING_ONLY),
    "ner": Reads("finetune ner", ("task", "train"), _PRETRAINING_ONLY),
    "sentence": Reads("finetune sentence", ("task", "sentence_loss", "sentence", "train"), _PRETRAINING_ONLY),
    "seq2seq": Reads("finetune seq2seq", ("model", "tokenizer", "task", "seq2seq", "train"), _PRETRAINING_ONLY),
}


def repeated_overrides(overrides: list[str] | tuple[str, ...]) -> list[str]:
    """One line per key `overrides` set to different values (`d_model=64 … model.d_model=48`): which values."""
    values: dict[tuple[str, str], list[str]] = {}
    for item in overrides:
        if "=" in item:
            key, raw = (s.strip() for s in item.split("=", 1))
            try:
                values.setdefault(resolve_key(key), []).append(raw)
            except ConfigError:  # apply_overrides reports the bad key itself
                continue
    return [f"--set {section}.{name}: given {len(raws)} times ({', then '.join(raws)}); give each key once"
            for (section, name), raws in values.items() if len(set(raws)) > 1]


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...], reads: Reads | None = None,
                    ) -> dict[str, Any]:
    """Apply `section.key=value` (or `key=value` when the key names one field of one section) to nested dicts.

    Values are parsed as TOML (`64`, `0.1`, `true`, `"x"`); a bare word is a string (`positions=rotary`),
    and `none` clears an optional value.
    """
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, raw = (s.strip() for s in item.split("=", 1))
        section, name = resolve_key(key, "--set")
        if reads is not None:
            reads.check(key, section, name)
        if not isinstance(data.setdefault(section, {}), dict):
            raise ConfigError(f"[{section}] must be a table of key = value")
        data[section][name] = parse_value(section, name, raw)
    return data


def set_keys(overrides: list[str] | tuple[str, ...]) -> dict[tuple[str, str], tuple[str, str]]:
    """(section, key) -> (the key as given, its raw value) of each `--set key=value` (bare keys resolved): what a
    command's --set gave, for the decisions made after `load_recipe` has checked the items (the CLI's; run/ may not
    import recipes, so `run.directory.keep_run_limits` reads train keys by name)."""
    pairs = [[part.strip() for part in item.split("=", 1)] for item in overrides]
    return {resolve_key(key): (key, raw) for key, raw in pairs}


def resolve_key(key: str, what: str = "--set") -> tuple[str, str]:
    """`section.key` or a bare `key` -> (section, key). A bare key names one field of one section (no two sections
    share a field name: tests/test_config.py). Errors name the key and suggest a close one."""
    sections = {f.name: section_type(Config, f.name) for f in dataclasses.fields(Config)}
    if "." in key:
        section, name = key.split(".", 1)
        if section not in sections:
            raise ConfigError(f"{what} {key}: unknown section '{section}' (allowed: {', '.join(sections)})")
        # checked here, so that the error names the flag the key came from, not the recipe it was applied to
        if key in MOVED:
            raise ConfigError(f"{what} {key}: {key} is now {MOVED[key]}")
        fields = {f.name for f in dataclasses.fields(sections[section])}
        if name not in fields:
            raise ConfigError(f"{what} {key}: unknown key{suggest(name, fields)}")
        return section, name
    owners = [s for s, cls in sections.items() if key in {f.name for f in dataclasses.fields(cls)}]
    if not owners:
        moved = [new for old, new in MOVED.items() if old.split(".", 1)[1] == key]
        if moved:
            raise ConfigError(f"{what} {key}: unknown key (now {' or '.join(moved)})")
        every = sorted(f"{s}.{f.name}" for s, cls in sections.items() for f in dataclasses.fields(cls))
        raise ConfigError(f"{what} {key}: unknown key{suggest(key, [k.split('.', 1)[1] for k in every])}")
    return owners[0], key


def parse_value(section: str, name: str, raw: str) -> Any:
    """A command-line value for `section.name`, parsed as TOML (`64`, `0.1`, `true`); a bare word is a string and
    `none` clears an optional key."""
    sections = {f.name: section_type(Config, f.name) for f in dataclasses.fields(Config)}
    return _parse_value(raw, _is_optional(sections[section], name), _is_text(sections[section], name))


def _is_optional(section_cls: type, name: str) -> bool:
    hint = typing.get_type_hints(section_cls).get(name)
    return type(None) in typing.get_args(hint)


def _is_text(section_cls: type, name: str) -> bool:
    """Whether `section.name` holds text (str, or str | None): `--set max_time=45` or `text_column=5` is that text,
    as `--max-time 45` and `--text-column 5` are, not the number TOML would read."""
    hint = typing.get_type_hints(section_cls).get(name)
    return hint is str or set(typing.get_args(hint)) == {str, type(None)}


def _parse_value(raw: str, optional: bool, text: bool = False) -> Any:
    if optional and means_none(raw):
        return None
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
    return raw.strip() if text and isinstance(value, (int, float)) and not isinstance(value, bool) else value


def with_values(config: Config, values: dict[str, Any]) -> Config:
    """Replace `section.key` values (a bare key where it is unique; skipping None, i.e. "not given on the command
    line"), re-validating, as the command's options would: `"none"` clears an optional value (as `--set key=none`
    does), a step count replaces the recipe's epochs (as `--max-steps` does; both at once is an error), and a time
    budget given where nothing gives a step count ends the run by the clock (as `--max-time` does). An unknown key
    is a ConfigError naming it, as `--set`'s are (not dataclasses' TypeError)."""
    sections: dict[str, dict[str, Any]] = {}
    for dotted, value in values.items():
        if value is None:
            continue
        section, key = resolve_key(dotted, "with_values:")
        if isinstance(value, str) and means_none(value) and _is_optional(section_type(Config, section), key):
            value = None  # cleared, as --set key=none clears it
        sections.setdefault(section, {})[key] = value
    train = sections.get("train", {})
    if train.get("max_steps") is not None:
        if train.get("epochs") is not None:
            raise ConfigError("with_values: train.max_steps and train.epochs both set the run's length; give one "
                              "(epochs set the steps, a step count replaces the recipe's epochs)")
        train.setdefault("epochs", None)
    # a key the config derived (n_kv_heads from n_heads, d_ff from d_model, n_decoder_layers from n_layers) is
    # derived again, so it follows a changed source as --set's does; one the recipe gave stays. The built value was
    # kept: `n_heads: 8` gave attention with 4 kv heads and the old FFN width
    if "model" in sections:
        for key in DERIVED_MODEL_KEYS:
            if key in getattr(config.model, "derived", ()) and key not in sections["model"]:
                sections["model"][key] = None
    updated = {name: dataclasses.replace(getattr(config, name), **changes) for name, changes in sections.items()}
    given = getattr(config, "given", None)
    result = dataclasses.replace(config, **updated)
    if given is None:  # a config not read by load_recipe: whether its max_steps was given is not known
        return result
    return _with_limits(result, given | {f"{section}.{key}" for section, changes in sections.items()
                                         for key, value in changes.items() if value is not None})
