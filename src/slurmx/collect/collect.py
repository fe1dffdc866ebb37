"""Read every result.json of a results tree into rows: validated, gated, de-duplicated, compared.

Nothing is dropped silently: a file that does not parse or does not match the schema becomes a
`Skipped` with its path and reason; a result the validity gate refuses stays a row, marked invalid
with its reason, and never enters a ratio; a result replaced by a newer one for the same point id
(a valid one beats an invalid one) becomes a `Skipped` of kind "superseded".
"""

from __future__ import annotations

import copy
import csv
import io
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurmx.collect import frontier
from slurmx.store import atomic
from slurmx.store.tree import POINTS, REPEATS, RESULT_JSON, PointDir, SweepDir

# imported where used: a `collect --index` that finds nothing changed never parses a file (pydantic, the schema)
if TYPE_CHECKING:
    from pydantic import ValidationError

    from slurmx.results.schema import PercentileCertificate, Result

BASELINE_ARM = "none"


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str
    kind: str = "invalid"  # invalid | superseded

    def json(self) -> dict[str, str]:
        return {"path": str(self.path), "reason": self.reason, "kind": self.kind}


@dataclass(frozen=True)
class Row:
    """One result (valid or refused by the gate), flattened to what the table, the CSV and the plots show:
    every field but `result` is a summary.csv column, in the CSV's order (CSV_COLUMNS is read from here)."""

    config_key: str
    sweep_id: str
    point_id: str
    exp_name: str
    parallelism: str
    arm: str
    spec_decoding: str
    conc: int
    num_gpus: int
    tput_per_gpu: float | None
    output_tput_per_gpu: float | None
    input_tput_per_gpu: float | None
    intvty_p50: float | None
    intvty_p90: float | None
    e2e_norm_intvty_p50: float | None
    e2e_norm_intvty_p90: float | None
    ttft_p50_s: float | None
    ttft_p90_s: float | None
    e2el_p50_s: float | None
    e2el_p90_s: float | None
    itl_p50_s: float | None
    error_rate: float
    requests_successful: int
    requests_total: int
    gpu_hit_rate: float | None
    cpu_hit_rate: float | None
    external_hit_rate: float | None
    overall_hit_rate: float | None
    tier_hit_rate: float | None
    tier_side_hit_rate: float | None
    tier_tokens: float | None
    valid: bool
    invalid_reason: str | None
    invalid_rule: str | None  # which rule of the gate refused it (results/gate.py's RULES)
    labels: str
    uncertified: str  # "; "-joined, e.g. "p99 not certified: 115 requests, need 368"; "" when all are (or no block)
    engine_version: str | None
    backend_version: str | None
    image: str
    baseline_arm: str | None
    tput_ratio: float | None
    ttft_p90_ratio: float | None
    ratio_uncertified: str | None  # which side of the TTFT p90 ratio is not certified, when either is not
    slurm_job_id: str | None
    node: str | None
    nodes: str | None
    requests_by_rank: str | None
    attempt: int | None
    ended_at: float | None
    path: Path  # a str in the CSV and JSON
    repeat: int
    repeat_mode: str | None
    avg_gpu_w: float | None
    gpu_energy_j: float | None
    j_per_out_tok: float | None
    j_per_tok: float | None
    tok_s_per_kw: float | None
    power_invalid: str | None
    north_star: bool  # a winner of the North Star frontier of its comparison group (collect/frontier.py)
    frontier_views: str  # ";"-joined views whose gated frontier it is on; "" for a dominated point
    # not columns: what the frontier's groups, the ratios' caveat, the winner of a rerun and the repeats need
    model: str = field(compare=False, metadata={"column": False})
    hw: str = field(compare=False, metadata={"column": False})
    precision: str = field(compare=False, metadata={"column": False})
    planned_repeats: int = field(compare=False, metadata={"column": False})
    ttft_p90_cert: PercentileCertificate | None = field(repr=False, compare=False, metadata={"column": False})
    mtime: float | None = field(compare=False, metadata={"column": False})  # None: stat the file when needed
    # the file, parsed; None for a row read back from the history index (`parsed()` reads the file then)
    result: Result | None = field(repr=False, compare=False, metadata={"column": False})

    def columns(self) -> dict[str, Any]:
        """The row as summary.json and `collect --json` write it: column -> value, the path as a string."""
        out = {name: getattr(self, name) for name in CSV_COLUMNS}
        out["path"] = str(self.path)
        return out

    def parsed(self) -> Result:
        """The result this row was flattened from (a row of the index parses its file now, as collect did)."""
        if self.result is not None:
            return self.result
        result, reason = read_result(self.path)
        if result is None:
            raise OSError(f"{self.path}: {reason} (changed since it was indexed)")
        return result

    def metric(self, name: str) -> float | None:
        """A numeric column by name (the repeats' and the comparison's metrics are named by column)."""
        value: float | None = getattr(self, name)
        return value


@dataclass
class SweepResults:
    sweep: SweepDir
    rows: list[Row] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass
class Collection:
    sweeps: list[SweepResults]

    @property
    def rows(self) -> list[Row]:
        return [row for s in self.sweeps for row in s.rows]

    @property
    def skipped(self) -> list[Skipped]:
        return [sk for s in self.sweeps for sk in s.skipped]

    @property
    def warnings(self) -> list[str]:
        return [w for s in self.sweeps for w in s.warnings]

    @property
    def files(self) -> int:
        return len(self.rows) + len(self.skipped)


# ---------------------------------------------------------------- walking


def result_files(sweep: SweepDir) -> list[Path]:
    """points/*/result.json of one sweep (os.scandir: this is the hot loop of a large tree)."""
    root = sweep.path / POINTS
    out = []
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    for entry in entries:
        if entry.is_dir():
            candidate = Path(entry.path) / RESULT_JSON
            if candidate.exists():
                out.append(candidate)
            out.extend(_repeat_files(Path(entry.path) / REPEATS))
    return out


def _repeat_files(repeats: Path) -> list[Path]:
    """repeats/<n>/result.json of one point (`submit --repeats`), in repeat order."""
    if not repeats.is_dir():
        return []
    found = [d / RESULT_JSON for d in repeats.iterdir() if d.name.isdigit() and (d / RESULT_JSON).exists()]
    return sorted(found, key=lambda f: int(f.parent.name))


def read_result(path: Path) -> tuple[Result | None, str | None]:
    """(result, None) for a file that matches the schema, (None, one-line reason) otherwise (the gate
    is applied by `collect`, which keeps refused results as invalid rows)."""
    from pydantic import ValidationError

    from slurmx.results.schema import Result

    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, f"unreadable: {exc.strerror or exc}"
    if not data.strip():
        return None, "empty file"
    try:
        result = Result.model_validate_json(data)
    except ValidationError as exc:
        return None, _validation_reason(exc)
    return result, None


def _validation_reason(exc: ValidationError) -> str:
    errors = exc.errors()
    first = errors[0]
    if first["type"].startswith("json_"):
        return f"not valid JSON (truncated or partial?): {first['msg']}"
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"does not match the result schema: {where}: {first['msg']}{more}"


def collect(
    sweeps: Iterable[SweepDir],
    *,
    on_file: Callable[[int], None] | None = None,
    files: dict[Path, list[Path]] | None = None,
) -> Collection:
    """Rows of every sweep; per config key, the newest valid result of each point id wins.

    `files` (sweep path -> result files) saves a second walk when the caller already listed them."""
    return combine(
        (
            sweep,
            (
                read_row(path, sweep, on_file)
                for path in (files[sweep.path] if files is not None else result_files(sweep))
            ),
        )
        for sweep in sweeps
    )


def read_row(path: Path, sweep: SweepDir, on_file: Callable[[int], None] | None = None) -> Row | Skipped:
    """One result file as its row, or why it is not one (it does not parse, or names another point)."""
    result, reason = read_result(path)
    if on_file is not None:
        on_file(1)
    if result is None:
        return Skipped(path, reason or "invalid")
    if result.slurmx is not None and result.slurmx.point_id != PointDir(path.parent).point_id:
        return Skipped(path, f"point id {result.slurmx.point_id} in the file does not match its directory")
    return flatten(result, path, sweep)


def combine(read: Iterable[tuple[SweepDir, Iterable[Row | Skipped]]]) -> Collection:
    """Each sweep's rows and skipped files, in file order (from the files or the history index), de-duplicated
    across sweeps of a key (the newest valid result of a point id and repeat wins), with ratios and frontiers."""
    out: list[SweepResults] = []
    newest: dict[tuple[str, str, int], Row] = {}
    for sweep, items in read:
        sr = SweepResults(sweep)
        out.append(sr)
        for row in items:
            if isinstance(row, Skipped):
                sr.skipped.append(row)
                continue
            key = (sweep.config_key, row.point_id, row.repeat)
            previous = newest.get(key)
            if previous is None or _stamp(row) > _stamp(previous):
                newest[key] = row
                if previous is not None:
                    _drop(out, previous, row)
                sr.rows.append(row)
            else:
                sr.skipped.append(_loser(row, previous))
    for sr in out:
        sr.rows = add_frontier(add_ratios(sr.rows))
        sr.warnings = version_warnings(sr.rows)
    return Collection(out)


def _stamp(row: Row) -> tuple[bool, float, float]:
    ended = row.ended_at if row.ended_at is not None else 0.0
    if row.mtime is not None:
        return row.valid, ended, row.mtime
    try:
        mtime = row.path.stat().st_mtime
    except OSError:
        mtime = 0.0
    return row.valid, ended, mtime


def _drop(sweeps: list[SweepResults], old: Row, new: Row) -> None:
    for sr in sweeps:
        for i, row in enumerate(sr.rows):
            if row is old:  # by identity: rows are values, two files may flatten alike
                del sr.rows[i]
                sr.skipped.append(_loser(old, new))
                return


def _loser(row: Row, winner: Row) -> Skipped:
    """Why `row` is not the point's row: the gate refused it while `winner` is valid, or it is older."""
    if not row.valid and winner.valid:
        return Skipped(row.path, f"fails the validity gate: {row.invalid_reason} (the valid {winner.path} counts)")
    return Skipped(row.path, f"superseded by newer {winner.path}", "superseded")


# ---------------------------------------------------------------- flattening and comparison


def parallelism(result: Result) -> str:
    """TP8, DEP8, TP8-EP8, TP4-PP2 ...: the label the point recorded, else (a file written elsewhere) the same
    function `slurmx plan` uses."""
    from slurmx.plan import parallelism_label

    if result.slurmx is not None and result.slurmx.parallelism:
        return result.slurmx.parallelism
    dp_attn = result.dp_attention.lower() == "true"
    return parallelism_label(result.tp, result.ep, dp_attn, result.pp or 1, result.dcp_size or 1, result.pcp_size or 1)


def flatten(result: Result, path: Path, sweep: SweepDir) -> Row:
    from slurmx.results import gate

    rm = result.request_metrics
    lat = rm.latency
    cache = result.server_metrics.cache
    meta = result.slurmx
    evidence = meta.evidence if meta else None
    energy = meta.energy if meta else None
    refusal = gate.judge(result, max_error_rate=gate.threshold_of(result))
    reason = refusal.reason if refusal is not None else None
    return Row(
        config_key=meta.config_key if meta and meta.config_key else sweep.config_key,
        sweep_id=sweep.sweep_id,
        point_id=meta.point_id if meta else path.parent.name,
        exp_name=meta.exp_name if meta else "",
        parallelism=parallelism(result),
        arm=result.backend_name,
        spec_decoding=result.spec_decoding,
        conc=result.conc,
        num_gpus=result.gpus,
        tput_per_gpu=rm.throughput.per_gpu.total_tput_tps,
        output_tput_per_gpu=rm.throughput.per_gpu.output_tput_tps,
        input_tput_per_gpu=rm.throughput.per_gpu.input_tput_tps,
        intvty_p50=lat.intvty.p50,
        intvty_p90=lat.intvty.p90,
        e2e_norm_intvty_p50=lat.e2e_norm_intvty.p50,
        e2e_norm_intvty_p90=lat.e2e_norm_intvty.p90,
        ttft_p50_s=lat.ttft.p50,
        ttft_p90_s=lat.ttft.p90,
        e2el_p50_s=lat.e2el.p50,
        e2el_p90_s=lat.e2el.p90,
        itl_p50_s=lat.itl.p50,
        error_rate=result.error_rate,
        requests_successful=result.num_requests_successful,
        requests_total=result.num_requests_total,
        gpu_hit_rate=cache.gpu_cache_hit_rate,
        cpu_hit_rate=cache.cpu_cache_hit_rate,
        external_hit_rate=cache.external_cache_hit_rate,
        overall_hit_rate=cache.overall_cache_hit_rate,
        tier_hit_rate=evidence.tier_hit_rate if evidence else None,
        tier_side_hit_rate=evidence.tier_side_hit_rate if evidence else None,
        tier_tokens=evidence.tier_tokens if evidence else None,
        valid=reason is None,
        invalid_reason=reason,
        invalid_rule=refusal.rule if refusal is not None else None,
        labels=";".join(gate.labels(result)) if reason is None else "",
        uncertified="; ".join(uncertified_marks(result)),
        engine_version=meta.engine_version if meta else None,
        backend_version=meta.backend_version if meta else None,
        image=result.image,
        baseline_arm=None,
        tput_ratio=None,
        ttft_p90_ratio=None,
        ratio_uncertified=None,
        slurm_job_id=meta.slurm_job_id if meta else None,
        node=meta.node if meta else None,
        nodes=";".join(meta.nodes) if meta and meta.nodes else None,
        requests_by_rank=" ".join(f"{r}:{n}" for r, n in meta.requests_by_rank.items())
        if meta and meta.requests_by_rank
        else None,
        attempt=meta.attempt if meta else None,
        ended_at=meta.ended_at if meta else None,
        path=path,
        repeat=meta.repeat if meta else 1,
        repeat_mode=meta.repeat_mode if meta else None,
        # InferenceX's power fields (only a valid measurement has them) and tokens/s per kW of GPU power
        avg_gpu_w=result.avg_power_w,
        gpu_energy_j=result.total_gpu_energy_j,
        j_per_out_tok=result.joules_per_output_token,
        j_per_tok=result.joules_per_total_token,
        tok_s_per_kw=energy.total_tokens_per_s_per_kw if energy and energy.power_valid else None,
        power_invalid=";".join(energy.reasons) if energy and not energy.power_valid else None,
        north_star=False,
        frontier_views="",
        model=result.model,
        hw=result.hw,
        precision=result.precision,
        planned_repeats=meta.repeats if meta else 1,
        ttft_p90_cert=meta.certification.metrics.get("ttft", {}).get("p90")
        if meta is not None and meta.certification is not None
        else None,
        mtime=None,
        result=result,
    )


def _with(row: Row, **changes: Any) -> Row:
    """`dataclasses.replace(row, **changes)` without re-running __init__ over Row's 60 fields (40x faster: twice
    per row, the hot path of a large collect); a new Row, `row` untouched (Row has no __post_init__)."""
    new = copy.copy(row)
    new.__dict__.update(changes)
    return new


def _groups(rows: list[Row]) -> dict[tuple[str, int], list[Row]]:
    groups: dict[tuple[str, int], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.parallelism, row.conc), []).append(row)
    return groups


def add_ratios(rows: list[Row]) -> list[Row]:
    """`rows`, in order, where arms share a parallelism and concurrency given throughput and TTFT p90 over
    the baseline arm's (the no-offload arm, else the first arm in table order). Valid rows only: an invalid
    row has no ratio and is never a baseline."""
    ratioed: dict[int, Row] = {}  # id(row) -> the row with its ratios
    for members in _groups([r for r in rows if r.valid]).values():
        arms = sorted({r.arm for r in members}, key=arm_order)
        if len(arms) < 2:
            continue
        base_arm = arms[0]
        bases = {r.repeat: r for r in members if r.arm == base_arm}
        for row in members:
            base = bases.get(row.repeat) or next(iter(bases.values()))  # the same repeat where it ran
            ratioed[id(row)] = _with(
                row,
                baseline_arm=base_arm,
                tput_ratio=_ratio(row.tput_per_gpu, base.tput_per_gpu),
                ttft_p90_ratio=_ratio(row.ttft_p90_s, base.ttft_p90_s),
                ratio_uncertified=_ratio_uncertified(row, base) if row is not base else None,
            )
    return [ratioed.get(id(row), row) for row in rows]


def uncertified_marks(result: Result) -> list[str]:
    """Per percentile, whether the point's sample does not support it for a headline metric: the fewest requests
    behind it and the most any of those metrics needs (the metrics named when not all of them); [] without the
    certification block (a result written before slurmx certified, or an InferenceX aggregate)."""
    cert = result.slurmx.certification if result.slurmx is not None else None
    if cert is None:
        return []
    by_pct: dict[str, list[tuple[str, PercentileCertificate]]] = {}
    for metric, pct, c in cert.uncertified():
        by_pct.setdefault(pct, []).append((metric, c))
    out = []
    for pct, failing in sorted(by_pct.items(), key=lambda item: float(item[0].removeprefix("p"))):
        count = min(c.count for _, c in failing)
        needs = [c.need for _, c in failing if c.need is not None]
        need = f", need {max(needs)}" if needs else ""
        every = [m for m, by_p in cert.metrics.items() if pct in by_p]
        which = "" if len(failing) == len(every) else f" ({', '.join(m for m, _ in failing)})"
        out.append(f"{pct} not certified{which}: {count} requests{need}")
    return out


def _ratio_uncertified(row: Row, base: Row) -> str | None:
    """The TTFT p90 ratio's caveat: which side's TTFT p90 its sample does not support (None: both do, or
    neither result says)."""
    sides = []
    for who, side in (("this arm", row), (f"the {base.arm} baseline", base)):
        c = side.ttft_p90_cert
        if c is not None and not c.certified:
            sides.append(f"{who} ({c.count} requests" + (f", need {c.need})" if c.need is not None else ")"))
    return "TTFT p90 not certified on " + " and ".join(sides) if sides else None


def comparison_group(row: Row) -> tuple[str, str, str, str]:
    """InferenceX's comparison group of a frontier: model, hardware, precision, and the arm."""
    return (row.model, row.hw, row.precision, row.arm)


def add_frontier(rows: list[Row]) -> list[Row]:
    """`rows`, in order, with each valid point's frontier flags: computed per comparison group on the point's
    means over its valid repeats, so every repeat of a point carries the same flags; an invalid row is on none."""
    points: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        if row.valid:
            points.setdefault((row.config_key, row.point_id), []).append(row)
    groups: dict[tuple[str, str, str, str], list[tuple[str, str]]] = {}
    for key, members in points.items():
        groups.setdefault(comparison_group(members[0]), []).append(key)
    flags: dict[tuple[str, str], tuple[str, ...]] = {}
    metrics = (frontier.Y_METRIC, *frontier.VIEWS)
    for keys in groups.values():
        coords = [{m: _mean(points[k], m) for m in metrics} for k in keys]
        flags.update(zip(keys, frontier.frontiers(coords)))
    out = []
    for row in rows:
        views = flags.get((row.config_key, row.point_id), ()) if row.valid else ()
        out.append(_with(row, north_star=frontier.NORTH_STAR.key in views, frontier_views=";".join(views)))
    return out


def _mean(rows: list[Row], metric: str) -> float | None:
    values = [v for r in rows if (v := r.metric(metric)) is not None]
    return statistics.fmean(values) if values else None


def frontier_json(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """summary.json's "frontier": per comparison group, the North Star winners (their means over repeats),
    each view's winners and the dominated points, by point id."""
    points: dict[tuple[str, str], list[Row]] = {}
    for row in sorted_rows(rows):
        if row.valid:
            points.setdefault((row.config_key, row.point_id), []).append(row)
    groups: dict[tuple[str, str, str, str], list[list[Row]]] = {}
    for members in points.values():
        groups.setdefault(comparison_group(members[0]), []).append(members)
    out = []
    for (model, hw, precision, arm), group in groups.items():
        winners = sorted((m for m in group if m[0].north_star), key=lambda m: _mean(m, "e2e_norm_intvty_p90") or 0.0)
        out.append(
            {
                "model": model,
                "hw": hw,
                "precision": precision,
                "arm": arm,
                "north_star": [_winner(m) for m in winners],
                "views": {
                    key: [m[0].point_id for m in group if key in m[0].frontier_views.split(";")]
                    for key in frontier.VIEWS
                },
                "dominated": [m[0].point_id for m in group if not m[0].north_star],
            }
        )
    return out


def _winner(members: list[Row]) -> dict[str, Any]:
    first = members[0]
    return {
        "point_id": first.point_id,
        "exp_name": first.exp_name,
        "parallelism": first.parallelism,
        "conc": first.conc,
        "e2e_norm_intvty_p90": _mean(members, "e2e_norm_intvty_p90"),
        "tput_per_gpu": _mean(members, frontier.Y_METRIC),
    }


def version_warnings(rows: list[Row]) -> list[str]:
    """One line per comparison whose arms ran different engine versions or images."""
    out = []
    for (par, conc), members in sorted(_groups(rows).items()):
        for what in ("engine_version", "image"):
            seen = {f"{r.arm}={getattr(r, what)}" for r in members if getattr(r, what)}
            if len({item.split("=", 1)[1] for item in seen}) > 1:
                out.append(
                    f"{par} conc {conc}: arms ran different {what.replace('_', ' ')}s ({', '.join(sorted(seen))})"
                )
    return out


def arm_order(arm: str) -> tuple[int, str]:
    return (0 if arm == BASELINE_ARM else 1, arm)


def _ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return value / base


def sorted_rows(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r.config_key, r.parallelism, arm_order(r.arm), r.conc))


# ---------------------------------------------------------------- writing

# summary.csv's columns: Row's fields, in order, less the parsed result
CSV_COLUMNS = tuple(f.name for f in fields(Row) if f.metadata.get("column", True))


def csv_text(rows: Iterable[Row]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.columns().items()})
    return buffer.getvalue()


def summary_json(sr: SweepResults) -> dict[str, Any]:
    return {
        "config_key": sr.sweep.config_key,
        "sweep_id": sr.sweep.sweep_id,
        "collected_at": time.time(),
        "rows": [r.columns() for r in sorted_rows(sr.rows)],
        "skipped": [s.json() for s in sr.skipped],
        "warnings": sr.warnings,
        "frontier": frontier_json(sr.rows),
    }


def write_summaries(sr: SweepResults) -> None:
    atomic.write_text(sr.sweep.summary_csv, csv_text(sorted_rows(sr.rows)))
    atomic.write_json(sr.sweep.summary_json, summary_json(sr))


def inferencex_list(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """InferenceX's agg_<name>.json body: a JSON list of the aggregate objects, without `slurmx`."""
    return [r.parsed().inferencex() for r in sorted_rows(rows) if r.valid]
