"""The submit stage: decide per point, check the cluster, plan one array per Slurm request, and write
the ledger around each sbatch call. Typed in, typed out; `commands/submit.py` only parses and prints."""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from slurmx.errors import UserError
from slurmx.inputs import Inputs
from slurmx.node.entry import run_job
from slurmx.slurm import cluster_check
from slurmx.slurm.sbatch import ArrayPlan, array_id, render_sbatch, submit_array
from slurmx.store import ledger
from slurmx.store.lock import locked
from slurmx.store.tree import ResultsTree, SweepDir
from slurmx.submit.arrays import array_plans
from slurmx.submit.decide import Decision, Mode, decide
from slurmx.submit.resolved import Resolved, resolve_points
from slurmx.submit.resolved import host_memory_need_mb as _need_of_spec


@dataclass
class ArrayReport:
    request: str
    tasks: int
    job_ids: list[str] = field(default_factory=list)
    sbatch_script: str | None = None


@dataclass
class KeyReport:
    config_key: str
    sweep_id: str
    sweep_path: str
    decisions: list[Decision] = field(default_factory=list)
    arrays: list[ArrayReport] = field(default_factory=list)
    until: ledger.UntilCertified | None = None  # `--until-certified`, when given

    @property
    def job_ids(self) -> list[str]:
        return [j for a in self.arrays for j in a.job_ids]

    @property
    def sbatch_calls(self) -> int:
        return sum(1 for a in self.arrays if a.job_ids)

    def to_json(self) -> dict[str, Any]:
        until = {"until-certified": self.until.model_dump(mode="json")} if self.until is not None else {}
        return until | {
            "config-key": self.config_key,
            "sweep-id": self.sweep_id,
            "sweep-path": self.sweep_path,
            "array-job-id": array_id(self.job_ids),
            "sbatch-calls": self.sbatch_calls,
            "arrays": [
                {"request": a.request, "tasks": a.tasks, "array-job-id": array_id(a.job_ids)} for a in self.arrays
            ],
            "points": [
                {
                    "point-id": d.item.point.point_id,
                    "repeat": d.repeat,
                    "action": d.action,
                    "why": d.why,
                    "exp-name": d.item.point.exp_name,
                }
                for d in self.decisions
            ],
        }


def sweep_dir(tree: ResultsTree, key: str, inputs: Inputs) -> SweepDir:
    """A key's sweep: the same directory for the same plan, whichever of its points a command names."""
    return tree.sweep(key, ledger.sweep_id_for(key, inputs.key_points(key)))


def host_memory_need_mb(item: Resolved) -> tuple[int, str]:
    """The host DRAM a point pins (its backend's pool) plus the margin preflight asks for, in MB."""
    return _need_of_spec(item.serving)


def check_cluster(resolved: list[Resolved], inputs: Inputs) -> None:
    """Can the cluster ever run each request? One query of nodes and partitions for all of them."""
    partitions = cluster_check.query_partitions()
    nodes = cluster_check.query_nodes()
    check_kill_wait(resolved, inputs, cluster_check.query_kill_wait_s())
    for item in resolved:
        reason = cluster_check.why_unrunnable(item.request, partitions, nodes)
        if reason is None:
            need_mb, what = host_memory_need_mb(item)
            reason = cluster_check.why_memory_short(item.request, need_mb, what, nodes)
        if reason:
            p = item.point
            raise UserError(f"{p.config_key} point {p.point_id} ({p.exp_name}) can never run here: {reason}")


def check_kill_wait(resolved: list[Resolved], inputs: Inputs, kill_wait_s: int | None) -> None:
    """The job body fits the replay's graceful stop, the partial result and the servers' teardown into the
    profile's kill-wait-s; on a cluster whose KillWait is shorter, Slurm's SIGKILL would cut that teardown
    short and leave the replay's processes behind. Refused, naming the profile's field."""
    for item in resolved:
        slurm = item.profile.slurm
        if kill_wait_s is None or slurm is None or item.serving is None or slurm.kill_wait_s <= kill_wait_s:
            continue  # a command point has no replay to stop: its teardown grace is the supervisor's
        runner = item.point.runner
        line = inputs.clusters.lines.get(runner)
        raise UserError(
            f"{inputs.clusters.path}:{line}: hardware.{runner}.slurm.kill-wait-s: {slurm.kill_wait_s} s "
            f"(30 when unset) is longer than this cluster's KillWait of {kill_wait_s} s (scontrol show config): "
            f"Slurm would SIGKILL a cancelled point's teardown; set kill-wait-s: {kill_wait_s}"
        )


def check_budget(plans: list[ArrayPlan], until: ledger.UntilCertified) -> None:
    """Every task's points, each replayed for up to its budget, fit the job's time limit (less the warning Slurm
    sends before it): a budget the job cannot honour is refused before anything is written."""
    for plan in plans:
        request = plan.request
        points = max(len(group) for group in plan.groups)
        usable = request.time_limit_min - plan.signal_delay_s / 60.0
        if points * until.max_point_minutes > usable:
            shared = f"{points} points back to back in one task: " if points > 1 else ""
            raise UserError(
                f"--max-point-minutes {until.max_point_minutes:g}: {shared}{points * until.max_point_minutes:g} min "
                f"do not fit the job's time limit of {request.time_limit_min} min less its {plan.signal_delay_s} s "
                f"warning (the cluster profile's slurm.time-limit-min, or the recipe's time-limit-min)"
            )


def submit_key(
    key: str,
    inputs: Inputs,
    tree: ResultsTree,
    mode: Mode,
    *,
    dry_run: bool = False,
    max_parallel: int | None = None,
    repeats: int = 1,
    until: ledger.UntilCertified | None = None,
) -> KeyReport:
    """`until`: replay each point in rounds until certified (`--until-certified`), within its budget."""
    if repeats < 1:
        raise UserError(f"--repeats {repeats}: must be 1 or more")
    points = inputs.key_points(key)
    resolved = resolve_points(points, inputs)
    sweep = sweep_dir(tree, key, inputs)
    report = KeyReport(key, sweep.sweep_id, str(sweep.path), until=until)
    # a dry run only reads the tree: it takes no lock, so it writes nothing (not even the lock file)
    with nullcontext() if dry_run else locked(tree.key_lock(key)):
        report.decisions = decide(resolved, tree, sweep, mode, repeats)
        runs: dict[str, list[int]] = {}
        for d in report.decisions:
            if d.action == "submit":
                runs.setdefault(d.item.point.point_id, []).append(d.repeat)
        chosen = [r for r in resolved if r.point.point_id in runs]
        plans = array_plans(chosen, sweep.submitit, max_parallel, runs)
        if until is not None:
            check_budget(plans, until)
        if dry_run:
            report.arrays = [
                ArrayReport(p.request.summary(), len(p.groups), sbatch_script=render_sbatch(p)) for p in plans
            ]
            return report
        if not chosen:
            return report
        check_cluster(chosen, inputs)
        profile = chosen[0].profile
        record = ledger.new_sweep(sweep, points, inputs.masters.files, inputs.clusters.path, profile)
        ledger.write_sweep(sweep, record)
        for item in chosen:
            point_dir = sweep.point(item.point.point_id)
            # a later submit without --repeats keeps the count an earlier one asked for (status shows it)
            planned = max(repeats, ledger.read_point(point_dir).repeats if point_dir.point_json.exists() else 1)
            for repeat in runs[item.point.point_id]:
                ledger.queue_point(point_dir.repeat_dir(repeat), item.record(sweep.sweep_id, planned, until))
        for plan in plans:
            report.arrays.append(_submit_one(plan, sweep, record))
    return report


def _submit_one(plan: ArrayPlan, sweep: SweepDir, record: ledger.Sweep) -> ArrayReport:
    """One sbatch call, with the ledger written before (tasks) and after (job ids)."""
    submission = ledger.Submission(
        at=time.time(), tasks={str(i): g for i, g in enumerate(plan.groups)}, request=plan.request.summary()
    )
    record.submissions.append(submission)
    ledger.write_sweep(sweep, record)
    job_ids = submit_array(plan, run_job, str(sweep.path))
    for group, job_id in zip(plan.groups, job_ids, strict=True):
        for member in group:
            ledger.record_job_id(sweep.member(member), job_id)
    submission.array_job_id = array_id(job_ids)
    submission.sbatch_calls = 1
    ledger.write_sweep(sweep, record)
    return ArrayReport(plan.request.summary(), len(plan.groups), job_ids)
