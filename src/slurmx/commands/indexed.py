"""What the subcommands over the history index share: --results/--db/--no-ingest, and the ingest they run first."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from slurmx import paths
from slurmx.errors import UserError
from slurmx.history import index

if TYPE_CHECKING:
    from sqlalchemy import Engine


def add_index_options(parser: argparse.ArgumentParser) -> None:
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


def open_and_ingest(args: argparse.Namespace) -> Engine:
    """The index the options name, with their results trees ingested first unless --no-ingest; the caller
    disposes of it. What was not indexed is listed on stderr with its reason."""
    roots: list[Path] = args.results or [paths.default_results()]
    engine = index.open_index(index.url_of(args.db, roots[0]))
    if args.no_ingest:
        return engine
    try:
        for root in roots:
            if not root.is_dir():
                raise UserError(f"--results {root}: no such directory")
        ingested = index.ingest(engine, roots)
    except BaseException:
        engine.dispose()
        raise
    print(ingested.line(), file=sys.stderr)
    for skipped in ingested.skipped:
        print(f"  not indexed: {skipped.path}: {skipped.reason}", file=sys.stderr)
    return engine
