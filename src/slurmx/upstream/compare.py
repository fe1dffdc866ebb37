"""One point: capture InferenceX's script, take slurmx's facts, and the differences; then against a table."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurmx.config.srt import SrtRecipe
from slurmx.errors import UserError
from slurmx.process import Process
from slurmx.recipes.srt import launched_recipe
from slurmx.submit.resolved import Resolved
from slurmx.upstream.capture import CAPTURE_TREE, Capture, Upstream, capture
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
from slurmx.upstream.inferencex import LIB, aiperf_revision
from slurmx.upstream.launcher import LAUNCHER, Launch, launch_facts, launcher_path, sandboxed
from slurmx.upstream.srt import (
    ENGINE,
    FRONTEND,
    engine_facts,
    frontend_facts,
    health_window_s,
    replay_script,
    request_facts,
)


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
        # a file of the staged tree (an engine flag's chat template) where the node sees the checkout, as slurmx's
        # processes name it once launch has filled in the recipe's {inferencex}
        checkout = item.runtime.inferencex_dir()
        tree = {f"{cap.work_dir}/{CAPTURE_TREE}/": f"{checkout}/"} if checkout is not None else {}
        facts = upstream_facts(cap, {**tree, **capture_paths(str(cap.work_dir), upstream.model_path)})
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


# the allocation items an srt-slurm recipe declares (the rest of srtctl's request comes from the srtslurm.yaml
# its launcher writes, which is not read here): only these are compared on either side
SRT_REQUEST = frozenset({"slurm --time", "slurm --nodes", "slurm --gpus-per-node", "slurm --gres", "slurm --exclusive"})
SRT_COMPARED = frozenset({ENGINE, "replay", "provision"})  # the head's engine, the replay, what is installed


def srt_upstream(tree: Path, recipe: SrtRecipe) -> Upstream:
    """The replay's run: benchmark.command's InferenceX script with benchmark.env, its cluster paths in the
    capture's sandbox; the frontend's port is each tool's own (the capture's PORT, as for a script)."""
    script = replay_script(recipe)
    if script is None:
        raise UserError(f"{recipe.path}: benchmark.command runs no script of the checkout")
    env = tuple((k, sandboxed(v)) for k, v in recipe.replay_env.items() if k != "PORT")
    return Upstream(tree / script, tree / LIB, "", env)


def per_conc_paths(value: str, item: Resolved, recipe: SrtRecipe) -> str:
    """agentic_srt.sh files each concurrency under `$RESULT_DIR/conc_N` as `<RESULT_FILENAME>_concN`: compared
    as placeholders, as a single-node capture's result dir is."""
    point, base = item.point, recipe.replay_env.get("RESULT_DIR", "")
    if base:
        value = value.replace(f"{base}/conc_{point.conc}", "$RESULT_DIR")
    return value.replace(f"{point.exp_name}_conc{point.conc}", "$RESULT_FILENAME_conc$CONC")


def compare_multinode(
    key: str, item: Resolved, tree: Path, processes: Callable[[Resolved], list[Process]]
) -> PointCompare:
    """An aggregated multinode point against the srt-slurm recipe its row names (upstream/srt.py): the head's
    engine flags and env, its readiness window, the replay (benchmark.command, captured), the request."""
    assert item.serving is not None
    with tempfile.TemporaryDirectory(prefix="slurmx-srt-") as work:
        recipe = launched_recipe(tree, item.point, Path(work))
    upstream = srt_upstream(tree, recipe)
    cap, captured = capture_facts(item, upstream)
    theirs = {k: per_conc_paths(v, item, recipe) for k, v in captured.items() if k[0] in SRT_COMPARED - {ENGINE}}
    window = health_window_s(recipe, launcher_path(tree, item.point))
    engine = item.serving.implementation.engine
    theirs.update(engine_facts(recipe, engine, window))
    theirs.update(request_facts(recipe))
    compared = SRT_COMPARED
    if engine.frontend is not None:  # Dynamo's frontend in front of the worker: compared too
        theirs.update(frontend_facts(recipe, engine))
        compared = SRT_COMPARED | {FRONTEND}
    started = processes(item)
    ours = {k: v for k, v in point_facts(item, started, True).items() if k[0] in compared}
    head = next(p for p in started if p.name == ENGINE)
    ours[(ENGINE, "startup timeout s")] = str(int(head.ready_timeout_s))
    request = slurmx_launch_facts(item, {})
    # the request items srtctl's sbatch is known to carry: SRT_REQUEST's, and the #SBATCH lines the recipe names
    asked = SRT_REQUEST | {k[1] for k in theirs if k[0] == LAUNCHER}
    ours.update({k: v for k, v in request.items() if k[0] == LAUNCHER and k[1] in asked})
    ours[(LAUNCHER, "container image")] = item.point.image
    return PointCompare(key, item, cap, theirs, ours, differences(theirs, ours))


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
