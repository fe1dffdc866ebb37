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
from pathlib import Path

from slurmx.collect import report
from slurmx.commands.indexed import add_index_options, open_and_ingest
from slurmx.errors import UserError
from slurmx.history import dashboard
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
    add_index_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not report.available():
        raise UserError("the dashboard needs jinja2 and matplotlib: pip install 'slurmx[report]'")
    engine = open_and_ingest(args)
    database = engine.url.render_as_string(hide_password=True)
    try:
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
