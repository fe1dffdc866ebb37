"""Argument wiring only: each subcommand lives in slurmx.commands.<name>."""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from slurmx import __version__
from slurmx.errors import UserError

# Subcommand -> module. Only the module of the command being run is imported, so `slurmx plan`
# does not pay for submitit, matplotlib and the node code.
COMMANDS = (
    "plan",
    "submit",
    "status",
    "cancel",
    "logs",
    "collect",
    "history",
    "dashboard",
    "render",
    "rebuild",
    "recipes",
    "advise",
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slurmx",
        description="Run LLM-serving benchmark sweeps (InferenceX master configs) as Slurm jobs.",
    )
    parser.add_argument("--version", action="version", version=f"slurmx {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS if only not in COMMANDS else (only,):
        module: ModuleType = importlib.import_module(f"slurmx.commands.{name}")
        module.register(sub)
    return parser


# A command builds its inputs in one go and frees no cycles: at the default threshold (700 allocations)
# the collector walks the growing heap again and again, 5 % of `plan --all`'s instructions.
GC_THRESHOLD = (100_000, 50, 100)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    threshold = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)
    try:
        return _run(argv)
    finally:
        gc.set_threshold(*threshold)  # a caller that runs commands in its own process (the tests) keeps its own


def _run(argv: list[str]) -> int:
    parser = build_parser(argv[0] if argv else None)
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
