"""YAML loading that remembers the line of every mapping key and list item."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from slurmx.config import yamlcache
from slurmx.errors import ConfigError

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR_TAG = "tag:yaml.org,2002:str"
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{kind}" for kind in ("int", "float", "bool", "null"))


# Builtins (C functions) of two arguments and of none, whose answers the composer drops.
_ignore_two: Callable[[Any, Any], object] = operator.is_
_ignore_none: Callable[[], object] = tuple


class _Loader(_BaseLoader):  # type: ignore[misc]  # _BaseLoader is picked at run time (C or pure Python)
    """The safe loader, its implicit tag resolution memoized per file: InferenceX's two masters resolve
    ~25,000 scalars to ~1,100 distinct tags, each by regex. Safe loaders have no path resolvers, so a tag
    depends only on (kind, value, implicit)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        # lru_cache's C wrapper: the C composer's call per scalar is answered without entering Python
        self.resolve = functools.lru_cache(maxsize=None)(super().resolve)
        # Nor its two calls per node into the path resolvers, which a safe loader has none of: C no-ops instead.
        self.descend_resolver = _ignore_two
        self.ascend_resolver = _ignore_none


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


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Builder:
    """Python objects from a composed node graph, recording the line of every key and item.

    The C composer builds the nodes; this walk replaces PyYAML's generic constructor (its bookkeeping
    doubled the load time of a large master file). Scalars other than strings (whose constructor returns the
    text as is) still go through PyYAML's own typed constructors, so values are exactly what yaml.safe_load
    gives."""

    def __init__(self, loader: Any, path: Path, index: LineIndex, duplicates: Literal["error", "warn"]) -> None:
        self.loader = loader
        self.path = path
        self.index = index
        self.duplicates = duplicates
        self.built: dict[int, Any] = {}  # by node: an alias is the same object, and costs nothing twice
        # numbers, booleans and nulls by (tag, text): immutable values of the text alone, built once
        self.scalars: dict[tuple[str, str], Any] = {}

    def build(self, node: yaml.Node) -> Any:
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _STR_TAG:
                return node.value  # what PyYAML's construct_yaml_str returns, without its two calls
            key = (node.tag, node.value)
            if key in self.scalars:
                return self.scalars[key]
            constructor = self.loader.yaml_constructors.get(node.tag, self.loader.yaml_constructors[None])
            value = constructor(self.loader, node)
            if node.tag in _PLAIN_TAGS:
                self.scalars[key] = value
            return value
        done = self.built.get(id(node))
        if done is not None:
            return done
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node)
        result: list[Any] = []  # a SequenceNode, the one kind left
        self.built[id(node)] = result
        result.extend(self.build(child) for child in node.value)
        self.index.by_container[id(result)] = {i: child.start_mark.line + 1 for i, child in enumerate(node.value)}
        self.index.keep_alive.append(result)
        return result

    def _mapping(self, node: yaml.MappingNode) -> dict[Any, Any]:
        if any(k.tag == _MERGE_TAG for k, _ in node.value):
            return self._merged_mapping(node)
        result: dict[Any, Any] = {}
        self.built[id(node)] = result
        lines: dict[Any, int] = {}
        for key_node, value_node in node.value:
            is_str = key_node.tag == _STR_TAG and isinstance(key_node, yaml.ScalarNode)
            key = key_node.value if is_str else self.build(key_node)
            line = key_node.start_mark.line + 1
            if key in lines:  # without a merge every key is the mapping's own
                self._duplicate(key, line, lines[key])
            # a string scalar without a call: most values of a config are strings
            if value_node.tag == _STR_TAG and isinstance(value_node, yaml.ScalarNode):
                result[key] = value_node.value
            else:
                result[key] = self.build(value_node)
            lines[key] = line
        self.index.by_container[id(result)] = lines
        self.index.keep_alive.append(result)
        return result

    def _merged_mapping(self, node: yaml.MappingNode) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        self.built[id(node)] = result
        # Keys a `<<` merge brings in may be overridden by the mapping's own keys: that is no duplicate.
        own = {id(k) for k, _ in node.value}
        self.loader.flatten_mapping(node)
        lines: dict[Any, int] = {}
        own_keys: set[Any] = set()
        for key_node, value_node in node.value:
            key = self.build(key_node)
            line = key_node.start_mark.line + 1
            if id(key_node) in own and key in own_keys:
                self._duplicate(key, line, lines[key])
            if id(key_node) in own:
                own_keys.add(key)
            result[key] = self.build(value_node)
            lines[key] = line
        self.index.by_container[id(result)] = lines
        self.index.keep_alive.append(result)
        return result

    def _duplicate(self, key: Any, line: int, first: int) -> None:
        if self.duplicates == "error":
            raise ConfigError(self.path, line, str(key), "duplicate key")
        # The value is replaced in the first one's place in key order, as PyYAML's dict does.
        self.index.warnings.append(
            f"{self.path}:{line}: {key}: duplicate key (also at line {first}); the last one wins"
        )


def load_yaml(path: Path, duplicates: Literal["error", "warn"] = "error") -> tuple[Any, LineIndex]:
    """Parse `path`; a syntax error is a ConfigError with its line.

    A duplicate mapping key is an error, or with duplicates="warn" a warning naming both lines while the
    last one wins: that is what PyYAML, and so InferenceX, does with its own files (masters, runners.yaml).
    """
    index = LineIndex()
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(path, None, "", "file not found") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ConfigError(path, None, "", f"cannot read: {exc.__class__.__name__}") from None
    cached = yamlcache.load(path, duplicates, raw)
    if cached is not None:
        data, pairs, index.warnings = cached
        index.keep_alive = [container for container, _ in pairs]
        index.by_container = {id(container): lines for container, lines in pairs}
        return data, index
    data = _parse(path, text, duplicates, index)
    yamlcache.store(
        path, duplicates, raw, (data, [(c, index.by_container[id(c)]) for c in index.keep_alive], index.warnings)
    )
    return data, index


def _parse(path: Path, text: str, duplicates: Literal["error", "warn"], index: LineIndex) -> Any:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = None if node is None else _Builder(loader, path, index, duplicates).build(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = (exc.problem or exc.context or "invalid YAML").strip()
        raise ConfigError(path, line, "", f"YAML syntax error: {problem}") from None
    except yaml.reader.ReaderError as exc:  # a character YAML refuses: its own text is two lines and has no line
        reason = str(exc).splitlines()[0]
        raise ConfigError(path, _reader_line(text, exc.position), "", f"YAML error: {reason}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(path, None, "", f"YAML error: {exc}") from None
    finally:
        loader.dispose()
    return data


def _reader_line(text: str, position: int) -> int:
    """The line of the character at a reader's `position`: libyaml counts UTF-8 bytes, PyYAML's own reader characters."""
    if _BaseLoader is yaml.SafeLoader:
        return text.count("\n", 0, position) + 1
    return text.encode("utf-8").count(b"\n", 0, position) + 1
