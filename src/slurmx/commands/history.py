"""`slurmx history KEY`: every sweep's value per point identity, oldest first, from the index (a database).

--point ID follows one point id, --arm/--conc/--parallelism/... the identities with those values.

The results tree(s) are ingested first (incremental: only new or changed result.json files are read), into
--db URL, else $SLURMX_DB, else an SQLite file beside the (first) results tree; a postgresql:// URL holds a
team's history across trees and clusters. Each point identity (model, hardware, precision, parallelism, spec
decoding, backend, concurrency: what `collect --compare` matches on) gets its series of --metric with 95 %
intervals where a sweep ran repeats, its noise floor, and the changes beyond it, each naming the sweep where it
happened and what changed in what ran there (history/changes.py states the method and false-alarm rate).
Exit 0; 1 with --fail-on-regression PCT when a point's newest sweep is worse beyond noise by more than PCT;
2 for bad input (a key the index does not hold, a database it cannot open).
"""

from __future__ import annotations

import argparse
import datetime
import sys

from slurmx.collect.compare import parse_threshold
from slurmx.collect.repeats import METRIC
from slurmx.commands.indexed import add_index_options, open_and_ingest
from slurmx.errors import UserError
from slurmx.history import changes as ch
from slurmx.history import index
from slurmx.history.series import FILTERS, Only, Series, history
from slurmx.store import atomic

DEFAULT_METRIC = "e2e_norm_intvty_p90"  # collect's headline (North Star) metric


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "history",
        help="every sweep's value per point over time, with changes beyond noise",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("key", metavar="KEY", help="config key")
    add_index_options(parser)
    parser.add_argument(
        "--metric", choices=tuple(METRIC), default=DEFAULT_METRIC, help="the metric to follow (default: %(default)s)"
    )
    parser.add_argument("--point", metavar="ID", help="only this point id's results")
    for name, kind in FILTERS:
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, type=kind, metavar=name.upper(), help=f"only identities with this {name}")
    parser.add_argument("--json", action="store_true", help="print the series as JSON")
    parser.add_argument(
        "--fail-on-regression",
        metavar="PCT",
        help="exit 1 when a point's newest sweep is worse beyond noise by more than PCT (e.g. 5%%)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    threshold = parse_threshold(args.fail_on_regression) if args.fail_on_regression else None
    engine = open_and_ingest(args)
    try:
        metric = METRIC[args.metric]
        series = history(engine, args.key, metric, only_of(args))
        skipped = index.skipped_files(engine, args.key)
    finally:
        engine.dispose()
    if not series:
        only = only_of(args).text()
        raise UserError(
            f"no valid result of key {args.key!r}{' with ' + only if only else ''} in the index "
            f"({engine.url.render_as_string(hide_password=True)})"
        )
    regressions = [(s, f) for s in series if threshold is not None and (f := s.newest_regression(threshold))]
    if args.json:
        out = {
            "key": args.key,
            "metric": metric.key,
            "method": {"window": ch.WINDOW, "z_crit": ch.Z_CRIT, "min_history": ch.MIN_HISTORY},
            "series": [s.json() for s in series],
            "skipped": [sk.json() for sk in skipped],
            "fail_on_regression": threshold,
            "regressions": [f"{s.label}: {f.change.pct:+.1f}% at {f.sweep.sweep_id}" for s, f in regressions],
        }
        sys.stdout.write(atomic.dumps(out, indent=1) + "\n")
    else:
        for s in series:
            _print_series(s, metric.label, metric.spec)
        if skipped:
            print(f"{len(skipped)} result file(s) of {args.key} not indexed (corrupt or mismatched):", file=sys.stderr)
            for sk in skipped:
                print(f"  {sk.path}: {sk.reason}", file=sys.stderr)
        for s, f in regressions:
            print(f"regression: {s.label}: {metric.label} {f.change.pct:+.1f}% at sweep {f.sweep.sweep_id}")
    return 1 if regressions else 0


def only_of(args: argparse.Namespace) -> Only:
    """--point and the identity filters given."""
    given = tuple((name, value) for name, _ in FILTERS if (value := getattr(args, name)) is not None)
    return Only(args.point, given)


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.datetime.fromtimestamp(stamp, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M")


def _print_series(s: Series, label: str, spec: str) -> None:
    floor = f"±{s.floor.pct:.1f}% per sweep (from {s.floor.source})" if s.floor.pct is not None else s.floor.source
    print(f"{s.label}: {label}, noise floor {floor}")
    at = {f.sweep.sweep_id: f for f in s.flagged}
    for p in s.points:
        mark = ""
        if (f := at.get(p.sweep_id)) is not None:
            what = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in f.what_changed.items()) or "nothing recorded changed"
            mark = f"  <- {f.verdict} {f.change.pct:+.1f}% (z {f.change.z:+.1f}); what ran: {what}"
        print(f"  {_when(p.ran_at)}  {p.cluster or '-':<10} {p.sweep_id:<24} {p.estimate.text(spec):>18}{mark}")
