"""`slurmx status`: where every point of every sweep is, from the tree and one sacct call."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from slurmx import paths
from slurmx.status import UNREADABLE, SweepStatus, sweep_statuses
from slurmx.store import atomic
from slurmx.store.targets import resolve
from slurmx.store.tree import ResultsTree, SweepDir

_STYLE = {
    "completed": "green",
    "running": "cyan",
    "pending": "yellow",
    "failed": "red",
    "unreadable": "red",
    "timeout": "red",
    "cancelled": "magenta",
    "node failure": "red",
    "preempted": "magenta",
    "out of memory": "red",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("status", help="show the state of every point of every sweep", description=__doc__)
    parser.add_argument("target", nargs="?", metavar="KEY|SWEEP", help="one config key or sweep id (default: all)")
    parser.add_argument("--results", type=Path, metavar="DIR", help="results tree (default: ./results)")
    parser.add_argument("--json", action="store_true", help="print a JSON list of point statuses")
    parser.add_argument("--watch", action="store_true", help="refresh in place until every point has ended")
    parser.add_argument("--interval", type=float, default=5.0, metavar="S", help="--watch refresh period (default 5)")
    parser.set_defaults(func=run)


def _fmt_elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def render(statuses: list[SweepStatus], source: str) -> Group:
    parts: list[Table | Text] = []
    for sweep in statuses:
        counts: dict[str, int] = {}
        for p in sweep.points:
            counts[p.state] = counts.get(p.state, 0) + 1
        summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        if sweep.problem:
            parts.append(Text(f"{sweep.config_key}  sweep {sweep.sweep_id}: {sweep.problem}", style="red"))
            continue
        table = Table(title=f"{sweep.config_key}  sweep {sweep.sweep_id}: {summary}", title_justify="left")
        repeated = any(p.repeats > 1 for p in sweep.points)
        columns = ("point id", "parallelism", "backend", "conc", "state", "stage", "node", "elapsed", "try", "job")
        for column in (*columns, *(("repeats done",) if repeated else ())):
            table.add_column(column, no_wrap=True)
        for p in sweep.points:
            state = Text(p.state, style=_STYLE.get(p.state, ""))
            if p.state == "pending" and p.reason:
                state.append(f" ({p.reason})", style="dim")
            table.add_row(
                p.point_id,
                p.parallelism,
                p.backend,
                str(p.conc),
                state,
                p.stage or "-",
                p.node or "-",
                _fmt_elapsed(p.elapsed_s),
                str(p.attempt or "-"),
                p.job_id or "-",
                *((f"{p.repeats_done}/{p.repeats}",) if repeated else ()),
            )
        parts.append(table)
        for p in sweep.points:
            if p.state in (
                "failed",
                "timeout",
                "node failure",
                "out of memory",
                "cancelled",
                "preempted",
                UNREADABLE,
            ) and (p.reason or p.log_tail):
                which = f" repeat {p.repeat}" if p.repeats > 1 else ""
                text = Text(
                    f"{p.point_id}{which} {p.state}: {p.reason or 'no reason recorded'}\n",
                    style=_STYLE.get(p.state, ""),
                )
                if p.log:
                    text.append(f"  last lines of {p.log}:\n", style="dim")
                    text.append("".join(f"    {line}\n" for line in p.log_tail), style="dim")
                parts.append(text)
    if not statuses:
        parts.append(Text("no sweeps in the results tree"))
    parts.append(Text(f"states from {source}", style="dim"))
    return Group(*parts)


def summary_line(statuses: list[SweepStatus]) -> str:
    counts: dict[str, int] = {}
    for sweep in statuses:
        for p in sweep.points:
            label = f"{p.state} ({p.stage})" if p.state == "running" else p.state
            counts[label] = counts.get(label, 0) + 1
    return ", ".join(f"{n} {label}" for label, n in sorted(counts.items()))


def _watch_lines(console: Console, sweeps: list[SweepDir], interval: float) -> int:
    """--watch without a terminal (CI logs, pipes): one line per change, the table at the end."""
    last = ""
    while True:
        statuses, query = sweep_statuses(sweeps)
        line = summary_line(statuses)
        if line != last:
            console.print(f"{time.strftime('%H:%M:%S')}  {line}", highlight=False)
            last = line
        if all(p.ended for s in statuses for p in s.points):
            console.print(render(statuses, query.source))
            return 0
        time.sleep(interval)


def run(args: argparse.Namespace) -> int:
    tree = ResultsTree(args.results or paths.default_results())
    target = resolve(tree, args.target, allow_point=False)
    statuses, query = sweep_statuses(target.sweeps)
    if args.json:
        sys.stdout.write(atomic.dumps([p.to_json() for s in statuses for p in s.points], indent=1) + "\n")
        return 0
    console = Console(width=None if sys.stdout.isatty() else 160)
    if not args.watch:
        console.print(render(statuses, query.source))
        return 0
    if not sys.stdout.isatty():
        return _watch_lines(console, target.sweeps, args.interval)
    with Live(render(statuses, query.source), console=console, refresh_per_second=2) as live:
        while not all(p.ended for s in statuses for p in s.points):
            time.sleep(args.interval)
            statuses, query = sweep_statuses(target.sweeps)
            live.update(render(statuses, query.source))
    return 0
