"""Recipes: named TOML files (recipes/ in a checkout, bertkit/_recipes in the wheel) read into a `Config`, and the
`--set section.key=value` overrides the CLI and `bertkit ablate --vary` apply to them. `config.py` holds the typed
dataclasses and their validation; this module is the text around them (so nn/ depends only on the dataclasses)."""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from pathlib import Path
from typing import Any

from bertkit.config import Config, section_type, suggest
from bertkit.errors import ConfigError

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


def model_recipes() -> dict[str, Path]:
    """Recipes that define a model (a [model] table); finetuning recipes take theirs from --model."""
    return {name: path for name, path in list_recipes().items()
            if "model" in tomllib.loads(path.read_text(encoding="utf-8"))}


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


def load_recipe(name_or_path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a recipe and apply `key=value` overrides."""
    path = resolve_recipe(name_or_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"recipe {path}: not valid TOML: {exc}") from None
    return Config.from_dict(apply_overrides(data, overrides), source=str(path))


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Apply `section.key=value` (or `key=value` when the key names one field of one section) to nested dicts.

    Values are parsed as TOML (`64`, `0.1`, `true`, `"x"`); a bare word is a string (`positions=rotary`),
    and `none` clears an optional value.
    """
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    in_recipe = {name for name, value in data.items() if isinstance(value, dict)}  # before any override adds one
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, raw = (s.strip() for s in item.split("=", 1))
        section, name = resolve_key(key, in_recipe, "--set")
        if not isinstance(data.setdefault(section, {}), dict):
            raise ConfigError(f"[{section}] must be a table of key = value")
        data[section][name] = parse_value(section, name, raw)
    return data


def resolve_key(key: str, in_recipe: set[str] | frozenset[str] = frozenset(), what: str = "--set",
                ) -> tuple[str, str]:
    """`section.key` or a bare `key` -> (section, key). A bare key must name one field of one section; where two
    sections share it (`dropout`: model and task) it means the one section the recipe has a table for
    (`in_recipe`). Errors name the key and suggest a close one."""
    sections = {f.name: section_type(Config, f.name) for f in dataclasses.fields(Config)}
    if "." in key:
        section, name = key.split(".", 1)
        if section not in sections:
            raise ConfigError(f"{what} {key}: unknown section '{section}' (allowed: {', '.join(sections)})")
        return section, name
    owners = [s for s, cls in sections.items() if key in {f.name for f in dataclasses.fields(cls)}]
    if len(owners) > 1:
        # `dropout` is both model.dropout and task.dropout: a bare key means the one section the recipe
        # itself has a table for (a pretraining recipe has [model], a finetuning recipe [task]).
        tables = [s for s in owners if s in in_recipe]
        owners = tables if len(tables) == 1 else owners
    if len(owners) != 1:
        every = sorted(f"{s}.{f.name}" for s, cls in sections.items() for f in dataclasses.fields(cls))
        hint = suggest(key, [k.split(".", 1)[1] for k in every])
        raise ConfigError(f"{what} {key}: unknown key{hint}" if not owners else
                          f"{what} {key}: ambiguous, say one of {', '.join(f'{o}.{key}' for o in owners)}")
    return owners[0], key


def parse_value(section: str, name: str, raw: str) -> Any:
    """A command-line value for `section.name`, parsed as TOML (`64`, `0.1`, `true`); a bare word is a string and
    `none` clears an optional key."""
    sections = {f.name: section_type(Config, f.name) for f in dataclasses.fields(Config)}
    return _parse_value(raw, _is_optional(sections[section], name))


def _is_optional(section_cls: type, name: str) -> bool:
    hint = typing.get_type_hints(section_cls).get(name)
    return type(None) in typing.get_args(hint)


def _parse_value(raw: str, optional: bool) -> Any:
    if optional and raw.lower() in ("none", "null"):
        return None
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def with_values(config: Config, values: dict[str, Any]) -> Config:
    """Replace `section.key` values (skipping None, i.e. "not given on the command line"), re-validating."""
    sections: dict[str, dict[str, Any]] = {}
    for dotted, value in values.items():
        if value is None:
            continue
        section, key = dotted.split(".", 1)
        sections.setdefault(section, {})[key] = value
    updated = {name: dataclasses.replace(getattr(config, name), **changes) for name, changes in sections.items()}
    return dataclasses.replace(config, **updated)
