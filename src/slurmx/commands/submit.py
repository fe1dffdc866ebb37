"""`slurmx submit`: validate, expand and submit config keys as Slurm arrays; safe to run twice."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from slurmx import paths
from slurmx.commands.common import add_config_options, add_until_options, load_points, report_key_errors, until_of
from slurmx.errors import UserError
from slurmx.slurm.sbatch import array_id
from slurmx.store import atomic
from slurmx.store.tree import ResultsTree
from slurmx.submit.decide import Mode
from slurmx.submit.stage import KeyReport, submit_key


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "submit",
        help="submit config keys' sweep points as Slurm jobs",
        description="Expand config keys into sweep points and submit them as Slurm arrays: one per distinct Slurm request "
        "(GPU count, features, memory, time) of a key. "
        "Points with a valid result, or queued or running, are skipped.",
    )
    parser.add_argument("keys", nargs="+", metavar="KEY", help="config keys to submit")
    parser.add_argument("--dry-run", action="store_true", help="print the sbatch script and the points; submit nothing")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true", help="rerun every point, even those with a valid result")
    mode.add_argument("--only-failed", action="store_true", help="rerun only failed, cancelled and timed-out points")
    parser.add_argument("--results", type=Path, metavar="DIR", help="results tree (default: ./results)")
    parser.add_argument("--max-parallel", type=int, metavar="N", help="array parallelism cap (default: the profile's)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="N",
        help="run each point N times (separate array tasks, or back to back on a shared server); "
        "collect reports means and 95%% intervals",
    )
    parser.add_argument("--json", action="store_true", help="print what was submitted and skipped as JSON")
    add_until_options(parser)
    add_config_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.repeats < 1:
        raise UserError(f"--repeats {args.repeats}: must be 1 or more")
    until = until_of(args)
    inputs = load_points(args, args.keys)
    tree = ResultsTree(args.results or paths.default_results())
    mode = Mode(force=args.force, only_failed=args.only_failed)
    reports: list[KeyReport] = []
    refused: list[UserError] = []
    for key in inputs.config_keys():
        try:  # a key's own problem (what slurmx cannot run, a recipe, a profile, the cluster) blocks only that key
            reports.append(
                submit_key(
                    key,
                    inputs,
                    tree,
                    mode,
                    dry_run=args.dry_run,
                    max_parallel=args.max_parallel,
                    repeats=args.repeats,
                    until=until,
                )
            )
        except UserError as error:
            refused.append(error)
    if args.json:
        sys.stdout.write(atomic.dumps([r.to_json() for r in reports], indent=1) + "\n")
    else:
        console = Console(width=None if sys.stdout.isatty() else 160)
        for report in reports:
            _print_report(console, report, args.dry_run)
            if until is not None and report.decisions:
                console.print(f"each point replayed {until.summary()}", markup=False, highlight=False)
    return report_key_errors(inputs, refused)


def _print_report(console: Console, report: KeyReport, dry_run: bool) -> None:
    for array in report.arrays if dry_run else []:
        console.print(
            Text.assemble(
                (f"sbatch script for {report.config_key}", "bold"),
                f", {array.tasks} task(s) asking {array.request} (dry run, nothing submitted):",
            )
        )
        console.file.write(f"{array.sbatch_script}\n")
    table = Table(title=f"{report.config_key}  sweep {report.sweep_id}", title_justify="left")
    repeated = any(d.repeat > 1 for d in report.decisions)
    for column in ("point id", *(("repeat",) if repeated else ()), "exp-name", "action", "why"):
        table.add_column(column, no_wrap=True)
    for d in report.decisions:
        action = ("would submit" if dry_run else "submitted") if d.action == "submit" else "skipped"
        repeat = (str(d.repeat),) if repeated else ()
        table.add_row(d.item.point.point_id, *repeat, d.item.point.exp_name, action, d.why)
    console.print(table)
    for array in report.arrays if not dry_run else []:
        console.print(
            f"array job {array_id(array.job_ids)}: {array.tasks} task(s) asking {array.request}", markup=False
        )
    if report.job_ids:
        console.print(f"results in {report.sweep_path}", markup=False, highlight=False)
    elif not dry_run:
        console.print("nothing to submit")
