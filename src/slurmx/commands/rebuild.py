"""`slurmx rebuild`: rebuild each point's result.json from the raw artifacts it kept, with today's code.

A fixed aggregation or validity gate re-judges old sweeps: each changed result.json is replaced atomically
and the previous one kept beside it as result.json.<UTC stamp>.prev (collect ignores it). Prints what
changed per point (validity and the headline metric, E2E-normalized interactivity P90); a second run
changes nothing and says so. Then the touched sweeps' summaries (summary.csv/.json, aggregates.json,
report.html, plots) are written again, as `slurmx collect` writes them.
Exit 0, 2 for a KEY, SWEEP or POINT that does not exist.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slurmx import paths
from slurmx.collect import collect as col
from slurmx.collect import finish
from slurmx.collect.rebuild import Outcome, rebuild_run, runs_of
from slurmx.store import atomic
from slurmx.store.targets import resolve
from slurmx.store.tree import ResultsTree, SweepDir


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "rebuild",
        help="rebuild result.json files from their raw artifacts with today's code",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("targets", nargs="+", metavar="KEY|SWEEP|POINT", help="config keys, sweeps or points")
    parser.add_argument(
        "--results", type=Path, metavar="DIR", help="results root (default: ./results or $SLURMX_RESULTS)"
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would change; write nothing")
    parser.add_argument("--json", action="store_true", help="print each point's outcome as JSON")
    parser.add_argument("--no-collect", action="store_true", help="do not write the touched sweeps' summaries")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    tree = ResultsTree(args.results or paths.default_results())
    work: dict[Path, tuple[SweepDir, list[Outcome]]] = {}
    for name in args.targets:
        target = resolve(tree, name)
        for sweep in target.sweeps:
            outcomes = work.setdefault(sweep.path, (sweep, []))[1]
            outcomes += [rebuild_run(r, dry_run=args.dry_run) for r in runs_of(sweep, target.point)]
    touched = [sweep for sweep, outs in work.values() if any(o.status == "changed" for o in outs)]
    if touched and not args.dry_run and not args.no_collect:
        _collect(touched)
    outcomes = [o for _, outs in work.values() for o in outs]
    if args.json:
        out = {
            "dry_run": args.dry_run,
            "points": [o.json() for o in outcomes],
            "sweeps": [str(s.path) for s in touched],
        }
        sys.stdout.write(atomic.dumps(out, indent=1) + "\n")
        return 0
    for o in outcomes:
        sys.stdout.write(_line(o, tree.root) + "\n")
    changed = sum(o.status == "changed" for o in outcomes)
    verb = "would change" if args.dry_run else "changed"
    summary = f"{verb} {changed} of {len(outcomes)} result(s)"
    if not changed:
        summary += ": nothing to do, every result.json already matches today's code"
    elif args.dry_run or args.no_collect:
        summary += "; run `slurmx collect` to write the summaries"
    else:
        summary += f"; summaries written again for {len(touched)} sweep(s)"
    sys.stdout.write(summary + "\n")
    return 0


def _collect(sweeps: list[SweepDir]) -> None:
    """The touched sweeps' summaries, plots and report, as collect writes them."""
    collection = col.collect(sweeps)
    written: list[Path] = []
    finish.write_summaries(collection, written, inferencex=False)
    finish.write_plots(collection, written)
    finish.finish(collection, written, None, None, report=True)


def _verdict(valid: bool | None, reason: str | None) -> str:
    return "valid" if valid else f"INVALID ({reason})"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _line(o: Outcome, root: Path) -> str:
    try:
        where = str(o.path.parent.relative_to(root))
    except ValueError:
        where = str(o.path.parent)
    if o.status == "skipped":
        return f"{where}: skipped: {o.why}"
    if o.status == "unchanged":
        return f"{where}: unchanged ({_verdict(o.new_valid, o.new_reason)})"
    parts = []
    if o.verdict_changed:
        parts.append(f"{_verdict(o.old_valid, o.old_reason)} -> {_verdict(o.new_valid, o.new_reason)}")
    if o.old_headline != o.new_headline:
        parts.append(f"E2E-norm interactivity P90 {_num(o.old_headline)} -> {_num(o.new_headline)}")
    kept = f"; previous kept as {o.previous.name}" if o.previous is not None else ""
    return f"{where}: changed: {'; '.join(parts) or 'other fields'}{kept}"
