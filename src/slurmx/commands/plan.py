"""`slurmx plan`: show the sweep points of config keys, as a table or as InferenceX rows."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from slurmx.commands.common import add_config_options, load_points
from slurmx.inputs import Inputs
from slurmx.plan import Point
from slurmx.recipes.resolve import find_recipe, missing_implementation, near_recipe, resolve
from slurmx.recipes.spec import ServingSpec
from slurmx.submit.resolved import point_request


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("plan", help="expand config keys into sweep points", description=__doc__)
    parser.add_argument("keys", nargs="*", metavar="KEY", help="config keys to expand")
    parser.add_argument("--all", action="store_true", help="every key of the loaded master configs")
    parser.add_argument("--json", action="store_true", help="print a JSON list of InferenceX rows plus point-id")
    add_config_options(parser)
    parser.set_defaults(func=run)


def point_json(point: Point, loaded: Inputs, serving: ServingSpec | None = None) -> dict[str, Any]:
    obj = point.row()
    obj["point-id"] = point.point_id
    obj["config-key"] = point.config_key
    request = _request_summary(point, loaded, serving)
    if request:
        obj["slurm-request"] = request
    return obj


def _request_summary(point: Point, loaded: Inputs, serving: ServingSpec | None) -> str | None:
    """The request submit would make (memory from the resolved serving spec's pool, where there is one)."""
    profile = loaded.clusters.profiles.get(point.runner)
    if profile is None or profile.slurm is None:
        return None
    return point_request(point, profile, serving).summary()


def check_recipes(loaded: Inputs) -> tuple[dict[str, str], dict[str, ServingSpec]]:
    """Resolve every point that has a serving recipe, so a bad recipe fails at plan time."""
    names: dict[str, str] = {}
    specs: dict[str, ServingSpec] = {}
    for p in loaded.points:
        # A point slurmx cannot serve plans all the same; submit and render say what is missing.
        if p.multinode or p.scenario != "agentic-coding" or missing_implementation(p) is not None:
            continue
        name = loaded.recipe_name(p)
        if name:
            specs[p.point_id] = resolve(p, loaded.recipes())
            names[p.point_id] = name
        elif near_recipe(p, loaded.recipes()) is not None:
            find_recipe(p, loaded.recipes())  # refused: a near match never serves a point
    return names, specs


def run(args: argparse.Namespace) -> int:
    loaded = load_points(args, args.keys, args.all)
    recipes, specs = check_recipes(loaded)
    if args.json:
        rows = [
            point_json(p, loaded, specs.get(p.point_id)) | {"recipe": recipes.get(p.point_id)} for p in loaded.points
        ]
        sys.stdout.write(json_rows(rows))
    else:
        _print_tables(loaded, recipes, specs)
    # plan --all: the good keys are planned above; each bad key is one line here, and the exit says so.
    for error in loaded.errors:
        print(f"slurmx: error: {error}", file=sys.stderr)
    return 2 if loaded.errors else 0


def json_rows(rows: list[dict[str, Any]]) -> str:
    """A JSON list with one row a line: json's C encoder per row (an indented dump runs in pure Python,
    a third of `plan --all`'s time), still readable and diffable line by line."""
    if not rows:
        return "[]\n"
    return "[\n" + ",\n".join(json.dumps(row) for row in rows) + "\n]\n"


def _print_tables(loaded: Inputs, recipes: dict[str, str], specs: dict[str, ServingSpec]) -> None:
    from rich.console import Console  # only the table needs rich: --json does not pay for importing it
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    for key in dict.fromkeys(p.config_key for p in loaded.points):
        points = [p for p in loaded.points if p.config_key == key]
        source = loaded.masters.sources[key]
        table = Table(title=f"{key}: {len(points)} points ({source.path}:{source.line})", title_justify="left")
        for column in ("point id", "parallelism", "spec", "backend", "conc", "DRAM GB", "recipe", "Slurm request"):
            table.add_column(column, justify="right" if column in ("conc", "DRAM GB") else "left", no_wrap=True)
        for p in points:
            conc = ",".join(map(str, p.conc)) if isinstance(p.conc, tuple) else str(p.conc)
            table.add_row(
                p.point_id,
                p.parallelism,
                p.spec_decoding,
                p.backend_name,
                conc,
                str(p.total_cpu_dram_gb),
                recipes.get(p.point_id, "-"),
                _request_summary(p, loaded, specs.get(p.point_id)) or "-",
            )
        console.print(table)
