"""One point: capture InferenceX's script, take slurmx's facts, and the differences; then against a table."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurmx.process import Process
from slurmx.submit.resolved import Resolved
from slurmx.upstream.capture import Capture, Upstream, capture
from slurmx.upstream.declared import Declared
from slurmx.upstream.facts import (
    Difference,
    Facts,
    capture_paths,
    differences,
    point_facts,
    slurmx_launch_facts,
    upstream_facts,
)
from slurmx.upstream.inferencex import aiperf_revision
from slurmx.upstream.launcher import Launch, launch_facts


@dataclass
class PointCompare:
    key: str
    resolved: Resolved
    capture: Capture
    upstream: Facts
    ours: Facts
    diffs: list[Difference]
    upstream_launch: Launch | None = None  # the run of the point's launcher (None: none was run)

    def where(self) -> str:
        return f"{self.key} {self.resolved.point.exp_name} ({self.resolved.point.parallelism})"


def tree_of(upstream: Upstream) -> Path:
    """The InferenceX checkout a point's script is in (benchmarks/single_node/agentic/<script>)."""
    return upstream.script.parents[3]


def capture_facts(item: Resolved, upstream: Upstream) -> tuple[Capture, Facts]:
    with tempfile.TemporaryDirectory(prefix="slurmx-upstream-") as work:
        cap = capture(item.point, upstream, Path(work))
        facts = upstream_facts(cap, capture_paths(str(cap.work_dir), upstream.model_path))
    revision = aiperf_revision(tree_of(upstream))
    if revision is not None:  # the aiperf fork the tree pins: a moved submodule is a difference
        facts[("provision", "aiperf revision")] = revision
    return cap, facts


def compare_point(
    key: str, item: Resolved, upstream: Upstream, processes: Callable[[Resolved], list[Process]]
) -> PointCompare:
    """`processes`: what slurmx starts for the point (render's point_processes, passed in from above)."""
    cap, theirs = capture_facts(item, upstream)
    ours = point_facts(item, processes(item), upstream.model_path.startswith("{work}/"))
    launch = upstream.launch
    if launch is not None and launch.why_not is None:  # the launcher level, where its launcher ran
        theirs.update(launch_facts(launch))
        ours.update(slurmx_launch_facts(item, launch.given, tree_of(upstream)))
    return PointCompare(key, item, cap, theirs, ours, differences(theirs, ours), launch)


def undeclared(compared: list[PointCompare], table: list[Declared]) -> list[tuple[PointCompare, Difference]]:
    return [(c, d) for c in compared for d in c.diffs if not any(row.covers(c.key, d) for row in table)]


def stale(compared: list[PointCompare], table: list[Declared]) -> list[Declared]:
    """Rows naming a compared key that cover no difference of any compared point. Rows for every key
    (no `keys`) are judged only by a check of every key they could serve, so never here."""
    keys = {c.key for c in compared}
    return [
        row
        for row in table
        if row.keys and keys & set(row.keys) and not any(row.covers(c.key, d) for c in compared for d in c.diffs)
    ]
