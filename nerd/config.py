"""YAML configuration loaded into validated dataclasses.

Every component (env, model, dataset, training, evaluation) declares its options as a ``@dataclass``.
:func:`load_config` reads YAML into such a class and rejects unknown keys and wrong types with an error
naming the dotted key, so a typo in a config file fails at load time instead of being silently ignored.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from nerd.errors import UserError, first_line

T = TypeVar("T")


class ConfigError(UserError):
    """A configuration file or override is invalid; the message names the offending key."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against the annotation ``tp`` and return it (ints widen to float)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [option for option in args if option is not type(None)]
        if len(options) == 1:
            # An optional value: the one type's own error names the key inside it (e.g. a section's field).
            return _coerce(value, options[0], key)
        for option in args:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, key)
            except ConfigError:
                continue
        raise ConfigError(f"config key '{key}': expected {_type_name(tp)}, got {value!r}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"config key '{key}': expected one of {list(args)}, got {value!r}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{key}': expected a list, got {value!r}")
        item_tp = args[0] if args else Any
        items = [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {value!r}")
        val_tp = args[1] if len(args) == 2 else Any
        return {k: _coerce(v, val_tp, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, prefix=key)
    if tp is float:
        if isinstance(value, str):
            # PyYAML (YAML 1.1) reads 1e-3 (no dot) as a string; accept any finite decimal number written so.
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"config key '{key}': expected a number, got {value!r}") from None
            if not math.isfinite(value):
                raise ConfigError(f"config key '{key}': expected a finite number, got {value!r}")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config key '{key}': expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key '{key}': expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{key}': expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"config key '{key}': expected a string, got {value!r}")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"config key '{key}': expected {_type_name(tp)}, got {value!r}")
    return value


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build the dataclass ``cls`` from a mapping, validating keys and types recursively.

    Args:
        cls: A dataclass type.
        data: Mapping of field names to values (as read from YAML).
        prefix: Dotted path of ``data`` inside the whole config, used in error messages.

    Raises:
        ConfigError: On an unknown key, a missing required key or a value of the wrong type.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config section '{prefix or cls.__name__}' must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    retired = getattr(cls, "RETIRED_KEYS", {})
    for name in set(data) & set(retired) - set(fields):
        where = f"{prefix}." if prefix else ""
        if data[name] != retired[name]:
            raise ConfigError(f"config key '{where}{name}' was removed (measured as no help, docs/findings.md); "
                              f"delete it")
        # A record of a run from before the removal: the key held its no-op value, so it changes nothing.
        data = {k: v for k, v in data.items() if k != name}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        where = f"{prefix}." if prefix else ""
        raise ConfigError(
            f"unknown config key '{where}{unknown[0]}' (valid keys: {', '.join(sorted(fields))})"
        )
    kwargs = {}
    for name, field in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if name in data:
            kwargs[name] = _coerce(data[name], hints[name], key)
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing required config key '{key}'")
    try:
        return cls(**kwargs)
    except ConfigError as err:
        # A dataclass's own range checks name their field; add where the section sits in the whole config.
        message = str(err).replace("config key '", f"config key '{prefix}.", 1) if prefix else str(err)
        raise ConfigError(message) from None


def check_range(key: str, value: float | int | None, low: float | None = None, high: float | None = None,
                low_open: bool = False) -> None:
    """Raise a ConfigError naming ``key`` unless ``value`` (None is accepted) lies in the given range."""
    if value is None:
        return
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and value > high
    if too_low or too_high:
        bounds = f"{'>' if low_open else '>='} {low}" if low is not None else ""
        if high is not None:
            bounds += (" and " if bounds else "") + f"<= {high}"
        raise ConfigError(f"config key '{key}': must be {bounds}, got {value!r}")


def to_dict(obj: Any) -> dict[str, Any]:
    """Plain-type dictionary of a config dataclass (for YAML dumps and checkpoints)."""
    return dataclasses.asdict(obj)


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """``key old -> new`` for every setting that differs between two nested configs (dicts, keys dotted)."""
    if isinstance(old, dict) and isinstance(new, dict):
        found: list[str] = []
        for key in sorted(set(old) | set(new), key=str):
            found += differences(old.get(key), new.get(key), f"{prefix}.{key}" if prefix else str(key))
        return found
    return [] if old == new else [f"{prefix} {old} -> {new}"]


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with ``key.sub=value`` overrides applied (values parsed as YAML)."""
    import copy

    result = copy.deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' is not of the form key=value")
        key, raw = item.split("=", 1)
        node = result
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{item}': '{part}' is not a section")
        try:
            node[parts[-1]] = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise ConfigError(f"override '{item}': the value does not parse ({first_line(err)})") from None
    return result


def load_config(path: str | Path, cls: type[T], overrides: list[str] | None = None) -> T:
    """Read a YAML file into the dataclass ``cls``, applying ``key=value`` overrides first.

    Raises:
        FileNotFoundError: If the file does not exist.
        ConfigError: If the YAML does not parse or does not match ``cls``.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from err
    return from_dict(cls, apply_overrides(data, overrides or []))
