"""Options shared by the subcommands that read configs, and loading them from parsed arguments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from slurmx.errors import UserError
from slurmx.inputs import Inputs, load_inputs

if TYPE_CHECKING:
    from slurmx.store.ledger import UntilCertified


def add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        action="append",
        type=Path,
        metavar="FILE",
        help="master config file (repeatable; default: configs/*master*.yaml)",
    )
    parser.add_argument(
        "--clusters", type=Path, metavar="FILE", help="cluster profiles (default: configs/clusters.yaml)"
    )
    parser.add_argument(
        "--inferencex",
        type=Path,
        metavar="DIR",
        help="an InferenceX checkout: its configs/*-master.yaml (unless --config) and configs/runners.yaml's "
        "hardware figures, over the cluster profiles' slurm/runtime sections",
    )


def add_until_options(parser: argparse.ArgumentParser) -> None:
    """`--until-certified` and its budget and floor (docs/certification.md)."""
    parser.add_argument(
        "--until-certified",
        metavar="P[,P...]",
        help="replay each point in cold rounds until these percentiles (p50, p75, p90, p95, p99) of TTFT, "
        "latency and interactivity are certified, or --max-point-minutes runs out",
    )
    parser.add_argument(
        "--max-point-minutes", type=float, metavar="M", help="with --until-certified: each point's budget"
    )
    parser.add_argument(
        "--min-duration",
        type=float,
        metavar="S",
        help="with --until-certified: replay each point at least S seconds (MLPerf's floor is 600)",
    )
    parser.add_argument(
        "--rel-width",
        type=float,
        metavar="W",
        help="with --until-certified: the +- relative width a percentile is certified at (default 0.10)",
    )


def until_of(args: argparse.Namespace) -> UntilCertified | None:
    """The parsed `--until-certified` options, checked (one-line errors); None without the flag."""
    budget, floor, width = args.max_point_minutes, args.min_duration, args.rel_width
    if args.until_certified is None:
        options = (("--max-point-minutes", budget), ("--min-duration", floor), ("--rel-width", width))
        given = [name for name, value in options if value is not None]
        if given:
            raise UserError(f"{given[0]}: only with --until-certified")
        return None
    from slurmx.results import certify  # with the flag only: plan and render without it import neither
    from slurmx.store.ledger import UntilCertified

    try:
        percentiles = certify.parse_percentiles(args.until_certified)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if budget is None:
        raise UserError("--until-certified: needs --max-point-minutes M, each point's budget")
    if not budget > 0:
        raise UserError(f"--max-point-minutes {budget:g}: must be more than 0")
    floor = floor or 0.0
    if floor < 0 or floor > budget * 60:
        raise UserError(f"--min-duration {floor:g}: must be between 0 and the budget ({budget * 60:g} s)")
    if width is not None and not 0 < width < 1:
        raise UserError(f"--rel-width {width:g}: must be between 0 and 1 (0.10 is +-10 %)")
    return UntilCertified(percentiles=percentiles, max_point_minutes=budget, min_duration_s=floor, rel_width=width)


def load_points(args: argparse.Namespace, keys: list[str], all_keys: bool = False) -> Inputs:
    inputs = load_inputs(args.config, args.clusters, keys, all_keys, keep_going=True, inferencex=args.inferencex)
    for warning in inputs.warnings:
        print(f"slurmx: warning: {warning}", file=sys.stderr)
    return inputs


def report_key_errors(inputs: Inputs, refused: list[UserError] | None = None) -> int:
    """Each refused key as one line on stderr; exit 2 when any key was refused, else 0. A bad key blocks
    only itself: the command has already done its work for every other key."""
    errors = [*inputs.errors, *(refused or [])]
    for error in errors:
        print(f"slurmx: error: {error}", file=sys.stderr)
    return 2 if errors else 0
