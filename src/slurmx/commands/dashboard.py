"""`slurmx dashboard [KEY...] --out DIR`: one self-contained HTML page (DIR/index.html) over the history index.

The results tree(s) are ingested first, as `slurmx history` does (--results DIR, repeatable; --db URL, else
$SLURMX_DB, else the SQLite file beside the first tree). Per key (default: every key in the index): its sweeps
with their clusters, trend plots of the headline metric and throughput per arm over time with 95 % intervals
where repeats ran, the newest sweep's North Star frontier, and every change beyond noise linked to the two
sweeps' report.html. The page embeds its plots and fetches nothing: it opens offline.
Exit 0; 2 for bad input (a key the index does not hold, a database it cannot open).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slurmx import paths
from slurmx.collect import report
from slurmx.errors import UserError
from slurmx.history import dashboard, index
from slurmx.store import atomic


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "dashboard",
        help="a static HTML page of every key's trends, frontier and changes beyond noise",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("keys", nargs="*", metavar="KEY", help="config keys (default: every key in the index)")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="where index.html is written")
    parser.add_argument(
        "--results",
        type=Path,
        action="append",
        metavar="DIR",
        help="results tree to ingest first (repeatable; default: ./results or $SLURMX_RESULTS)",
    )
    parser.add_argument(
        "--db", metavar="URL", help=f"database URL or SQLite path (default: ${index.ENV_DB}, else beside the tree)"
    )
    parser.add_argument("--no-ingest", action="store_true", help="read the index as it is (no results tree read)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not report.available():
        raise UserError("the dashboard needs jinja2 and matplotlib: pip install 'slurmx[report]'")
    roots: list[Path] = args.results or [paths.default_results()]
    engine = index.open_index(index.url_of(args.db, roots[0]))
    database = engine.url.render_as_string(hide_password=True)
    try:
        if not args.no_ingest:
            for root in roots:
                if not root.is_dir():
                    raise UserError(f"--results {root}: no such directory")
            ingested = index.ingest(engine, roots)
            print(ingested.line(), file=sys.stderr)
            for sk in ingested.skipped:
                print(f"  not indexed: {sk.path}: {sk.reason}", file=sys.stderr)
        known = dashboard.keys_in(engine)
        missing = [k for k in args.keys if k not in known]
        if missing:
            shown = ", ".join(known[:8]) + (" ..." if len(known) > 8 else "")
            raise UserError(f"no key {', '.join(missing)} in the index {database} (it holds: {shown or 'nothing'})")
        if not known:
            raise UserError(f"the index {database} holds no sweep: give --results DIR")
        views = dashboard.build(engine, list(args.keys) or known)
    finally:
        engine.dispose()
    out: Path = args.out
    page = out / dashboard.PAGE
    atomic.write_text(page, dashboard.render(views, out.resolve(), database))
    flags = sum(len(v.flags) for v in views)
    print(f"dashboard: {page} ({len(views)} key(s), {flags} change(s) beyond noise)")
    return 0
