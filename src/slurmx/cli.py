"""Argument wiring only: each subcommand lives in slurmx.commands.<name>."""

from __future__ import annotations

import argparse
from types import ModuleType
import sys
from collections.abc import Sequence

from slurmx import __version__
from slurmx.commands import plan as plan_cmd
from slurmx.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slurmx",
        description="Run LLM-serving benchmark sweeps (InferenceX master configs) as Slurm jobs.",
    )
    parser.add_argument("--version", action="version", version=f"slurmx {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _commands():
        module.register(sub)
    return parser


def _commands() -> list[ModuleType]:
    modules: list[ModuleType] = [plan_cmd]
    for name in ("submit", "status", "cancel", "logs", "collect", "render"):
        try:
            modules.append(__import__(f"slurmx.commands.{name}", fromlist=["register"]))
        except ModuleNotFoundError as exc:
            if exc.name != f"slurmx.commands.{name}":
                raise
    return modules


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except UserError as exc:
        print(f"slurmx: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("slurmx: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
