"""`slurmx advise`: each point's trace through a model of the engine's prefix cache: the GPU prefix-hit rate,
the live working set, what an offload tier of the point's DRAM budget could serve, and whether it helps."""

from __future__ import annotations

import argparse
import sys

from slurmx.advise.predict import CLIFF_RULE, RULE, Advice, advise_point, refusal
from slurmx.commands.common import add_config_options, load_points, report_key_errors
from slurmx.commands.plan import json_rows
from slurmx.errors import UserError
from slurmx.recipes.resolve import resolve


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("advise", help="predict prefix-cache hits and offload benefit", description=__doc__)
    parser.add_argument("keys", nargs="+", metavar="KEY", help="config keys to advise on")
    parser.add_argument("--json", action="store_true", help="print a JSON list, one object per point")
    parser.add_argument(
        "--kv-pool-tokens",
        type=int,
        metavar="N",
        help="the engine's KV pool in tokens where the recipe does not fix it (its pool-size log line)",
    )
    add_config_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.kv_pool_tokens is not None and args.kv_pool_tokens <= 0:
        raise UserError(f"--kv-pool-tokens: {args.kv_pool_tokens} is not a positive token count")
    loaded = load_points(args, args.keys)
    advice = []
    for point in loaded.points:
        profile = loaded.clusters.profiles.get(point.runner)
        try:
            if profile is None:
                raise UserError(f"no cluster profile for runner {point.runner}")
            spec = resolve(point, loaded.recipes())
            advice.append(advise_point(point, spec, profile, args.kv_pool_tokens))
        except UserError as refused:  # belongs to the point: the others are still advised on
            advice.append(refusal(point, refused))
    if args.json:
        sys.stdout.write(json_rows([a.as_json() for a in advice]))
    else:
        _print(advice)
    return report_key_errors(loaded)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _print(advice: list[Advice]) -> None:
    from rich.console import Console  # only the table needs rich
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 220)
    for key in dict.fromkeys(a.point.config_key for a in advice):
        rows = [a for a in advice if a.point.config_key == key]
        table = Table(title=f"{key}: {len(rows)} points", title_justify="left")
        columns = ("point id", "arm", "parallelism", "conc", "pool tok", "GPU hit %", "live set tok", "live set GB",
                   "recomputed %", "tier %", "verdict")  # fmt: skip
        for column in columns:
            table.add_column(
                column, justify="left" if column in ("point id", "arm", "parallelism", "verdict") else "right"
            )
        for a in rows:
            o = a.outcome
            table.add_row(
                a.point.point_id,
                a.point.backend_name,
                a.point.parallelism,
                str(a.point.conc),
                f"{a.usable_pool_tokens}/{a.kv_pool_tokens}" if a.kv_pool_tokens else "-",
                _pct(a.hit_rate),
                f"{o.working_set_tokens} ({a.trace_working_set_tokens})" if o else "-",
                f"{a.working_set_gb:.3g}" if a.working_set_gb is not None else "-",
                _pct(a.recomputed_share),
                _pct(a.tier_share),
                a.verdict if a.note is None else a.note,
            )
        console.print(table)
        geometry = next((a.geometry for a in rows if a.geometry), None)
        lines = [
            "pool tok: usable/allocated KV pool (per rank); live set tok: the model's peak (the sessions' whole "
            "contexts in brackets)",
            "recomputed %: prompt tokens that missed the GPU pool but were computed earlier (any tier could serve "
            "them); tier %: what the point's own DRAM budget holds of them",
            f"rule: {RULE}; {CLIFF_RULE}",
        ]
        inputs = list(dict.fromkeys(line for a in rows for line in a.inputs))
        if geometry is not None and not inputs:
            sources = ", ".join(f"{name} from {where}" for name, where in geometry.sources.items())
            lines.append(f"{geometry.describe()}; {sources}")
        lines += [f"input: {line}" if not line.startswith(" ") else line for line in inputs]
        lines += cliff_summary(rows)
        lines += list(dict.fromkeys(check for a in rows for check in a.checks))
        for line in lines:
            console.print(line, markup=False, highlight=False, soft_wrap=True)


def cliff_summary(rows: list[Advice]) -> list[str]:
    """Per parallelism: where the predicted GPU hit rate falls off, and which concurrencies an offload arm helps."""
    lines = []
    for label in dict.fromkeys(a.point.parallelism for a in rows):
        points = sorted((a for a in rows if a.point.parallelism == label and a.hit_rate is not None), key=_conc)
        unpooled = sorted(
            (a for a in rows if a.point.parallelism == label and a.outcome and not a.points_pool), key=_conc
        )
        if unpooled:
            by_conc = {a.point.conc: a.outcome.working_set_tokens for a in unpooled if a.outcome}
            sets = ", ".join(f"{conc}: {tokens:,}" for conc, tokens in by_conc.items())
            lines.append(
                f"{label}: no KV pool, so no cliff: the pool (tokens/rank) must hold the live set, by conc {sets}"
            )
        if not points:
            continue
        curve = ", ".join(
            f"{a.point.conc}: {_pct(a.hit_rate)}" for a in dict((a.point.conc, a) for a in points).values()
        )
        past = [a for a in points if a.past_cliff]
        cliff = (
            f"cliff at conc {past[0].point.conc} (hit {_pct(past[0].hit_rate)} % vs ceiling {_pct(past[0].ceiling)} %)"
            if past
            else "no cliff up to conc " + str(points[-1].point.conc)
        )
        helped = sorted({a.point.conc for a in points if a.verdict in ("helps", "an offload arm would help")})
        arms = ", ".join(map(str, helped)) if helped else "none"
        lines.append(f"{label}: predicted GPU hit % by conc {curve}; {cliff}; offload arm helps at conc: {arms}")
    return lines


def _conc(advice: Advice) -> int:
    return advice.point.conc
