"""`slurmx submit`: validate, expand and submit config keys as Slurm arrays; safe to run twice."""

from __future__ import annotations

import argparse
import json
import time
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from slurmx import paths
from slurmx.commands.common import Loaded, add_config_options, load_points
from slurmx.config.clusters import ClusterProfile
from slurmx.errors import UserError
from slurmx.node.runtime import sbatch_setup_lines
from slurmx.plan import Point, server_groups
from slurmx.recipes.resolve import resolve_all
from slurmx.results.state import TERMINAL_STAGES, read_state
from slurmx.results.tree import ResultsTree, SweepDir
from slurmx.slurm import cluster_check, ledger
from slurmx.slurm.accounting import query_jobs
from slurmx.slurm.lock import locked
from slurmx.slurm.request import SlurmRequest, slurm_request
from slurmx.slurm.submit import ArrayPlan, array_id, render_sbatch, submit_array


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "submit",
        help="submit config keys' sweep points as Slurm jobs",
        description="Expand config keys into sweep points and submit them as one Slurm array per key. "
        "Points with a valid result, or queued or running, are skipped.",
    )
    parser.add_argument("keys", nargs="+", metavar="KEY", help="config keys to submit")
    parser.add_argument("--dry-run", action="store_true", help="print the sbatch script and the points; submit nothing")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true", help="rerun every point, even those with a valid result")
    mode.add_argument("--only-failed", action="store_true", help="rerun only failed, cancelled and timed-out points")
    parser.add_argument("--results", type=Path, metavar="DIR", help="results tree (default: ./results)")
    parser.add_argument("--max-parallel", type=int, metavar="N", help="array parallelism cap (default: the profile's)")
    parser.add_argument("--json", action="store_true", help="print what was submitted and skipped as JSON")
    add_config_options(parser)
    parser.set_defaults(func=run)


@dataclass
class Decision:
    point: Point
    action: str  # "submit" or "skip"
    why: str


@dataclass
class KeyReport:
    config_key: str
    sweep_id: str
    sweep_path: str
    decisions: list[Decision] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    sbatch_calls: int = 0
    sbatch_script: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "config-key": self.config_key,
            "sweep-id": self.sweep_id,
            "sweep-path": self.sweep_path,
            "array-job-id": array_id(self.job_ids),
            "sbatch-calls": self.sbatch_calls,
            "points": [
                {"point-id": d.point.point_id, "action": d.action, "why": d.why, "exp-name": d.point.exp_name}
                for d in self.decisions
            ],
        }


def _profile(point: Point, loaded: Loaded) -> ClusterProfile:
    profile = loaded.clusters.profiles[point.runner]
    if profile.slurm is None:
        line = loaded.clusters.lines.get(point.runner)
        raise UserError(f"{loaded.clusters.path}:{line}: hardware.{point.runner}: no slurm section, cannot submit")
    return profile


def _check_submittable(points: list[Point]) -> None:
    for p in points:
        if p.multinode or p.scenario != "agentic-coding":
            kind = "multinode" if p.multinode else p.scenario
            raise UserError(f"{p.config_key}: {kind} points cannot be submitted yet (single-node agentic-coding only)")


def _serving_changed(point_json: Path, serving: dict[str, Any] | None) -> bool:
    """Whether the point last ran with other serving settings than its recipe now resolves to."""
    if serving is None or not point_json.exists():
        return False
    before = ledger.PointRecord.model_validate_json(point_json.read_text()).serving or {}
    provenance = ("recipe_file", "recipe_sha256")
    return {k: v for k, v in before.items() if k not in provenance} != {k: v for k, v in serving.items() if k not in provenance}


def _decide(
    points: list[Point], tree: ResultsTree, sweep: SweepDir, force: bool, only_failed: bool,
    serving: dict[str, dict[str, Any]],
) -> list[Decision]:
    states = {p.point_id: read_state(sweep.point(p.point_id).state_json) for p in points}
    active_jobs = [s.job_id for s in states.values() if s and s.job_id and s.stage not in TERMINAL_STAGES]
    jobs = query_jobs(active_jobs).jobs if active_jobs else {}
    decisions = []
    for p in points:
        state = states[p.point_id]
        job = jobs.get(state.job_id) if state and state.job_id else None
        done_elsewhere = _done_in_other_sweep(tree, p, sweep)
        if job is not None and job.active:
            decisions.append(Decision(p, "skip", f"{job.state.lower()} as job {state.job_id}"))  # type: ignore[union-attr]
        elif state is not None and state.stage == "queued" and state.job_id is None:
            decisions.append(Decision(p, "submit", "queued but never reached sbatch"))
        elif force:
            decisions.append(Decision(p, "submit", "--force"))
        elif (state is not None and state.stage == "done") or done_elsewhere:
            why = "done" if not done_elsewhere else f"done in sweep {done_elsewhere}"
            if _serving_changed(sweep.point(p.point_id).point_json, serving.get(p.point_id)):
                why += " (its recipe has changed since: --force to rerun)"
            decisions.append(Decision(p, "skip", why))
        elif state is None:
            decisions.append(Decision(p, "skip" if only_failed else "submit", "never ran" if not only_failed else "never ran (--only-failed)"))
        else:
            decisions.append(Decision(p, "submit" if only_failed else "skip",
                                      f"{state.stage} in attempt {state.attempt}" + ("" if only_failed else "; rerun with --only-failed")))
    return decisions


def _done_in_other_sweep(tree: ResultsTree, point: Point, current: SweepDir) -> str | None:
    for sweep in tree.sweeps(point.config_key):
        if sweep.path == current.path:
            continue
        state = read_state(sweep.point(point.point_id).state_json)
        if state is not None and state.stage == "done":
            return sweep.sweep_id
    return None


def _groups(points: list[Point], share_server: bool) -> list[list[str]]:
    if not share_server:
        return [[p.point_id] for p in points]
    return [[p.point_id for p in group] for group in server_groups(points)]


def _check_cluster(requests: list[tuple[Point, SlurmRequest]]) -> None:
    partitions = cluster_check.query_partitions()
    nodes = cluster_check.query_nodes()
    for point, request in requests:
        reason = cluster_check.why_unrunnable(request, partitions, nodes)
        if reason:
            raise UserError(f"{point.config_key} point {point.point_id} ({point.exp_name}) can never run here: {reason}")


def submit_key(key: str, points: list[Point], loaded: Loaded, args: argparse.Namespace, tree: ResultsTree) -> KeyReport:
    profile = _profile(points[0], loaded)
    assert profile.slurm is not None
    sweep = tree.sweep(key, ledger.sweep_id_for(key, points))
    report = KeyReport(key, sweep.sweep_id, str(sweep.path))
    serving = _serving_for(points, profile, loaded)
    with locked(tree.key_lock(key)):
        report.decisions = _decide(points, tree, sweep, args.force, args.only_failed, serving)
        chosen = [d.point for d in report.decisions if d.action == "submit"]
        plan = ArrayPlan(
            sweep=sweep,
            request=slurm_request(profile.slurm, points[0].gpus),
            job_name=f"slurmx:{key}",
            groups=_groups(chosen, profile.slurm.share_server),
            array_parallelism=args.max_parallel or profile.slurm.array_parallelism,
            signal_delay_s=profile.slurm.signal_delay_s,
            setup=_setup_lines(profile, points[0].image),
        )
        if args.dry_run:
            report.sbatch_script = render_sbatch(plan) if chosen else None
            return report
        if not chosen:
            return report
        _check_cluster([(p, slurm_request(profile.slurm, p.gpus)) for p in chosen])
        record = ledger.new_sweep(sweep, points, loaded.masters.files, loaded.clusters.path, profile)
        ledger.write_sweep(sweep, record)
        for p in chosen:
            request = slurm_request(profile.slurm, p.gpus)
            ledger.queue_point(sweep.point(p.point_id), ledger.point_record(p, sweep.sweep_id, profile, request, serving.get(p.point_id)))
        submission = ledger.Submission(at=time.time(), tasks={str(i): g for i, g in enumerate(plan.groups)})
        record.submissions.append(submission)
        ledger.write_sweep(sweep, record)
        job_ids = submit_array(plan)
        report.sbatch_calls = 1
        report.job_ids = job_ids
        for group, job_id in zip(plan.groups, job_ids):
            for point_id in group:
                ledger.record_job_id(sweep.point(point_id), job_id)
        submission.array_job_id = array_id(job_ids)
        submission.sbatch_calls = 1
        ledger.write_sweep(sweep, record)
    return report


def _serving_for(points: list[Point], profile: ClusterProfile, loaded: Loaded) -> dict[str, dict[str, Any]]:
    """Resolved serving recipes per point, validated before anything is written."""
    if profile.runtime is not None and profile.runtime.kind == "command":
        return {}
    return resolve_all(points, loaded.recipes())


def _setup_lines(profile: ClusterProfile, image: str) -> list[str]:
    return sbatch_setup_lines(profile, image)


def run(args: argparse.Namespace) -> int:
    loaded = load_points(args, args.keys)
    _check_submittable(loaded.points)
    tree = ResultsTree(args.results or paths.default_results())
    reports = []
    for key in dict.fromkeys(p.config_key for p in loaded.points):
        points = [p for p in loaded.points if p.config_key == key]
        reports.append(submit_key(key, points, loaded, args, tree))
    if args.json:
        json.dump([r.to_json() for r in reports], sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    console = Console(width=None if sys.stdout.isatty() else 160)
    for report in reports:
        _print_report(console, report, args.dry_run)
    return 0


def _print_report(console: Console, report: KeyReport, dry_run: bool) -> None:
    if dry_run and report.sbatch_script:
        console.print(f"[bold]sbatch script for {report.config_key}[/bold] (dry run, nothing submitted):")
        console.file.write(report.sbatch_script + "\n")
    table = Table(title=f"{report.config_key}  sweep {report.sweep_id}", title_justify="left")
    for column in ("point id", "exp-name", "action", "why"):
        table.add_column(column, no_wrap=True)
    for d in report.decisions:
        action = ("would submit" if dry_run else "submitted") if d.action == "submit" else "skipped"
        table.add_row(d.point.point_id, d.point.exp_name, action, d.why)
    console.print(table)
    if report.job_ids:
        console.print(f"array job {array_id(report.job_ids)}: {len(report.job_ids)} task(s); results in {report.sweep_path}")
    elif not dry_run:
        console.print("nothing to submit")
