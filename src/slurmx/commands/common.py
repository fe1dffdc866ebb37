"""Options shared by the subcommands that read configs, and loading them from parsed arguments."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from slurmx.errors import UserError
from slurmx.inputs import Inputs, load_inputs


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
