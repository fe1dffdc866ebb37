"""collect's rows read back from the index (`slurmx collect --index`): each sweep's rows and skipped files in the
order collect reads its files, with the paths as the caller named the tree, so `col.combine` de-duplicates,
ratios and ranks them exactly as it does rows read from the files. A row of the index has no parsed result
(`Row.parsed()` reads its file when a report or an InferenceX file needs it).

Which sweeps' files (summaries, aggregates, report, plots) `collect --index` rewrites: those whose digest (their
rows' files and mtimes, their skipped files and reasons, the options) differs from what it last wrote.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from slurmx.collect import collect as col
from slurmx.store.tree import REPEATS, SweepDir

from .index import ROW_COLUMNS, collected, files, replays, results, sweeps

_ROW_NAMES = tuple(name for name, _ in ROW_COLUMNS)


def _order(rel: str) -> tuple[str, int, int]:
    """collect's file order within a sweep: by point directory, its own result.json before its repeats'."""
    parts = rel.split("/")  # points/<point>/result.json | points/<point>/repeats/<n>/result.json
    if len(parts) >= 4 and parts[2] == REPEATS and parts[3].isdigit():
        return parts[1], 1, int(parts[3])
    return parts[1] if len(parts) > 1 else rel, 0, 0


def _refs(engine: Engine, given: list[SweepDir]) -> dict[int, SweepDir]:
    """The index's id of each sweep, by its resolved path (tree root, key, sweep id)."""
    wanted = {(str(s.path.resolve().parent.parent), s.config_key, s.sweep_id): s for s in given}
    roots = sorted({root for root, _, _ in wanted})
    out = {}
    with engine.connect() as conn:
        query = sa.select(sweeps.c.id, sweeps.c.root, sweeps.c.config_key, sweeps.c.sweep_id)
        for r in conn.execute(query.where(sweeps.c.root.in_(roots))):
            sweep = wanted.get((r.root, r.config_key, r.sweep_id))
            if sweep is not None:
                out[r.id] = sweep
    return out


def read_rows(engine: Engine, given: list[SweepDir]) -> dict[Path, list[col.Row | col.Skipped]]:
    """Sweep path (as given) -> its rows and skipped files, in collect's file order."""
    refs = _refs(engine, given)
    prefixes = {ref: len(str(s.path.resolve())) + 1 for ref, s in refs.items()}
    items: dict[int, list[tuple[tuple[str, int, int], col.Row | col.Skipped]]] = {ref: [] for ref in refs}
    query = (
        sa.select(files.c.sweep, files.c.path, files.c.mtime_ns, files.c.skipped_reason,
                  results.c.model, results.c.hw, results.c.precision, results.c.repeats,
                  results.c.ttft_p90_count, results.c.ttft_p90_need, results.c.ttft_p90_certified,
                  *(results.c[name] for name in _ROW_NAMES))
        .select_from(files.outerjoin(results, results.c.file == files.c.id))
        .where(files.c.sweep.in_(list(refs)))
    )  # fmt: skip
    with engine.connect() as conn:
        for r in conn.execute(query):
            sweep = refs[r.sweep]
            rel = r.path[prefixes[r.sweep] :]
            path = sweep.path / rel
            item: col.Row | col.Skipped
            if r.skipped_reason is not None:
                item = col.Skipped(path, r.skipped_reason)
            else:
                item = _row(r, path)
            items[r.sweep].append((_order(rel), item))
    out: dict[Path, list[col.Row | col.Skipped]] = {s.path: [] for s in given}
    for ref, found in items.items():
        found.sort(key=lambda pair: pair[0])
        out[refs[ref].path] = [item for _, item in found]
    return out


_FIRST = 11  # the query's columns before _ROW_NAMES


def _row(r: Any, path: Path) -> col.Row:
    from slurmx.results.schema import PercentileCertificate  # imported here: a replayed collect needs no pydantic

    cert = None
    if r.ttft_p90_count is not None:
        cert = PercentileCertificate(count=r.ttft_p90_count, need=r.ttft_p90_need, certified=r.ttft_p90_certified)
    values = dict(zip(_ROW_NAMES, r[_FIRST:]))  # by position: a Row's mapping by name costs 4x more
    return col.Row(
        **values, path=path, baseline_arm=None, tput_ratio=None, ttft_p90_ratio=None, north_star=False,
        frontier_views="", model=r.model, hw=r.hw, precision=r.precision, planned_repeats=r.repeats,
        ttft_p90_cert=cert, mtime=r.mtime_ns / 1e9, result=None,
    )  # fmt: skip


def digest(sr: col.SweepResults, options: Iterable[object]) -> str:
    """What a sweep's written files are a function of: its rows' files, its skipped files, the options."""
    text = json.dumps(
        [
            [(str(r.path), r.mtime) for r in sr.rows],
            [s.json() for s in sr.skipped],
            [str(o) for o in options],
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()


def digests(engine: Engine, given: list[SweepDir]) -> dict[Path, str]:
    """Sweep path (as given) -> the digest `collect --index` recorded when it last wrote its files."""
    refs = _refs(engine, given)
    with engine.connect() as conn:
        query = sa.select(collected.c.sweep, collected.c.digest).where(collected.c.sweep.in_(list(refs)))
        return {refs[r.sweep].path: r.digest for r in conn.execute(query)}


def record(engine: Engine, written: dict[Path, str], given: list[SweepDir]) -> None:
    """Record each sweep's digest once its files are written."""
    refs = {s.path: ref for ref, s in _refs(engine, given).items()}
    ids = [refs[p] for p in written if p in refs]
    if not ids:
        return
    with engine.begin() as conn:
        conn.execute(sa.delete(collected).where(collected.c.sweep.in_(ids)))
        conn.execute(sa.insert(collected), [{"sweep": refs[p], "digest": d} for p, d in written.items() if p in refs])


def state(engine: Engine, given: list[SweepDir]) -> str:
    """The index's state of the given sweeps: which they are and when each was last ingested (a changed, new or
    removed result file re-ingests its sweep and so changes this)."""
    wanted = {(str(s.path.resolve().parent.parent), s.config_key, s.sweep_id): str(s.path) for s in given}
    roots = sorted({root for root, _, _ in wanted})
    seen: dict[str, tuple[int, float]] = {}
    with engine.connect() as conn:
        query = sa.select(sweeps.c.id, sweeps.c.root, sweeps.c.config_key, sweeps.c.sweep_id, sweeps.c.ingested_at)
        for r in conn.execute(query.where(sweeps.c.root.in_(roots))):
            path = wanted.get((r.root, r.config_key, r.sweep_id))
            if path is not None:
                seen[path] = (r.id, r.ingested_at)
    text = json.dumps([(str(s.path), seen.get(str(s.path))) for s in given])
    return hashlib.sha256(text.encode()).hexdigest()


def replay_of(engine: Engine, key: str) -> tuple[str, list[str], bytes] | None:
    """(state, summary.json paths, output) that `collect --index` recorded under these options, if any."""
    with engine.connect() as conn:
        query = sa.select(replays.c.state, replays.c.summaries, replays.c.output).where(replays.c.key == key)
        r = conn.execute(query).first()
    return None if r is None else (r.state, json.loads(r.summaries), bytes(r.output))


def keep_replay(engine: Engine, key: str, state_: str, summaries: list[str], output: bytes) -> None:
    """Record what `collect --index` printed under these options in this state (replacing the last one)."""
    try:
        with engine.begin() as conn:
            conn.execute(sa.delete(replays).where(replays.c.key == key))
            values = {"key": key, "state": state_, "summaries": json.dumps(summaries), "output": output}
            conn.execute(sa.insert(replays).values(**values))
    except sa.exc.IntegrityError:
        pass  # a concurrent call recorded the same options meanwhile: its record serves as well
