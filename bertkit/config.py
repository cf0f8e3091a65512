"""Typed, frozen configs read from TOML recipes, with `--set key=value` overrides.

One vocabulary in code, TOML and CLI: the field names below are the recipe keys and the `--set` keys. Every
error a user can make (unknown key, wrong type, unknown choice, invalid combination) raises `ConfigError` whose
message names the key and, for choices, the allowed values.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bertkit.errors import ConfigError

Architecture = Literal["encoder", "decoder", "encoder-decoder"]
Norm = Literal["layernorm", "rmsnorm"]
NormPosition = Literal["post", "pre"]
Activation = Literal["relu", "gelu", "swiglu"]
Positions = Literal["learned", "sinusoidal", "relative", "rotary", "none"]


@dataclass(frozen=True)
class ModelConfig:
    """The transformer: which stack, its sizes, and every switch the classic lectures teach.

    `None` for `n_kv_heads`, `d_ff` and `n_decoder_layers` means "derive" (n_heads, 4 * d_model, n_layers); the
    derived value is filled in at construction so saved configs always show real numbers.
    """

    architecture: Architecture = "encoder"
    vocab_size: int = 16000
    d_model: int = 256
    n_layers: int = 4
    n_decoder_layers: int | None = None  # encoder-decoder only
    n_heads: int = 4
    n_kv_heads: int | None = None  # == n_heads: MHA; 1: MQA; in between: GQA
    d_ff: int | None = None
    max_len: int = 512
    type_vocab_size: int = 2  # segment (token type) embeddings; 0 disables them
    dropout: float = 0.1  # embeddings and every sublayer output before the residual add
    attention_dropout: float = 0.1  # on the attention weights
    norm: Norm = "layernorm"
    norm_eps: float = 1e-12
    norm_position: NormPosition = "post"
    embedding_norm: bool = True  # BERT normalises the summed embeddings
    scale_embeddings: bool = False  # Vaswani et al.: token embeddings times sqrt(d_model) before adding positions
    activation: Activation = "gelu"
    bias: bool = True  # biases in attention and FFN projections
    positions: Positions = "learned"
    max_distance: int = 16  # relative positions: offsets are clipped to [-max_distance, max_distance]
    rotary_base: float = 10000.0
    share_embeddings: bool = True  # encoder-decoder: one token embedding for source and target
    pooler: bool = False  # BERT's dense+tanh pooler over [CLS] (kept for Hugging Face round trips)
    pad_token_id: int = 0
    init_std: float = 0.02

    def __post_init__(self) -> None:
        _check_types(self, "model")
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)
        if self.n_decoder_layers is None:
            object.__setattr__(self, "n_decoder_layers", self.n_layers)
        for key in ("vocab_size", "d_model", "n_layers", "n_decoder_layers", "n_heads", "n_kv_heads", "d_ff",
                    "max_len", "max_distance"):
            if getattr(self, key) < 1:
                raise ConfigError(f"model.{key}: must be >= 1, got {getattr(self, key)}")
        for key in ("type_vocab_size", "pad_token_id"):
            if getattr(self, key) < 0:
                raise ConfigError(f"model.{key}: must be >= 0, got {getattr(self, key)}")
        for key in ("dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, key) < 1.0:
                raise ConfigError(f"model.{key}: must be in [0, 1), got {getattr(self, key)}")
        for key in ("norm_eps", "rotary_base", "init_std"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"model.{key}: must be > 0, got {getattr(self, key)}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model: {self.d_model} is not divisible by model.n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ConfigError(
                f"model.n_kv_heads: model.n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads} "
                f"(allowed: a divisor of {self.n_heads})")
        if self.positions == "rotary" and self.d_head % 2:
            raise ConfigError(f"model.positions: rotary needs an even head size, got d_model/n_heads={self.d_head}")
        if self.pad_token_id >= self.vocab_size:
            raise ConfigError(f"model.pad_token_id: {self.pad_token_id} is outside vocab_size={self.vocab_size}")
        if self.pooler and self.architecture != "encoder":
            raise ConfigError("model.pooler: only an encoder has a [CLS] pooler")

    @property
    def d_head(self) -> int:
        """Size of one attention head."""
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class Config:
    """A whole recipe: one section per concern. Later jobs add their sections (data, train, …) here."""

    model: ModelConfig = field(default_factory=ModelConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict (TOML/JSON-serialisable)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "config") -> Config:
        """Build from nested dicts; unknown sections and keys are errors that name them."""
        sections = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for name, value in data.items():
            if name not in sections:
                raise ConfigError(f"{source}: unknown section [{name}]{_suggest(name, sections)} "
                                  f"(allowed: {', '.join(sections)})")
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: [{name}] must be a table of key = value")
            kwargs[name] = _build_section(_section_type(cls, name), value, name)
        return cls(**kwargs)


def _section_type(cls: type, name: str) -> type:
    return typing.get_type_hints(cls)[name]


def _build_section(section_cls: type, values: dict[str, Any], prefix: str):
    known = {f.name for f in dataclasses.fields(section_cls)}
    for key in values:
        if key not in known:
            raise ConfigError(f"{prefix}.{key}: unknown key{_suggest(key, known)}")
    return section_cls(**values)


def _suggest(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _check_types(obj: Any, prefix: str) -> None:
    """Check every field's value against its annotation; messages name the key and the allowed values."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        key = f"{prefix}.{f.name}"
        expected = hints[f.name]
        optional = False
        if typing.get_origin(expected) in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(expected) if a is not type(None)]
            optional = len(args) < len(typing.get_args(expected))
            expected = args[0]
        if value is None:
            if optional:
                continue
            raise ConfigError(f"{key}: a value is required")
        if typing.get_origin(expected) is Literal:
            allowed = typing.get_args(expected)
            if value not in allowed:
                raise ConfigError(f"{key}: {value!r} is not allowed (allowed: {'|'.join(allowed)})")
        elif expected is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{key}: expected true or false, got {value!r}")
        elif expected is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{key}: expected an integer, got {value!r}")
        elif expected is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{key}: expected a number, got {value!r}")
            object.__setattr__(obj, f.name, float(value))
        elif expected is str:
            if not isinstance(value, str):
                raise ConfigError(f"{key}: expected a string, got {value!r}")


# ----------------------------------------------------------------------------------------------------- recipes

def recipe_dirs() -> list[Path]:
    """Where named recipes live: the checkout's recipes/ (editable installs) or the copy inside the wheel."""
    package = Path(__file__).resolve().parent
    return [d for d in (package.parent / "recipes", package / "_recipes") if d.is_dir()]


def list_recipes() -> dict[str, Path]:
    """Every named recipe: name -> path (first directory wins)."""
    found: dict[str, Path] = {}
    for directory in recipe_dirs():
        for path in sorted(directory.glob("*.toml")):
            found.setdefault(path.stem, path)
    return found


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
    sections = {f.name: _section_type(Config, f.name) for f in dataclasses.fields(Config)}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected key=value")
        key, raw = (s.strip() for s in item.split("=", 1))
        if "." in key:
            section, name = key.split(".", 1)
            if section not in sections:
                raise ConfigError(f"--set {key}: unknown section '{section}' (allowed: {', '.join(sections)})")
        else:
            owners = [s for s, cls in sections.items() if key in {f.name for f in dataclasses.fields(cls)}]
            if len(owners) != 1:
                every = sorted(f"{s}.{f.name}" for s, cls in sections.items() for f in dataclasses.fields(cls))
                hint = _suggest(key, [k.split(".", 1)[1] for k in every])
                raise ConfigError(f"--set {key}: unknown key{hint}" if not owners else
                                  f"--set {key}: ambiguous, say one of {', '.join(f'{o}.{key}' for o in owners)}")
            section, name = owners[0], key
        data.setdefault(section, {})[name] = _parse_value(raw)
    return data


def _parse_value(raw: str) -> Any:
    if raw.lower() in ("none", "null"):
        return None
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
