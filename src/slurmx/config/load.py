"""Load master configs and cluster profiles; every problem becomes a one-line ConfigError."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
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
    """Every key of the loaded master files, in file order: the valid ones in `configs`, the others in
    `errors`; `sources` has both."""

    configs: dict[str, MasterConfig]
    sources: dict[str, ConfigSource]
    files: list[Path]
    errors: dict[str, ConfigError] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _field_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            parts.append(("." if parts else "") + str(part))
    return "".join(parts)


def _expected_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field aliases of the model found at `loc` (for did-you-mean on unknown fields). A section of `loc` may be
    spelled by its alias or by its field name (populate_by_name: `search_space` for `search-space`)."""
    current: Any = model
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            match = next((f for name, f in current.model_fields.items() if part in (f.alias or name, name)), None)
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
    # every model here is strict: a wrong type is `<type>_type` (bool_type, int_type, ...), never a lax
    # `*_parsing` kind (tests/test_config_errors.py checks the models are)
    if kind.endswith("_type") or kind == "literal_error":
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
    """Every key of every file, each validated on its own: a bad key is recorded in `errors` and blocks
    only itself. Only a file that cannot be read as a mapping of keys stops the load."""
    masters = Masters({}, {}, list(paths))
    for path in paths:
        data, index = load_yaml(path, duplicates="warn")
        masters.warnings.extend(index.warnings)
        if not isinstance(data, dict):
            raise ConfigError(path, 1, "", "a master config must be a mapping of config keys")
        for raw_key, body in data.items():
            key = str(raw_key)
            line = index.line_of(data, (raw_key,))
            if key in masters.sources:
                first = masters.sources[key]
                # InferenceX refuses the pair; neither copy can be trusted to be the one meant.
                masters.configs.pop(key, None)
                masters.errors[key] = ConfigError(
                    path, line, key, f"config key also defined at {first.path}:{first.line}"
                )
                continue
            masters.sources[key] = ConfigSource(path, line)
            try:
                masters.configs[key] = _validate_key(raw_key, body, data, path, index, line)
            except ConfigError as error:
                masters.errors[key] = error
    return masters


def _validate_key(raw_key: Any, body: Any, data: Any, path: Path, index: LineIndex, line: int | None) -> MasterConfig:
    key = str(raw_key)
    if not isinstance(raw_key, str):
        raise ConfigError(path, line, key, "a config key must be a string")
    if "*" in key:  # InferenceX reserves '*' for key patterns
        raise ConfigError(path, line, key, "'*' is not allowed in a config key")
    if not isinstance(body, dict):
        raise ConfigError(path, line, key, "a config key must hold a mapping")
    multinode = body.get("multinode", False)
    if not isinstance(multinode, bool):  # else the schema it picks would report everything but this
        where = index.line_of(data, (raw_key, "multinode"))
        raise ConfigError(path, where, f"{key}.multinode", f"must be true or false, got {multinode!r}")
    # InferenceX picks the schema by the truth of `multinode`; a missing one is then required by the schema.
    model: type[MasterConfig] = MultiNodeConfig if body.get("multinode", False) else SingleNodeConfig
    return validate(model, data, path, index, (raw_key,))


@dataclass
class Clusters:
    """Cluster profiles by label. A label whose entry is bad is in `errors` and blocks only the keys that
    run on it; a label with no entry at all is fine for a key that needs no hardware figures."""

    profiles: dict[str, ClusterProfile]
    path: Path
    lines: dict[str, int | None]
    errors: dict[str, ConfigError] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # With an InferenceX checkout: its runners.yaml, and the labels whose figures come only from there
    figures_path: Path | None = None
    figures_only: dict[str, int | None] = field(default_factory=dict)

    def profile(self, label: str) -> ClusterProfile | None:
        """The label's profile; None when the file has no entry for it; its error when the entry is bad."""
        if label in self.errors:
            raise self.errors[label]
        return self.profiles.get(label)


def load_clusters(path: Path) -> Clusters:
    data, index = load_yaml(path, duplicates="warn")
    if not isinstance(data, dict):
        raise ConfigError(path, 1, "", "a clusters file must be a mapping with a 'hardware' section")
    parsed = validate(ClustersFile, data, path, index)
    clusters = Clusters({}, path, {}, warnings=list(index.warnings))
    for label in parsed.hardware:
        clusters.lines[label] = index.line_of(data, ("hardware", label))
        try:
            clusters.profiles[label] = validate(ClusterProfile, data, path, index, ("hardware", label))
        except ConfigError as error:
            clusters.errors[label] = error
    return clusters


FIGURES = ("available_cpu_dram_mib", "gpus_per_node")  # what runners.yaml says about a label


def overlay_figures(profiles: Clusters, figures: Clusters) -> Clusters:
    """slurmx's profiles with InferenceX's hardware figures laid over them: the checkout's runners.yaml is
    the truth for a label's figures (a profile that disagrees is warned about, and loses); slurmx's file
    adds the `slurm:`, `runtime:` and `node:` sections. A label only runners.yaml knows has figures and no
    slurm section (plan works, submit refuses it); a label only slurmx knows (cluster:local) stays as is."""
    merged = Clusters(
        dict(profiles.profiles), profiles.path, dict(profiles.lines), dict(profiles.errors),
        [*profiles.warnings, *figures.warnings], figures.path,
    )  # fmt: skip
    for label, theirs in figures.profiles.items():
        ours = merged.profiles.get(label)
        if ours is None:
            if label not in merged.errors:
                merged.profiles[label] = theirs
                merged.figures_only[label] = figures.lines.get(label)
            continue
        for name in FIGURES:
            mine, truth = getattr(ours, name), getattr(theirs, name)
            if mine != truth:
                alias = name.replace("_", "-")
                merged.warnings.append(
                    f"{profiles.path}:{profiles.lines.get(label)}: hardware.{label}.{alias} is {mine}, but "
                    f"{figures.path}:{figures.lines.get(label)} says {truth}: using InferenceX's {truth}"
                )
        merged.profiles[label] = ours.model_copy(update={n: getattr(theirs, n) for n in FIGURES})
    for label, error in figures.errors.items():  # a bad runners.yaml entry blocks its label, as it does upstream
        merged.profiles.pop(label, None)
        merged.errors.setdefault(label, error)
    return merged


def suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=3)
    return f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""


WORKSPACE = "/workspace"  # where InferenceX's launchers mount the checkout ($GITHUB_WORKSPACE) in the container


def mounts_workspace(container_mounts: Sequence[str]) -> bool:
    """Whether these pyxis mounts (`host:container[:flags]`) put a checkout at WORKSPACE."""
    return any(m.split(":")[1:2] == [WORKSPACE] for m in container_mounts)


def with_workspace(clusters: Clusters, checkout: Path) -> Clusters:
    """A pyxis profile that mounts no InferenceX checkout gets the user's (--inferencex DIR) at /workspace, as
    the launchers mount theirs, and replays with its aiperf fork (utils/aiperf) as their scripts do."""
    for label, profile in clusters.profiles.items():
        runtime = profile.runtime
        if runtime is None or runtime.kind != "pyxis" or runtime.aiperf_source:
            continue
        if mounts_workspace(runtime.container_mounts):
            continue
        mounts = [*runtime.container_mounts, f"{checkout.resolve()}:{WORKSPACE}"]
        update = {"container_mounts": mounts, "aiperf_source": f"{WORKSPACE}/utils/aiperf"}
        clusters.profiles[label] = profile.model_copy(update={"runtime": runtime.model_copy(update=update)})
    return clusters
