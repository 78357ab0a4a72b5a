"""Layered loading of a component's frozen config dataclass, in exactly one place.

Precedence, lowest to highest: the dataclass defaults, a TOML file (keys are
the field names, optionally under a ``[section]`` table), environment
variables ``<PREFIX><FIELD>``, then explicit overrides (CLI flags; ``None``
means "flag not given"). Values from text sources are coerced to the field's
type; unknown keys are errors, so a typo never silently falls back to a
default.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping, TypeVar

T = TypeVar("T")


def coerce(name: str, typ: Any, value: Any) -> Any:
    """Convert a TOML/env/flag value to the field type named by ``typ``. Raises ValueError naming the field."""
    if value is None:
        return None
    text = str(typ)
    if "bool" in text and isinstance(value, str):
        if value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{name}: expected a boolean, got {value!r}")
    if text.startswith("tuple"):  # a list in TOML; "a,b" in env, flags and Pulsar properties files
        items = value.split(",") if isinstance(value, str) else list(value)
        return tuple(str(item).strip() for item in items if str(item).strip())
    try:
        if "Path" in text:
            return Path(value)
        if text.startswith("int") or text == "<class 'int'>":
            return int(value)
        if text.startswith("float") or text == "<class 'float'>":
            return float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: cannot use {value!r}: {exc}") from exc
    return value


def load_layered(
    cls: type[T],
    *,
    section: str,
    env_prefix: str,
    toml_path: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    required: tuple[str, ...] = (),
    document: Mapping[str, Any] | None = None,
) -> T:
    """Build ``cls`` from defaults < TOML < env < overrides and return ``instance.validate()``.

    ``document`` stands in for the TOML file when the file was read another way (field names as keys; a value
    of None sets the field to None, e.g. a listener turned off), such as the broker's Pulsar properties files.
    Raises ValueError on unknown keys, uncoercible values or a missing required field.
    """
    known = {f.name: f.type for f in fields(cls)}
    merged: dict[str, Any] = {}
    for key, value in (document or {}).items():
        if key not in known:
            raise ValueError(f"unknown {section} config key {key!r}")
        merged[key] = value
    if toml_path is not None:
        with open(toml_path, "rb") as fh:
            doc = tomllib.load(fh)
        doc = doc.get(section, doc)
        for key, value in doc.items():
            if key not in known:
                raise ValueError(f"unknown {section} config key {key!r} in {toml_path}")
            merged[key] = value
    for key, value in (environ if environ is not None else os.environ).items():
        if key.startswith(env_prefix):
            name = key[len(env_prefix):].lower()
            if name not in known:
                raise ValueError(f"unknown {section} config environment variable {key}")
            merged[name] = value
    for key, value in (overrides or {}).items():
        if key not in known:
            raise ValueError(f"unknown {section} config key {key!r}")
        if value is not None:
            merged[key] = value
    for name in required:
        if name not in merged:
            raise ValueError(f"{section} config needs {name} (flag, env {env_prefix}{name.upper()} or TOML)")
    return cls(**{k: coerce(k, known[k], v) for k, v in merged.items()}).validate()
