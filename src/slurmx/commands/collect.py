"""`slurmx collect`: gather result.json files into a comparison table, summaries and plots.

Every result.json is validated against the schema and the validity gate; one that is not counted is
listed with its path and reason, and the newest valid result of each point id and repeat wins. Beside
each sweep: summary.csv, summary.json, aggregates.json (means and 95% intervals over repeats),
report.html, plots/*.png (and agg_<key>.json with --format inferencex).
The headline metric is E2E-normalized interactivity P90, 1 / p90(E2EL/OSL): the Pareto plot's default x
axis, with InferenceX's North Star frontier per model, hardware, precision and arm; --x-metric draws another
view (gated by the North Star winners), the "frontier" column marks each point, summary.json lists winners.
--compare BASELINE (an earlier sweep, a results directory, or InferenceX aggregate JSON files) gives
each matching point's change per metric: better, worse or within noise.
--index reads the rows from the history index (docs/history.md) after an incremental ingest (only new or changed
result.json files are parsed; --db URL names the database, else $SLURMX_DB, else the SQLite file beside the
tree): the same table, and each sweep's files are rewritten only when its results changed.
Exit 0 (also when there is nothing to collect yet), 1 when --fail-on-regression's threshold was
crossed, 2 for a KEY, SWEEP or BASELINE that does not exist.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmx import __version__, paths
from slurmx.collect import collect as col
from slurmx.collect import frontier
from slurmx.errors import UserError
from slurmx.store import atomic
from slurmx.store.targets import find_sweeps
from slurmx.store.tree import ResultsTree, SweepDir

# rich, the comparison, the repeats and the schema behind them are imported where used: a `collect --index` that
# finds nothing changed prints its recorded text and needs none of them
if TYPE_CHECKING:
    from rich.console import Console

    from slurmx.collect import finish
    from slurmx.collect.compare import Baseline, Comparison
    from slurmx.collect.repeats import PointAggregate
    from slurmx.collect.stats import Estimate

# Show a progress bar from this many result files on (a TTY), or always print a count from _MANY.
_PROGRESS_FROM = 200
_MANY = 2000


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "collect",
        help="collect results into a comparison table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "targets", nargs="*", metavar="KEY|SWEEP", help="config keys, sweep ids or KEY/SWEEP (default: all)"
    )
    parser.add_argument(
        "--results", type=Path, metavar="DIR", help="results root (default: ./results or $SLURMX_RESULTS)"
    )
    parser.add_argument("--json", action="store_true", help="print rows and skipped files as JSON")
    parser.add_argument("--csv", type=Path, metavar="PATH", help="also write every row to one CSV file")
    parser.add_argument(
        "--format",
        choices=("table", "inferencex"),
        default="table",
        help="inferencex: also write InferenceX's agg_<key>.json (a list of aggregates) beside each sweep",
    )
    parser.add_argument(
        "--x-metric",
        choices=tuple(frontier.VIEWS),
        default=frontier.DEFAULT_VIEW,
        help="the Pareto view's x axis and frontier (default: %(default)s, the North Star; "
        "intvty_p50 is the old 1/ITL p50 view)",
    )
    parser.add_argument("--no-plots", action="store_true", help="do not write plots/*.png")
    parser.add_argument("--no-report", action="store_true", help="do not write report.html")
    parser.add_argument(
        "--compare",
        nargs="+",
        metavar="BASELINE",
        help="compare with an earlier sweep (KEY/SWEEP or SWEEP), a results directory, or InferenceX agg_*.json files",
    )
    parser.add_argument(
        "--fail-on-regression",
        metavar="PCT",
        help="with --compare: exit 1 when a point got worse beyond noise by more than PCT (e.g. 5%%)",
    )
    parser.add_argument(
        "--index",
        action="store_true",
        help="read the rows from the history index after an incremental ingest; rewrite only changed sweeps' files",
    )
    parser.add_argument("--db", metavar="URL", help="the index's database (implies --index; default: beside the tree)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = args.results or paths.default_results()
    tree = ResultsTree(root)
    sweeps, missing = find_sweeps(tree, list(args.targets))
    if missing:
        known = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        hint = f" (keys under {root}: {', '.join(known[:8])}{' ...' if len(known) > 8 else ''})" if known else ""
        raise UserError(f"no config key or sweep named {', '.join(missing)} in {root}{hint}")
    threshold, baseline = None, None
    if args.fail_on_regression or args.compare:
        from slurmx.collect.compare import load_baseline, parse_threshold

        threshold = parse_threshold(args.fail_on_regression) if args.fail_on_regression else None
        if threshold is not None and not args.compare:
            raise UserError("--fail-on-regression needs --compare BASELINE")
        baseline = load_baseline(args.compare, tree) if args.compare else None
    if baseline is not None:  # the baseline's own sweeps are not part of this run
        sweeps = [s for s in sweeps if s.path not in {b.path for b in baseline.sweeps}]
    if args.index or args.db is not None:
        return _run_indexed(args, root, sweeps, baseline, threshold)
    err = _stderr()
    listed = {s.path: col.result_files(s) for s in sweeps}
    files = sum(len(v) for v in listed.values())
    if files == 0:
        return _nothing(args, root, err)

    with _progress(err, files) as advance:
        collection = col.collect(sweeps, on_file=advance, files=listed)
    return _finish(args, root, collection, baseline, threshold, err)[0]


def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def _nothing(args: argparse.Namespace, root: Path, err: Console) -> int:
    note = f"nothing to collect: no result.json under {root}"
    if args.json:
        sys.stdout.write(atomic.dumps({"root": str(root), "sweeps": [], "skipped": [], "note": note}, indent=1) + "\n")
    else:
        err.print(note, soft_wrap=True, markup=False, highlight=False)
    return 0


def _run_indexed(
    args: argparse.Namespace,
    root: Path,
    sweeps: list[SweepDir],
    baseline: Baseline | None,
    threshold: float | None,
) -> int:
    """The rows from the index after an incremental ingest; only sweeps whose rows or options changed since the
    last `collect --index` get their files rewritten (every sweep with --compare: its report holds the comparison)."""
    from slurmx.history import index, replay, rows

    engine = index.open_index(index.url_of(args.db, root))
    try:
        index.ingest(engine, [root], only={s.path.resolve() for s in sweeps})
        options = (__version__, args.x_metric, args.format, args.no_plots, args.no_report)
        # what the printed text is a function of, beyond the index's state of the sweeps (no --csv, no --compare:
        # those write or compare anew on every call)
        replayable = baseline is None and args.csv is None
        key = replay.key([*options, args.json, str(root), args.db, *args.targets])
        state = rows.state(engine, sweeps) if replayable else ""
        kept = rows.replay_of(engine, key) if replayable else None
        if kept is not None and kept[0] == state and all(Path(p).is_file() for p in kept[1]):
            try:
                replay.play(kept[2])
            except BrokenPipeError:  # `slurmx collect | head` is fine; silence the flush at exit
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        err = _stderr()
        chunks: list[tuple[int, str]] = []
        dry: list[list[tuple[int, str]]] | None = [] if replayable else None
        with replay.recording(chunks) if replayable else nullcontext():
            items = rows.read_rows(engine, sweeps)
            files = sum(len(v) for v in items.values())
            if files == 0:
                return _nothing(args, root, err)
            if files >= _MANY:
                err.print(f"collecting {files} result files ...")
            collection = col.combine((s, items[s.path]) for s in sweeps)
            before = rows.digests(engine, sweeps)
            now = {sr.sweep.path: rows.digest(sr, options) for sr in collection.sweeps}
            changed = {
                p
                for p, d in now.items()
                if baseline is not None or before.get(p) != d or not SweepDir(p).summary_json.is_file()
            }
            for sr in collection.sweeps:
                if sr.sweep.path in changed and (not args.no_report or args.format == "inferencex"):
                    sr.rows = [replace(r, result=r.parsed()) for r in sr.rows]  # the report reads the files' details
            code, wrote = _finish(args, root, collection, baseline, threshold, err, only=changed, dry=dry)
        if wrote:
            rows.record(engine, {p: now[p] for p in changed}, sweeps)
            if dry and code == 0:
                # what the next call prints while nothing changes: this one's text, with no file written
                shown, unwritten = dry
                blob = replay.encode(chunks[: len(chunks) - len(shown)] + unwritten)
                summaries = [str(sr.sweep.summary_json) for sr in collection.sweeps if sr.rows or sr.skipped]
                if blob is not None:
                    rows.keep_replay(engine, key, state, summaries, blob)
        return code
    finally:
        engine.dispose()


def _finish(
    args: argparse.Namespace,
    root: Path,
    collection: col.Collection,
    baseline: Baseline | None,
    threshold: float | None,
    err: Console,
    only: set[Path] | None = None,
    dry: list[list[tuple[int, str]]] | None = None,
) -> tuple[int, bool]:
    """Write the files beside each sweep (of `only`, when given) and print; (exit code, whether all were written).
    `dry`, when given, gets [what was printed, what would have been printed had no file been written]."""
    from slurmx.collect import finish

    written: list[Path] = []
    wrote = True
    try:
        finish.write_summaries(collection, written, inferencex=args.format == "inferencex", only=only)
        plot_note = None if args.no_plots else finish.write_plots(collection, written, args.x_metric, only)
        extras = finish.finish(
            collection, written, baseline, threshold, report=not args.no_report, x_metric=args.x_metric, only=only
        )
    except (atomic.StorageError, OSError) as exc:
        wrote = False
        # a read-only or full results tree: the table is still worth printing
        plot_note = f"summaries and plots not written beside the sweeps: {exc}"
        extras = finish.finish(collection, [], baseline, threshold, report=False, write=False, x_metric=args.x_metric)
    wrote = wrote and plot_note is None and extras.report_note is None  # a missing extra: rewrite next time
    if args.csv:
        atomic.write_text(args.csv, col.csv_text(col.sorted_rows(collection.rows)))
        written.append(args.csv)

    try:
        if dry is None:
            _report(args, collection, root, written, plot_note, err, extras)
        else:
            from slurmx.history import replay

            shown: list[tuple[int, str]] = []
            with replay.recording(shown):
                _report(args, collection, root, written, plot_note, err, extras)
            unwritten = shown
            if written:
                unwritten = []
                with replay.recording(unwritten, silent=True):
                    _report(args, collection, root, [], plot_note, err, extras)
            dry[:] = [shown, unwritten]
    except BrokenPipeError:  # `slurmx collect | head` is fine; silence the flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1 if extras.regressed else 0, wrote


def _report(
    args: argparse.Namespace,
    collection: col.Collection,
    root: Path,
    written: list[Path],
    plot_note: str | None,
    err: Console,
    extras: finish.Extras,
) -> None:
    from slurmx.collect.repeats import rows_have_repeats

    if args.json:
        _print_json(collection, root, written, plot_note, extras.json())
    else:
        view = frontier.view_named(args.x_metric)
        if rows_have_repeats(collection.rows):
            _print_intervals(extras.all)
        else:
            _print_tables(collection, view)
        _print_frontier(collection, view)
        if extras.comparison is not None:
            _print_comparison(extras.comparison)
        _print_skipped(err, collection)
        for note in (plot_note, extras.report_note):
            if note:
                err.print(note, soft_wrap=True, markup=False, highlight=False)  # hints like 'slurmx[report]'

        for path in written:
            if path.name == "report.html":
                err.print(f"report: {path}", soft_wrap=True, markup=False, highlight=False)
        shown = ", ".join(_short(p, root) for p in written[:6]) + (" ..." if len(written) > 6 else "")
        err.print(f"wrote {len(written)} file(s): {shown}", soft_wrap=True, markup=False, highlight=False)


@contextmanager
def _progress(err: Console, files: int) -> Iterator[Callable[[int], None] | None]:
    if err.is_terminal and files >= _PROGRESS_FROM:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("collecting"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=err, transient=True) as progress:
            task = progress.add_task("collect", total=files)
            yield lambda n: progress.advance(task, n)
        return
    if files >= _MANY:
        err.print(f"collecting {files} result files ...")
    yield None


def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return "-"
    return format(value, spec)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


_HEADERS = (
    ("parallelism", "<"), ("arm", "<"), ("conc", ">"), ("tok/s/GPU", ">"), ("E2E-norm p90", ">"),
    ("tok/s/user", ">"),
    ("TTFT p50 s", ">"), ("TTFT p90 s", ">"), ("e2e p90 s", ">"), ("err %", ">"), ("GPU hit", ">"),
    ("CPU hit", ">"), ("ext hit", ">"), ("tier hit", ">"), ("tput vs base", ">"), ("TTFT p90 vs base", ">"),
    ("J/out tok", ">"), ("frontier", "<"), ("validity", "<"),
)  # fmt: skip
# rich renders ~1 ms per row; beyond this many rows a plain fixed-width table keeps collect fast
_RICH_MAX_ROWS = 300


def _cells(v: col.Row, view: frontier.View) -> list[str]:
    return [
        v.parallelism, v.arm, str(v.conc), _fmt(v.tput_per_gpu, ".1f"), _fmt(v.e2e_norm_intvty_p90, ".1f"),
        _fmt(v.intvty_p50, ".1f"),
        _fmt(v.ttft_p50_s, ".3f"), _fmt(v.ttft_p90_s, ".3f"), _fmt(v.e2el_p90_s, ".2f"),
        f"{100 * v.error_rate:.1f}", _pct(v.gpu_hit_rate), _pct(v.cpu_hit_rate),
        _pct(v.external_hit_rate), _tier(v), _ratio(v.tput_ratio),
        _ratio(v.ttft_p90_ratio) + ("*" if v.ratio_uncertified and v.ttft_p90_ratio is not None else ""),
        _fmt(v.j_per_out_tok, ".3g"), _frontier_mark(v, view), _validity(v),
    ]  # fmt: skip


def _frontier_mark(v: col.Row, view: frontier.View) -> str:
    """On the shown view's frontier (a North Star winner that view does not dominate), else why not."""
    if not v.valid:
        return "-"
    if view.key in v.frontier_views.split(";"):
        return "North Star" if view.key == frontier.NORTH_STAR.key else f"North Star, {view.short}"
    return "North Star only" if v.north_star else "dominated"


def _print_frontier(collection: col.Collection, view: frontier.View) -> None:
    """Each sweep's winners per comparison group, on the shown view's frontier, by point id."""
    for sr in collection.sweeps:
        for group in col.frontier_json(sr.rows):
            ids = group["views"][view.key]
            name = "North Star frontier" if view.key == frontier.NORTH_STAR.key else f"{view.short} frontier"
            where = f"{sr.sweep.config_key}/{sr.sweep.sweep_id} {group['arm']}"
            dominated = len(group["dominated"])
            sys.stdout.write(
                f"  {name} ({where}): {', '.join(ids) or 'none'}; {dominated} dominated point(s) kept, marked\n"
            )
    sys.stdout.flush()


def _tier(v: col.Row) -> str:
    """Tokens the engine received from the tier over prompt tokens; the tier's own figure beside it
    where the two disagree by more than a point."""
    engine, tier = v.tier_hit_rate, v.tier_side_hit_rate
    if engine is None or v.arm == "none":
        return "-"
    if tier is not None and abs(tier - engine) > 0.01:
        return f"{_pct(engine)} (tier {_pct(tier)})"
    return _pct(engine)


def _validity(v: col.Row) -> str:
    if not v.valid:
        reason = str(v.invalid_reason)  # in full on stderr, below the table
        return "INVALID: " + (reason if len(reason) <= 32 else reason[:31] + "…")
    return v.labels or "ok"


def _print_tables(collection: col.Collection, view: frontier.View) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 280)  # room for the frontier column
    by_key: dict[str, list[col.Row]] = {}
    for row in col.sorted_rows(collection.rows):
        by_key.setdefault(row.config_key, []).append(row)
    plain = len(collection.rows) > _RICH_MAX_ROWS
    for key, rows in by_key.items():
        sweeps = sorted({r.sweep_id for r in rows})
        title = f"{key}: {len(rows)} points (sweep {', '.join(sweeps)})"
        groups: list[list[list[str]]] = []
        previous = None
        for row in rows:
            group = (row.parallelism, row.arm)
            if group != previous:
                groups.append([])
                previous = group
            groups[-1].append(_cells(row, view))
        if plain:
            sys.stdout.write(_plain_table(title, groups))
        else:
            table = Table(title=title, title_justify="left")
            for name, align in _HEADERS:
                table.add_column(name, justify="left" if align == "<" else "right", no_wrap=True)
            for i, group_rows in enumerate(groups):
                if i:
                    table.add_section()
                for cells in group_rows:
                    table.add_row(*cells)
            console.print(table)
        for row in rows:  # a multinode point: its nodes and how its data-parallel ranks shared the requests
            if row.nodes:
                ranks = f", requests by data-parallel rank {row.requests_by_rank}" if row.requests_by_rank else ""
                sys.stdout.write(f"  {row.exp_name} ran on {row.nodes.replace(';', ', ')}{ranks}\n")
        for row in rows:  # percentiles the point's sample cannot support (results/certify.py)
            if row.uncertified:
                sys.stdout.write(f"  {row.exp_name} ({row.arm}): {row.uncertified}\n")
            if row.ratio_uncertified and row.ttft_p90_ratio is not None:
                sys.stdout.write(f"  * {row.exp_name} ({row.arm}) TTFT p90 vs base: {row.ratio_uncertified}\n")
        bases = sorted({r.baseline_arm for r in rows if r.baseline_arm})
        if bases:
            sys.stdout.write(f"  ratios are over the {' / '.join(bases)} arm at the same parallelism and concurrency\n")
        sys.stdout.flush()


def _plain_table(title: str, groups: list[list[list[str]]]) -> str:
    widths = [len(name) for name, _ in _HEADERS]
    for group in groups:
        for cells in group:
            widths = [max(w, len(c)) for w, c in zip(widths, cells)]

    def line(cells: list[str]) -> str:
        return "  ".join(format(c, f"{a}{w}") for c, (_, a), w in zip(cells, _HEADERS, widths)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    out = [title, line([name for name, _ in _HEADERS]), rule]
    for i, group in enumerate(groups):
        if i:
            out.append("")
        out.extend(line(cells) for cells in group)
    return "\n".join(out) + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _print_skipped(err: Console, collection: col.Collection) -> None:
    from rich.text import Text

    skipped = collection.skipped
    invalid = [s for s in skipped if s.kind == "invalid"]
    superseded = [s for s in skipped if s.kind == "superseded"]
    for line in collection.warnings:
        err.print(Text.assemble(("warning:", "bold yellow"), f" {line}"), soft_wrap=True)
    refused = [r for r in collection.rows if not r.valid]
    if refused:
        err.print(f"{len(refused)} invalid point(s) shown but left out of every ratio:")
        for r in refused:
            err.print(f"  {r.path}: {r.invalid_reason}", markup=False, highlight=False, soft_wrap=True)
    if invalid:
        err.print(f"[bold yellow]{len(invalid)} result file(s) not counted:[/]")
        for s in invalid:
            err.print(f"  {s.path}: {s.reason}", markup=False, highlight=False, soft_wrap=True)
    if superseded:
        err.print(f"{len(superseded)} older result(s) superseded by a newer one for the same point:")
        for s in superseded:
            err.print(f"  {s.path}: {s.reason}", markup=False, highlight=False, soft_wrap=True)


def _print_json(
    collection: col.Collection, root: Path, written: list[Path], plot_note: str | None, extra: dict[str, Any]
) -> None:
    out = {
        "root": str(root),
        "sweeps": [
            {
                "config_key": sr.sweep.config_key,
                "sweep_id": sr.sweep.sweep_id,
                "path": str(sr.sweep.path),
                "rows": [r.columns() for r in col.sorted_rows(sr.rows)],
                "skipped": [s.json() for s in sr.skipped],
                "frontier": col.frontier_json(sr.rows),
            }
            for sr in collection.sweeps
        ],
        "skipped": [s.json() for s in collection.skipped],
        "warnings": collection.warnings,
        "written": [str(p) for p in written],
    }
    if plot_note:
        out["note"] = plot_note
    out.update(extra)
    sys.stdout.write(atomic.dumps(out, indent=1) + "\n")  # one write: json.dump writes every token


def _short(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _est(est: Estimate | None, spec: str) -> str:
    return "-" if est is None else est.text(spec)


def _print_intervals(aggs: list[PointAggregate]) -> None:
    """One row per point over its repeats: mean ±95 % half-width (as % of the mean), ratios with intervals."""
    from rich.console import Console
    from rich.table import Table

    from slurmx.collect.repeats import METRICS

    console = Console(width=None if sys.stdout.isatty() else 220)
    by_key: dict[str, list[PointAggregate]] = {}
    for a in aggs:
        by_key.setdefault(a.first.config_key, []).append(a)
    for key, members in by_key.items():
        title = f"{key}: {len(members)} points, means over repeats with 95% intervals (±% of the mean)"
        table = Table(title=title, title_justify="left")
        for name in (
            "parallelism",
            "arm",
            "conc",
            "repeats",
            *(m.label for m in METRICS),
            "tput vs base",
            "TTFT p90 vs base",
        ):
            table.add_column(name, justify="left" if name in ("parallelism", "arm") else "right", no_wrap=True)
        previous = None
        for a in members:
            v = a.first
            if previous is not None and (v.parallelism, v.arm) != previous:
                table.add_section()
            previous = (v.parallelism, v.arm)
            ratios = [a.ratios[k].text() if k in a.ratios else "-" for k in ("tput_per_gpu", "ttft_p90_s")]
            table.add_row(
                v.parallelism,
                v.arm,
                str(v.conc),
                f"{a.n}/{a.repeats_planned}",
                *(_est(a.estimates.get(m.key), m.spec) for m in METRICS),
                *ratios,
            )
        console.print(table)
        modes = sorted({a.repeat_mode for a in members if a.repeat_mode})
        bases = sorted({a.baseline_arm for a in members if a.baseline_arm})
        if bases:
            how = (
                "paired by repeat" if modes == ["separate-tasks"] else "unpaired (repeats ran back to back per server)"
            )
            sys.stdout.write(
                f"  ratios over the {' / '.join(bases)} arm, {how}; an interval containing 1 is within noise\n"
            )
    sys.stdout.flush()


def _print_comparison(comparison: Comparison) -> None:
    from rich.console import Console
    from rich.table import Table

    from slurmx.collect.compare import describe
    from slurmx.collect.repeats import METRICS

    console = Console(width=None if sys.stdout.isatty() else 220)
    table = Table(title=f"compared with {comparison.label}", title_justify="left")
    table.add_column("point", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for m in METRICS:
        table.add_column(m.label, justify="right", no_wrap=True)
    style = {"better": "green", "worse": "red", "within noise": "dim"}
    for p in comparison.points:
        changes = {c.metric.key: c for c in p.changes}
        cells = []
        for m in METRICS:
            c = changes.get(m.key)
            cells.append("-" if c is None else f"[{style.get(c.verdict, '')}]{c.change_pct:+.1f}% {c.verdict}[/]")
        table.add_row(describe(p.current), f"[{style.get(p.verdict, '')}]{p.verdict}[/]", *cells)
    console.print(table)
    for a in comparison.only_current:
        console.print(f"  only here: {describe(a)}", markup=False, highlight=False)
    for a in comparison.only_baseline:
        console.print(f"  only in the baseline: {describe(a)}", markup=False, highlight=False)
    for p, c in comparison.regressions():
        console.print(
            f"  regression: {describe(p.current)}: {c.metric.label} {c.change_pct:+.1f}% ({c.ratio.text()})",
            markup=False,
            highlight=False,
        )
    console.print(comparison.summary_line(), markup=False, highlight=False)
