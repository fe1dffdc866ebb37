"""Declared differences from upstream: reviewed rows (process, item, upstream value, slurmx value, kind, why)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmx.config.yamlfile import load_yaml
from slurmx.errors import ConfigError
from slurmx.upstream.facts import Difference, number

KINDS = {"review-bug-fixed", "run-time-port", "deliberate", "cluster-layout", "open"}
FIELDS = {"keys", "processes", "item", "upstream", "slurmx", "kind", "why"}


@dataclass(frozen=True)
class Declared:
    """One reviewed row of the table: a difference that is meant, and why."""

    keys: tuple[str, ...]  # config keys it applies to; () for all
    processes: tuple[str, ...]  # the processes it applies to
    item: str
    upstream: str | None
    slurmx: str | None
    kind: str
    why: str
    where: str = ""  # file:line, to name a stale row

    def covers(self, key: str, diff: Difference) -> bool:
        return (
            (not self.keys or key in self.keys)
            and diff.process in self.processes
            and (self.item, self.upstream, self.slurmx) == (diff.item, diff.upstream, diff.slurmx)
        )


def _text(value: object) -> str | None:
    return None if value is None else number(str(value)) if not isinstance(value, str) else value


def load_declared(path: Path) -> list[Declared]:
    """The table's rows; a bad row is a ConfigError naming file, line and field."""
    data, index = load_yaml(path)
    rows: Any = data.get("differences") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ConfigError(path, 1, "differences", "a differences table is a mapping with a 'differences' list")
    out = []
    for n, row in enumerate(rows):
        line = index.line_of(data, ("differences", n))
        if not isinstance(row, dict):
            raise ConfigError(path, line, f"differences[{n}]", "each row is a mapping")
        for name in sorted(set(row) - FIELDS):
            raise ConfigError(
                path,
                index.line_of(data, ("differences", n, name)),
                name,
                f"unknown field (have: {', '.join(sorted(FIELDS))})",
            )
        for name in ("processes", "item", "upstream", "slurmx", "kind", "why"):
            if name not in row:
                raise ConfigError(path, line, f"differences[{n}].{name}", "missing")
        if row["kind"] not in KINDS:
            raise ConfigError(
                path, index.line_of(data, ("differences", n, "kind")), "kind", f"{row['kind']!r} not in {sorted(KINDS)}"
            )
        if not row["why"]:
            raise ConfigError(
                path, index.line_of(data, ("differences", n, "why")), "why", "every declared difference says why"
            )
        out.append(
            Declared(
                keys=tuple(row.get("keys", ())),
                processes=tuple(row["processes"]),
                item=row["item"],
                upstream=_text(row["upstream"]),
                slurmx=_text(row["slurmx"]),
                kind=row["kind"],
                why=row["why"],
                where=f"{path}:{line}",
            )
        )
    return out
