"""YAML loading that remembers the line of every mapping key and list item."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from slurmx.errors import ConfigError

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class LineIndex:
    """Maps containers (by id) to the 1-based line of each key or item."""

    by_container: dict[int, dict[Any, int]] = field(default_factory=dict)
    keep_alive: list[Any] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # one line each, located

    def line_of(self, root: Any, path: tuple[Any, ...]) -> int | None:
        """Line of the deepest element of `path` that exists under `root`."""
        node, line = root, None
        for part in path:
            lines = self.by_container.get(id(node), {})
            if part in lines:
                line = lines[part]
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                break
        return line


def load_yaml(path: Path, duplicates: Literal["error", "warn"] = "error") -> tuple[Any, LineIndex]:
    """Parse `path`; a syntax error is a ConfigError with its line.

    A duplicate mapping key is an error, or with duplicates="warn" a warning naming both lines while the
    last one wins: that is what PyYAML, and so InferenceX, does with its own files (masters, runners.yaml).
    """
    index = LineIndex()

    class Loader(_BaseLoader):  # type: ignore[misc]  # the base is chosen at run time (C or Python loader)
        pass

    def construct_mapping(loader: Any, node: yaml.MappingNode) -> dict[Any, Any]:
        # Keys a `<<` merge brings in may be overridden by the mapping's own keys: that is no duplicate.
        own = {id(k) for k, _ in node.value}
        loader.flatten_mapping(node)
        result: dict[Any, Any] = {}
        lines: dict[Any, int] = {}
        own_keys: set[Any] = set()
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if id(key_node) in own and key in own_keys:
                if duplicates == "error":
                    raise ConfigError(path, line, str(key), "duplicate key")
                index.warnings.append(
                    f"{path}:{line}: {key}: duplicate key (also at line {lines[key]}); the last one wins"
                )
                # The value is replaced in the first one's place in key order, as PyYAML's dict does.
            if id(key_node) in own:
                own_keys.add(key)
            result[key] = loader.construct_object(value_node, deep=True)
            lines[key] = line
        index.by_container[id(result)] = lines
        index.keep_alive.append(result)
        return result

    def construct_sequence(loader: Any, node: yaml.SequenceNode) -> list[Any]:
        result = [loader.construct_object(child, deep=True) for child in node.value]
        index.by_container[id(result)] = {i: child.start_mark.line + 1 for i, child in enumerate(node.value)}
        index.keep_alive.append(result)
        return result

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, construct_sequence)

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(path, None, "", "file not found") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError(path, None, "", f"cannot read: {exc.__class__.__name__}") from None
    try:
        data = yaml.load(text, Loader=Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        raise ConfigError(path, line, "", f"YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(path, None, "", f"YAML error: {exc}") from None
    return data, index
