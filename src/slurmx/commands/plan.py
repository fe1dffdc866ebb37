"""`slurmx plan`: show the sweep points of config keys, as a table or as InferenceX rows."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from slurmx.commands.common import add_config_options, load_points, report_key_errors
from slurmx.errors import UserError
from slurmx.inputs import Inputs
from slurmx.plan import Point
from slurmx.recipes.resolve import implementation, match_values, near_recipe, nearest_hint
from slurmx.recipes.spec import ServingSpec
from slurmx.store import atomic


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("plan", help="expand config keys into sweep points", description=__doc__)
    parser.add_argument("keys", nargs="*", metavar="KEY", help="config keys to expand")
    parser.add_argument("--all", action="store_true", help="every key of the loaded master configs")
    parser.add_argument("--json", action="store_true", help="print a JSON list of InferenceX rows plus point-id")
    parser.add_argument(
        "--advise",
        action="store_true",
        help="add each agentic point's predicted GPU prefix-hit rate and offload verdict (slurmx advise's model)",
    )
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
    # here, not at the top: hardware figures alone (InferenceX's runners.yaml) never import submit and node code
    from slurmx.submit.resolved import point_request

    return point_request(point, profile, serving).summary()


@dataclass
class RecipeNotes:
    """What plan can say about each point's serving recipe: information only, never a refusal (matching a
    recipe is render's and submit's job, and their errors belong to the key)."""

    names: dict[str, str] = field(default_factory=dict)  # point id -> the recipe that serves it
    specs: dict[str, ServingSpec] = field(default_factory=dict)  # point id -> resolved spec (sizes the request)
    notes: dict[str, str] = field(default_factory=dict)  # point id -> why it has no recipe (or none resolves)


def recipe_notes(loaded: Inputs) -> RecipeNotes:
    """Each point submit would serve, resolved by submit's own code (`submit.resolved.serve`: a multinode point's
    nodes, GPUs and time from its recipe, an srt-slurm recipe's included), or why not, as information."""
    # here, not at the top: a plan with nothing to serve never imports submit and node code
    from slurmx.submit.resolved import serve, serving_of, why_not_runnable, why_not_submittable

    found = RecipeNotes()
    served = []
    for p in loaded.points:
        profile = loaded.clusters.profiles.get(p.runner)
        if why_not_submittable(p) is not None or (p.multinode and profile is None):
            continue  # submit refuses it before any recipe is read: its request is the row's layout
        try:
            served.append((p, implementation(p), profile))
        except UserError as missing:  # said before jobs/ is read: a key slurmx cannot serve needs no recipe
            found.notes[p.point_id] = str(missing)
    from_jobs = [(p, parts) for p, parts, _ in served if parts.engine.frontend is None]
    recipes = None
    if from_jobs:
        try:
            recipes = loaded.recipes()
        except UserError as unreadable:
            found.notes |= {p.point_id: f"recipes unreadable: {unreadable}" for p, _ in from_jobs}
    for p, implemented, profile in served:
        name = None
        why = why_not_runnable(p, profile, implemented.engine, implemented.backend) if profile is not None else None
        if why is not None:  # what submit refuses it with, before any recipe is read
            found.notes[p.point_id] = f"submit refuses it: {why}"
            continue
        if implemented.engine.frontend is None:  # a recipe of jobs/: named, or the nearest one as a hint
            if recipes is None:
                continue
            file = recipes.find(match_values(p))
            if file is None:
                near = near_recipe(p, recipes)
                hint = f"; {nearest_hint(near)}" if near else ""
                found.notes[p.point_id] = f"no serving recipe for {p.config_key}{hint}"
                continue
            name = found.names[p.point_id] = file.recipe.recipe
        try:
            spec = (
                serving_of(p, loaded, profile, implemented)
                if profile is not None and profile.slurm is not None
                else serve(p, loaded, profile.gpus_per_node if profile is not None else p.gpus, implemented)
            )
        except UserError as refused:
            found.notes[p.point_id] = f"recipe {name} refuses it: {refused}" if name else str(refused)
            continue
        if spec is not None:
            found.specs[p.point_id] = spec
            found.names.setdefault(p.point_id, spec.recipe)
    return found


def run(args: argparse.Namespace) -> int:
    loaded = load_points(args, args.keys, args.all)
    notes = recipe_notes(loaded)
    # behind a flag: a replay per point costs far more than the plan itself (benchmarks/plan_speed)
    advised = _advised(loaded, notes) if args.advise else {}
    if args.json:
        rows = [
            point_json(p, loaded, notes.specs.get(p.point_id))
            | {"recipe": notes.names.get(p.point_id)}
            | ({"recipe-note": notes.notes[p.point_id]} if p.point_id in notes.notes else {})
            | ({"advise": advised[p.point_id]} if p.point_id in advised else {})
            for p in loaded.points
        ]
        sys.stdout.write(json_rows(rows))
    else:
        _print_tables(loaded, notes, advised)
    return report_key_errors(loaded)


def _advised(loaded: Inputs, notes: RecipeNotes) -> dict[str, str]:
    """Point id -> 'GPU hit % / verdict' (advise's one-line summary) for every point with a resolved recipe."""
    from slurmx.advise.predict import advise_point

    found = {}
    for p in loaded.points:
        spec, profile = notes.specs.get(p.point_id), loaded.clusters.profiles.get(p.runner)
        if spec is None or profile is None:
            continue
        try:
            advice = advise_point(p, spec, profile)
        except UserError as refused:
            found[p.point_id] = f"- ({refused})"
            continue
        if advice.note is not None:
            found[p.point_id] = "- (no prediction)"
        elif advice.hit_rate is None:
            found[p.point_id] = "- (no KV pool)"
        else:
            found[p.point_id] = f"{100 * advice.hit_rate:.0f}% {advice.verdict}"
    return found


def json_rows(rows: list[dict[str, Any]]) -> str:
    """A JSON list with one row a line: json's C encoder per row (an indented dump runs in pure Python,
    a third of `plan --all`'s time), still readable and diffable line by line."""
    if not rows:
        return "[]\n"
    return "[\n" + ",\n".join(atomic.dumps(row) for row in rows) + "\n]\n"


def _print_tables(loaded: Inputs, notes: RecipeNotes, advised: dict[str, str]) -> None:
    from rich.console import Console  # only the table needs rich: --json does not pay for importing it
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    for key in dict.fromkeys(p.config_key for p in loaded.points):
        points = [p for p in loaded.points if p.config_key == key]
        source = loaded.masters.sources[key]
        table = Table(title=f"{key}: {len(points)} points ({source.path}:{source.line})", title_justify="left")
        columns = ("point id", "parallelism", "spec", "backend", "conc", "DRAM GB", "recipe", "Slurm request")
        for column in columns + (("GPU hit / offload",) if advised else ()):
            table.add_column(column, justify="right" if column in ("conc", "DRAM GB") else "left", no_wrap=True)
        for p in points:
            conc = ",".join(map(str, p.concurrencies))
            table.add_row(
                p.point_id,
                p.parallelism,
                p.spec_decoding,
                p.backend_name,
                conc,
                str(p.total_cpu_dram_gb),
                notes.names.get(p.point_id, "-"),
                _request_summary(p, loaded, notes.specs.get(p.point_id)) or "-",
                *((advised.get(p.point_id, "-"),) if advised else ()),
            )
        console.print(table)
        # information, printed literally (rich markup would eat brackets in paths and hints)
        for note in dict.fromkeys(notes.notes[p.point_id] for p in points if p.point_id in notes.notes):
            console.print(f"recipe: {note}", markup=False, highlight=False, soft_wrap=True)
