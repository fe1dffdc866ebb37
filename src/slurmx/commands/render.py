"""`slurmx render`: what would run for each point, exactly: sbatch scripts, server and replay commands.

For hardware this machine lacks (GPUs, containers), this is how the production path is reviewed.
The arrays are the ones `submit` would make (one per distinct Slurm request).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from slurmx.commands.common import add_config_options, add_until_options, load_points, report_key_errors, until_of
from slurmx.errors import UserError
from slurmx.submit.render import render_key


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("render", help="print the exact commands each point would run", description=__doc__)
    parser.add_argument(
        "keys", nargs="+", metavar="KEY", help="config keys to render (a refused key blocks only itself)"
    )
    parser.add_argument("--point", metavar="ID", help="only this point id (or id prefix)")
    parser.add_argument(
        "--results", type=Path, metavar="DIR", default=Path("results"), help="results root named in the sbatch script"
    )
    add_until_options(parser)
    add_config_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    until = until_of(args)
    inputs = load_points(args, args.keys)
    keys = inputs.config_keys()
    if args.point is not None:
        keys = [k for k in keys if any(p.point_id.startswith(args.point) for p in inputs.key_points(k))]
        if not keys and not inputs.errors:
            raise UserError(f"no point {args.point!r} in {', '.join(args.keys)}")
    refused: list[UserError] = []
    for key in keys:
        try:
            text = render_key(key, inputs, args.results, args.point, until)
        except UserError as error:  # this key's own problem (a recipe, a profile): the other keys render
            refused.append(error)
            continue
        print(text, end="", flush=True)
    return report_key_errors(inputs, refused)
