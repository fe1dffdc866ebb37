"""`slurmx recipes check|import --inferencex DIR [KEY...]`: serving recipes against InferenceX's own scripts.

`check` runs, for every point of each key, the agentic script DIR's launcher would pick, unchanged, under
recording stand-ins, renders slurmx's point, and compares them fact by fact (flags, JSON leaves, env,
provisioning; and the launcher level: the Slurm request, container and exports of DIR's launcher, run
under stand-ins too): each is the same, a declared difference (a reviewed row with its reason), or undeclared;
a declared row no point needs is stale. Exit 1 on any undeclared or stale row, one line each.
`import` derives a recipe from the same captures (slurmx.upstream.derive) and writes it to jobs/.
"""

from __future__ import annotations

import argparse
import functools
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from slurmx import engines, paths
from slurmx.errors import UserError
from slurmx.inputs import Inputs, load_inputs
from slurmx.plan import Point
from slurmx.recipes.resolve import match_values
from slurmx.submit.render import point_processes
from slurmx.submit.resolved import Resolved, resolve_runnable
from slurmx.upstream.capture import Upstream
from slurmx.upstream.compare import PointCompare, compare_multinode, compare_point, stale, undeclared
from slurmx.upstream.declared import (
    REPLAY_INHERITS_WHY,
    Declared,
    inherited_by_replay,
    is_layout,
    load_declared,
    own_choice,
    render_rows,
)  # fmt: skip
from slurmx.upstream.facts import Difference
from slurmx.upstream.importer import (
    Captured,
    ImportRefused,
    add_reviewed_flags,
    capture_point,
    header,
    header_notes,
    import_key,
    key_stem,
    recipe_stem,
    render_recipe,
    today,
    write_if_changed,
)  # fmt: skip
from slurmx.upstream.inferencex import AGENTIC, aiperf_revision, script_candidates, upstream_for
from slurmx.upstream.launcher import WORKFLOW

GENERIC_TABLE = Path(__file__).resolve().parents[3] / "docs" / "upstream-differences.yaml"
DIFFERENCES_DIR = "differences"  # jobs/differences/<recipe file stem>.yaml: an imported key's declared rows
SRT_FRONTEND_TABLE = "srt-dynamo-frontend.yaml"  # the rows of the keys recipes/srt.py serves (rows name their keys)
WORKERS = 2  # captures are bash + ~30 stand-in starts each; this machine has two cores


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("recipes", help="check or import serving recipes against InferenceX's scripts")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="compare every point's processes with InferenceX's script")
    imp = actions.add_parser("import", help="derive each key's recipe from InferenceX's script, into jobs/")
    for action in (check, imp):
        action.add_argument("keys", nargs="*", metavar="KEY", help="config keys (default: see --help of the action)")
        action.add_argument("--inferencex", type=Path, required=True, metavar="DIR", help="an InferenceX checkout")
        action.add_argument("--jobs", type=Path, metavar="DIR", help="recipe directory (default: jobs/)")
    check.set_defaults(func=run_check)
    imp.set_defaults(func=run_import)


def inferencex_inputs(tree: Path, keys: list[str], jobs: Path | None) -> Inputs:
    """DIR's masters on DIR's hardware figures with slurmx's cluster profiles (the general `--inferencex`
    reading), every key when none is named; `jobs`: a recipe directory instead of jobs/."""
    inputs = load_inputs(None, None, keys, all_keys=not keys, keep_going=True, inferencex=tree)
    if jobs is not None:
        inputs.jobs_dir = jobs
    return inputs


def served_agentic(point: Point) -> bool:
    """A point `recipes` reads upstream for: the agentic points of an engine slurmx has, single-node or aggregated
    multinode (its srt-slurm recipe; upstream/srt.py)."""
    return point.engine in engines.REGISTRY and point.scenario == "agentic-coding" and not point.disagg


def _keys(inputs: Inputs, named: list[str], need_recipe: bool) -> list[str]:
    if named:
        return [k for k in named if inputs.key_points(k)]
    keys = [k for k in inputs.config_keys() if all(served_agentic(p) for p in inputs.key_points(k))]
    return [k for k in keys if inputs.recipe_name(inputs.key_points(k)[0]) is not None] if need_recipe else keys


def table_for(jobs: Path, inputs: Inputs, key: str) -> list[Declared]:
    """The generic table (docs/upstream-differences.yaml) and the key's recipe's own, beside it."""
    table = load_declared(GENERIC_TABLE)
    found = inputs.recipes().find(match_values(inputs.key_points(key)[0]))
    # a key served from its srt-slurm recipes behind Dynamo's frontend has no recipe here: the shared table of those
    own = jobs / DIFFERENCES_DIR / (f"{found.path.stem}.yaml" if found is not None else SRT_FRONTEND_TABLE)
    if own.is_file():
        table += load_declared(own)
    return table


@functools.cache  # one launcher run per point in one command (cleared as each starts: the tree is read once)
def _upstream(tree: Path, point: Point, shm_gib: int | None) -> Upstream:
    return upstream_for(tree, point, shm_gib)


def check_keys(tree: Path, inputs: Inputs, keys: list[str]) -> tuple[list[PointCompare], list[str]]:
    """Every point of every key compared; the keys slurmx cannot render yet, each with why."""
    jobs: list[tuple[str, Resolved]] = []
    skipped = []
    for key in keys:
        try:
            resolved, refused = resolve_runnable(inputs.key_points(key), inputs)
        except UserError as error:
            skipped.append(f"{key}: {error}")
            continue
        skipped += [f"{key} {p.exp_name}: {why}" for p, why in refused]
        jobs += [(key, item) for item in resolved]
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        compared = list(pool.map(lambda j: compare_one(tree, j[0], j[1]), jobs))
    return compared, skipped


def compare_one(tree: Path, key: str, item: Resolved) -> PointCompare:
    if item.point.multinode:
        return compare_multinode(key, item, tree, point_processes)
    node = item.profile.node
    upstream = _upstream(tree, item.point, node.shm_gib if node is not None else None)
    return compare_point(key, item, upstream, point_processes)


@dataclass
class Verdict:
    """What `check` concludes of compared points against their keys' tables."""

    problems: list[str]  # failed captures, undeclared differences and stale rows, one line each (stdout)
    notes: list[str]  # skipped keys and points, launchers not compared, retried captures (stderr)
    summary: str  # the counts, when there are no problems
    incomplete: bool  # something was not compared: exit 2 where nothing failed

    def exit_code(self) -> int:
        return 1 if self.problems else 2 if self.incomplete else 0


def verdict(tree: Path, inputs: Inputs, jobs: Path, compared: list[PointCompare], skipped: list[str]) -> Verdict:
    notes = [f"skipped {line}" for line in skipped]
    unlaunched = launcher_notes(tree, compared)
    notes += unlaunched
    problems: list[str] = []
    used: set[str] = set()
    for key in dict.fromkeys(c.key for c in compared):
        mine = [c for c in compared if c.key == key]
        table = table_for(jobs, inputs, key)
        problems += [f"{c.where()}: undeclared: {d.line()}" for c, d in undeclared(mine, table)]
        problems += [
            f"{key}: {row.where}: stale declared row: {'/'.join(row.processes)} {row.item}"
            for row in stale(mine, table)
        ]
        used |= {row.where for c in mine for d in c.diffs for row in table if row.covers(key, d)}
    failed = [f"{c.where()}: {c.capture.failure()}" for c in compared if c.capture.returncode]
    # said, never hidden: the stand-ins' timing, not upstream (upstream/capture.py)
    notes += [f"{c.where()}: first capture failed, a second passed: {c.capture.retried}" for c in compared
              if c.capture.retried]  # fmt: skip
    facts = sum(len(set(c.upstream) | set(c.ours)) for c in compared)
    summary = (
        f"{len({c.key for c in compared})} keys, {len(compared)} points, {facts} facts compared, "
        f"{len(used)} declared rows used: every difference declared"
        if compared
        else "nothing compared: every point was skipped (said above)"
    )
    incomplete = bool(skipped or inputs.errors or not compared or any(" not compared: " in n for n in unlaunched))
    return Verdict(failed + problems, notes, summary, incomplete)


def run_check(args: argparse.Namespace) -> int:
    _upstream.cache_clear()
    inputs = inferencex_inputs(args.inferencex, args.keys, args.jobs)
    jobs = args.jobs or paths.jobs_dir()
    keys = _keys(inputs, args.keys, need_recipe=True)
    # of the default set, a single-node key DIR has no script for (its launcher would run a missing file) has nothing
    # upstream to compare: named, not checked (named on the command line, it is an error)
    unscripted = [] if args.keys else [k for k in keys if _unscripted(args.inferencex, inputs.key_points(k)[0])]
    keys = [k for k in keys if k not in unscripted]
    compared, skipped = check_keys(args.inferencex, inputs, keys)
    found = verdict(args.inferencex, inputs, jobs, compared, skipped)
    for key in unscripted:
        where = args.inferencex / AGENTIC
        print(f"slurmx: recipes check: {key}: not compared: no agentic script for it in {where}", file=sys.stderr)
    for line in found.notes:
        print(f"slurmx: recipes check: {line}", file=sys.stderr)
    for error in inputs.errors:  # a named key DIR's masters lack, or cannot expand
        print(f"slurmx: error: {error}", file=sys.stderr)
    for line in found.problems:
        print(line)
    if not found.problems:
        print(f"recipes check: {found.summary}")
    return found.exit_code()


def _unscripted(tree: Path, point: Point) -> bool:
    """A single-node point whose agentic script, under any name its launcher picks, DIR does not hold."""
    return not point.multinode and not any((tree / AGENTIC / name).is_file() for name in script_candidates(point))


def launcher_notes(tree: Path, compared: list[PointCompare]) -> list[str]:
    """One line per key whose launcher level was not compared (its launcher did not reach its container
    srun: which launcher, which step), and one when DIR has no workflow to read the launchers' env from."""
    notes: dict[str, None] = {}
    for c in compared:
        launch = c.upstream_launch
        if launch is None:
            continue
        if launch.why_not is not None:
            notes.setdefault(f"{c.key}: launcher level not compared: {launch.why_not}", None)
        elif not launch.workflow:
            notes.setdefault(
                f"{tree / WORKFLOW}: not found; the launchers ran with each point's inputs alone (the workflow's "
                "own env, such as HF_HUB_CACHE, is not known)",
                None,
            )
    return list(notes)


def import_one(tree: Path, inputs: Inputs, key: str, jobs: Path, pool: ThreadPoolExecutor) -> str:
    """Capture every point of `key`, derive its recipe, write it (unless unchanged); what happened, one line."""
    points = inputs.key_points(key)
    captured: list[Captured] = list(pool.map(lambda p: capture_point(p, _upstream(tree, p, shm_of(inputs, p))), points))
    data = import_key(key, captured)
    gpu = points[0].runner.removeprefix("cluster:").split("-")[0]
    stem = recipe_stem(points[0], gpu)
    held = next((f for f in inputs.recipes().files if f.path.resolve() == (jobs / f"{stem}.yaml").resolve()), None)
    if held is not None and held.recipe.match.values() != match_values(points[0]):
        stem = key_stem(key)  # another key's recipe (one script on another image) has the usual file name
    table = jobs / DIFFERENCES_DIR / f"{stem}.yaml"
    reviewed = load_declared(table) if table.is_file() else []
    add_reviewed_flags(key, data, reviewed)
    if (revision := aiperf_revision(tree)) is not None:  # the aiperf fork DIR pins: the node checks it
        data["replay"]["aiperf-revision"] = revision
    data["recipe"] = stem.replace("_", "-")
    path = jobs / f"{stem}.yaml"
    clash = inputs.recipes().find(match_values(points[0]))
    if clash is not None and clash.path.resolve() != path.resolve():
        raise ImportRefused(f"{clash.path} already serves this key's match: move it aside to import")
    text = render_recipe(header(tree, captured[0].upstream, key, today(), header_notes(path)), data)
    written = write_if_changed(path, text)
    rows, reasons, fresh, compared = generic_rows(tree, key, jobs)
    text = render_rows(key, rows, reviewed, reasons)
    rows_written = write_if_changed(table, text) if rows or reviewed else False
    what = (
        f"{len(rows)} generic declared rows in {table}{'' if rows_written else ' (unchanged)'}" if rows else "no rows"
    )
    # what `check` would say now, from the same captures: the rows a person still has to review, each named
    found = verdict(tree, fresh, jobs, compared, [])
    said = {0: "every difference declared", 1: f"{len(found.problems)} to review"}.get(
        found.exit_code(), f"not every point compared ({'; '.join(found.notes)})"
    )
    head = f"{key}: {'wrote' if written else 'unchanged'} {path} ({len(points)} points); {what}; check: {said}"
    return "\n".join([head, *(f"  {line}" for line in found.problems)])


def shm_of(inputs: Inputs, point: Point) -> int | None:
    """The point's cluster node's /dev/shm in GiB (its profile's node.shm-gib), for the capture's df."""
    profile = inputs.clusters.profile(point.runner)
    return profile.node.shm_gib if profile is not None and profile.node is not None else None


def generic_rows(
    tree: Path, key: str, jobs: Path
) -> tuple[list[Difference], dict[Difference, str], Inputs, list[PointCompare]]:
    """The differences check finds with the new recipe that are layout only (kind cluster-layout: the model,
        draft and downloads at the cluster profile's paths), one of slurmx's own constant choices (loopback host,
        unbuffered output, the fixed hash seed) or the replay inheriting the engine env the script exported to its
        whole shell (with its reason). Any other difference is left for review. Also the inputs read with the new
    recipe and the points compared with it."""
    inputs = inferencex_inputs(tree, [key], jobs)  # fresh: the recipe just written
    compared, _ = check_keys(tree, inputs, [key])
    own = [r for r in table_for(jobs, inputs, key) if r.where.startswith(str(jobs / DIFFERENCES_DIR))]
    generic = [r for r in table_for(jobs, inputs, key) if r not in own]
    found: set[Difference] = set()
    reasons: dict[Difference, str] = {}
    for c in compared:
        for d in c.diffs:
            if any(r.covers(key, d) for r in generic):
                continue
            if is_layout(d) or own_choice(d):
                found.add(d)
            elif inherited_by_replay(d, c.upstream):
                reasons[d] = REPLAY_INHERITS_WHY
                found.add(d)
    return sorted(found, key=lambda d: (d.process, d.item, d.upstream or "", d.slurmx or "")), reasons, inputs, compared


def run_import(args: argparse.Namespace) -> int:
    _upstream.cache_clear()
    inputs = inferencex_inputs(args.inferencex, args.keys, args.jobs)
    jobs = args.jobs or paths.jobs_dir()
    keys = _keys(inputs, args.keys, need_recipe=False)
    multinode = [k for k in keys if inputs.key_points(k)[0].multinode]
    for key in multinode:  # said, not refused: `check` reads its srt-slurm recipes (upstream/srt.py)
        print(f"slurmx: recipes import: skipped {key}: an aggregated multinode key runs srt-slurm recipes, not a "
              "script: its recipe is written from them and `recipes check` compares it", file=sys.stderr)  # fmt: skip
    keys = [k for k in keys if k not in multinode]
    for error in inputs.errors:
        print(f"slurmx: error: {error}", file=sys.stderr)
    refused = 0
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        for key in keys:
            try:
                print(import_one(args.inferencex, inputs, key, jobs, pool))
            except ImportRefused as why:
                refused += 1
                print(f"{key}: not imported: {why}")
    return 1 if refused else 2 if inputs.errors or not keys else 0
