"""Load master configs and cluster profiles; every problem becomes a one-line ConfigError."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from slurmx.config.clusters import ClusterProfile, ClustersFile
from slurmx.config.master import MasterConfig, MultiNodeConfig, SingleNodeConfig
from slurmx.config.yamlfile import LineIndex, load_yaml
from slurmx.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class ConfigSource:
    """Where a config key came from, for error messages and provenance."""

    path: Path
    line: int | None


@dataclass
class Masters:
    """Every key of the loaded master files, in file order."""

    configs: dict[str, MasterConfig]
    sources: dict[str, ConfigSource]
    files: list[Path]


def _field_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts)


def _expected_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field aliases of the model found at `loc` (for did-you-mean on unknown fields)."""
    current: Any = model
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            match = next((f for name, f in current.model_fields.items() if (f.alias or name) == part), None)
            if match is None:
                return []
            current = match.annotation
        else:  # list item or dict value: step into the element type
            current = _inner_model(current)
    current = _inner_model(current)
    fields = current.model_fields if current is not None else {}
    return [f.alias or name for name, f in fields.items()]


def _inner_model(annotation: Any) -> Any:
    """The BaseModel inside list[...], X | None, dict[str, X] and the like."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _message(error: Any, model: type[BaseModel], loc: tuple[Any, ...]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        valid = _expected_fields(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown field{hint}"
    if kind == "missing":
        return "required field is missing"
    message = str(error["msg"])
    message = message.removeprefix("Value error, ")
    if kind.endswith("_type") or kind in ("literal_error", "bool_parsing", "int_parsing"):
        message = f"{message}, got {error['input']!r}"
    return message


def validate(model: type[M], root: Any, path: Path, index: LineIndex, prefix: tuple[Any, ...] = ()) -> M:
    """Validate `root[prefix]` as `model`, turning the first error into a located ConfigError."""
    data = root
    for part in prefix:
        data = data[part]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # An unknown field explains a "missing" one (a typo), so report it first.
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        error = errors[0]
        # Generic models add their class names to loc; keep only real keys.
        loc = tuple(p for p in error["loc"] if isinstance(p, int) or "[" not in str(p))
        line = index.line_of(root, prefix + loc)
        raise ConfigError(path, line, _field_path(prefix + loc), _message(error, model, loc)) from None


def load_masters(paths: list[Path]) -> Masters:
    configs: dict[str, MasterConfig] = {}
    sources: dict[str, ConfigSource] = {}
    for path in paths:
        data, index = load_yaml(path)
        if not isinstance(data, dict):
            raise ConfigError(path, 1, "", "a master config must be a mapping of config keys")
        for key, body in data.items():
            key_line = index.line_of(data, (key,))
            if key in configs:
                first = sources[key]
                raise ConfigError(path, key_line, str(key), f"config key also defined at {first.path}:{first.line}")
            if not isinstance(body, dict):
                raise ConfigError(path, key_line, str(key), "a config key must hold a mapping")
            if body.get("multinode") is True:
                configs[key] = validate(MultiNodeConfig, data, path, index, (key,))
            else:
                configs[key] = validate(SingleNodeConfig, data, path, index, (key,))
            sources[key] = ConfigSource(path, key_line)
    return Masters(configs, sources, list(paths))


@dataclass
class Clusters:
    profiles: dict[str, ClusterProfile]
    path: Path
    lines: dict[str, int | None]


def load_clusters(path: Path) -> Clusters:
    data, index = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(path, 1, "", "a clusters file must be a mapping with a 'hardware' section")
    parsed = validate(ClustersFile, data, path, index)
    lines = {label: index.line_of(data, ("hardware", label)) for label in parsed.hardware}
    return Clusters(dict(parsed.hardware), path, lines)


def suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=3)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
