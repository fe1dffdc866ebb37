"""A small parser for the Prometheus text exposition format (what vLLM's /metrics returns).

Only what results need: samples as (name, labels, value); comments, TYPE/HELP lines, timestamps
and exemplars are skipped. No dependency on prometheus_client.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Labels
    value: float

    def label(self, key: str) -> str | None:
        for k, v in self.labels:
            if k == key:
                return v
        return None


class PrometheusParseError(ValueError):
    pass


def parse(text: str) -> list[Sample]:
    return list(iter_samples(text))


def iter_samples(text: str) -> Iterator[Sample]:
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            yield _parse_line(line)
        except (ValueError, IndexError) as exc:
            raise PrometheusParseError(f"line {number}: {exc}: {raw[:120]!r}") from None


def counter_families(text: str) -> set[str]:
    """The names `# TYPE NAME counter` declares: a counter exposed without the `_total` suffix (Mooncake's
    master writes `mem_cache_hit_nums_ 20`) is still a counter."""
    out: set[str] = set()
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) == 4 and parts[:2] == ["#", "TYPE"] and parts[3] == "counter":
            out.add(parts[2])
    return out


def _parse_line(line: str) -> Sample:
    brace = line.find("{")
    space = line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        name = line[:brace]
        labels, end = _parse_labels(line, brace + 1)
        rest = line[end:].split()
    else:
        name, *rest = line.split()
        labels = ()
    if not rest:
        raise ValueError("sample without a value")
    return Sample(name, labels, _parse_value(rest[0]))


def _parse_labels(line: str, pos: int) -> tuple[Labels, int]:
    labels: list[tuple[str, str]] = []
    while True:
        while line[pos] in " ,":
            pos += 1
        if line[pos] == "}":
            return tuple(labels), pos + 1
        eq = line.index("=", pos)
        key = line[pos:eq].strip()
        if line[eq + 1] != '"':
            raise ValueError(f"label {key} value not quoted")
        pos = eq + 2
        value: list[str] = []
        while line[pos] != '"':
            if line[pos] == "\\":
                nxt = line[pos + 1]
                value.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                pos += 2
            else:
                value.append(line[pos])
                pos += 1
        labels.append((key, "".join(value)))
        pos += 1


def _parse_value(text: str) -> float:
    lowered = text.lower()
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    if lowered == "nan":
        return math.nan
    return float(text)


def total(samples: list[Sample], name: str, where: Callable[[Sample], bool] | None = None) -> float | None:
    """Sum of every series of `name` (e.g. one per engine or model); None when the metric is absent."""
    values = [s.value for s in samples if s.name == name and (where is None or where(s))]
    return sum(values) if values else None


def by_label(samples: list[Sample], name: str, key: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for s in samples:
        if s.name == name:
            label = s.label(key)
            if label is not None:
                out[label] = out.get(label, 0.0) + s.value
    return out


def maximum(samples: list[Sample], name: str) -> float | None:
    values = [s.value for s in samples if s.name == name]
    return max(values) if values else None
