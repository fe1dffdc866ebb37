"""What `submit` does with each point: submit it, or skip it and say why. Safe to run twice."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from slurmx.recipes.spec import ServingSpec
from slurmx.slurm.accounting import NODE_FAILURES, JobInfo, query_jobs
from slurmx.store.ledger import read_point
from slurmx.store.state import PointState, read_state
from slurmx.store.tree import ResultsTree, SweepDir
from slurmx.submit.resolved import Resolved

Action = Literal["submit", "skip"]


@dataclass(frozen=True)
class Decision:
    item: Resolved
    action: Action
    why: str
    repeat: int = 1  # which run of the point (`submit --repeats`), 1 for the first


@dataclass(frozen=True)
class Mode:
    force: bool = False  # rerun every point, even those with a valid result
    only_failed: bool = False  # rerun failed, cancelled and timed-out points only


def decide(
    resolved: list[Resolved], tree: ResultsTree, sweep: SweepDir, mode: Mode, repeats: int = 1
) -> list[Decision]:
    """One decision per point and repeat (1..repeats), each repeat judged by its own state."""
    runs = [(r, n) for r in resolved for n in range(1, repeats + 1)]
    states = {(r.point.point_id, n): read_state(sweep.point(r.point.point_id, n).state_json) for r, n in runs}
    # --only-failed also asks about ended jobs: a node failure is only in Slurm's record
    asked = [s.job_id for s in states.values() if s and s.job_id and (mode.only_failed or not s.ended)]
    jobs = query_jobs(asked).jobs if asked else {}
    decisions = []
    for item, repeat in runs:
        state = states[(item.point.point_id, repeat)]
        job = jobs.get(state.job_id) if state and state.job_id else None
        active = f"{job.state.lower()} as job {job.job_id}" if job is not None and job.active else None
        action, why = _one(item, state, active, tree, sweep, mode, repeat)
        if action == "submit" and mode.only_failed and state is not None:
            item, refusal = away_from_bad_nodes(item, state, job)
            if refusal:
                action, why = "skip", refusal
            elif item.request.exclude:
                why += f"; not on {','.join(item.request.exclude)}"
        decisions.append(Decision(item, action, why, repeat))
    return decisions


def away_from_bad_nodes(item: Resolved, state: PointState, job: JobInfo | None) -> tuple[Resolved, str | None]:
    """The point's request with every node it failed on for a node's reason excluded, or why not to retry."""
    bad = set(state.failed_nodes)
    if state.node and (state.reason or "").removeprefix("not run: ").startswith("preflight:"):
        bad.add(state.node)  # the node itself was unfit (GPUs, memory, tools, leftovers)
    if job is not None and job.state in NODE_FAILURES and job.node:
        bad.add(job.node)
    limit = item.profile.slurm.max_node_failures if item.profile.slurm else 0
    if len(bad) >= limit:
        return (
            item,
            f"failed on {len(bad)} node(s) ({','.join(sorted(bad))}), max-node-failures is {limit}: not resubmitted",
        )
    # the profile's own excluded nodes stay excluded
    request = item.request.model_copy(update={"exclude": tuple(sorted(bad | set(item.request.exclude)))})
    return replace(item, request=request), None


def _one(
    item: Resolved,
    state: PointState | None,
    active: str | None,
    tree: ResultsTree,
    sweep: SweepDir,
    mode: Mode,
    repeat: int = 1,
) -> tuple[Action, str]:
    if active is not None:
        return "skip", active
    if state is not None and state.stage == "queued" and state.job_id is None:
        return "submit", "queued but never reached sbatch"
    if mode.force:
        return "submit", "--force"
    done_elsewhere = _done_in_other_sweep(tree, item, sweep) if repeat == 1 else None
    if (state is not None and state.stage == "done") or done_elsewhere:
        why = "done" if not done_elsewhere else f"done in sweep {done_elsewhere}"
        if _serving_changed(sweep, item.point.point_id, item.serving):
            why += " (its recipe has changed since: --force to rerun)"
        return "skip", why
    if state is None:
        return ("skip", "never ran (--only-failed)") if mode.only_failed else ("submit", "never ran")
    if mode.only_failed:
        return "submit", f"{state.stage} in attempt {state.attempt}"
    return "skip", f"{state.stage} in attempt {state.attempt}; rerun with --only-failed"


def _done_in_other_sweep(tree: ResultsTree, item: Resolved, current: SweepDir) -> str | None:
    for sweep in tree.sweeps(item.point.config_key):
        if sweep.path == current.path:
            continue
        state = read_state(sweep.point(item.point.point_id).state_json)
        if state is not None and state.stage == "done":
            return sweep.sweep_id
    return None


def _serving_changed(sweep: SweepDir, point_id: str, serving: ServingSpec | None) -> bool:
    """Whether the point last ran with other serving settings than its recipe now resolves to."""
    point = sweep.point(point_id)
    if serving is None or not point.point_json.exists():
        return False
    before = read_point(point).serving
    return before is None or before.provenance_free() != serving.provenance_free()
