"""The index: every result.json of one or more results trees as rows of a database (SQLAlchemy Core 2).

One row per (sweep, point, repeat): the identity `collect --compare` matches on, when and where it ran, its
validity and reason, and collect's metrics (the columns of collect's `Row`, read by the same `flatten`).
The files stay the truth: the index can be dropped and rebuilt from them at any time, which is how its schema
migrates (SCHEMA_VERSION is a digest of the tables; a database written by another version is rebuilt).

Ingest is incremental (a sweep whose result files' paths, sizes and mtimes are unchanged is not read), atomic
per sweep (one transaction: a killed ingest leaves each sweep as it was or as it is now, never half of it) and
idempotent. A file that does not parse or match the schema is recorded with its path and reason, never as a row.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from slurmx.collect import collect as col
from slurmx.errors import UserError
from slurmx.store.tree import POINTS, REPEATS, RESULT_JSON, PointDir, ResultsTree, SweepDir

if TYPE_CHECKING:  # parsing a file imports the schema: an ingest that finds nothing changed parses none
    from slurmx.results.schema import Result

ENV_DB = "SLURMX_DB"
# collect's Row fields that are not one result's own (computed across a sweep's rows) or live elsewhere
_NOT_STORED = {"path", "result", "baseline_arm", "tput_ratio", "ttft_p90_ratio", "north_star", "frontier_views"}
# what compare.identity matches on beyond the Row's own columns, and when/where facts the Row lacks
_EXTRA: tuple[tuple[str, type[Any]], ...] = (
    ("infmax_model_prefix", sa.Text), ("model", sa.Text), ("hw", sa.Text), ("framework", sa.Text),
    ("precision", sa.Text), ("scenario_type", sa.Text), ("is_multinode", sa.Boolean), ("disagg", sa.Boolean),
    ("tp", sa.Integer), ("ep", sa.Integer), ("dp_attention", sa.Text), ("pp", sa.Integer), ("dcp_size", sa.Integer),
    ("pcp_size", sa.Integer), ("kv_offloading", sa.Text), ("recipe_fingerprint", sa.Text),
    ("image_digest", sa.Text), ("aiperf_version", sa.Text), ("started_at", sa.Float), ("repeats", sa.Integer),
    ("ttft_p90_count", sa.Integer), ("ttft_p90_need", sa.Integer), ("ttft_p90_certified", sa.Boolean),
)  # fmt: skip
# columns that make two results the same point whichever sweep ran them (compare.identity's, in its order)
IDENTITY = (
    "infmax_model_prefix", "model", "hw", "framework", "precision", "scenario_type", "is_multinode", "disagg",
    "spec_decoding", "tp", "ep", "dp_attention", "pp", "dcp_size", "pcp_size", "kv_offloading", "arm", "conc",
)  # fmt: skip


def _sql_type(annotation: str) -> type[Any]:
    if "float" in annotation:
        return sa.Float
    if "bool" in annotation:
        return sa.Boolean
    if "int" in annotation:
        return sa.Integer
    return sa.Text


ROW_COLUMNS = tuple(
    (f.name, _sql_type(str(f.type)))
    for f in fields(col.Row)
    if f.name not in _NOT_STORED and f.metadata.get("column", True)
)

metadata = sa.MetaData()
meta = sa.Table("slurmx_meta", metadata, sa.Column("key", sa.String(64), primary_key=True), sa.Column("value", sa.Text))
sweeps = sa.Table(
    "slurmx_sweeps",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("root", sa.Text, nullable=False),  # the results tree's absolute path
    sa.Column("config_key", sa.Text, nullable=False),
    sa.Column("sweep_id", sa.Text, nullable=False),
    sa.Column("cluster", sa.Text),  # sweep.json's cluster label
    sa.Column("ran_at", sa.Float),  # sweep.json's created_at, else its first result's start
    sa.Column("ingested_at", sa.Float, nullable=False),
    # a digest of its result files' paths, mtimes and sizes at the last ingest: an unchanged sweep is one compare
    sa.Column("stat_digest", sa.String(64)),
    sa.UniqueConstraint("root", "config_key", "sweep_id"),
)
files = sa.Table(
    "slurmx_files",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("sweep", sa.Integer, sa.ForeignKey("slurmx_sweeps.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("path", sa.Text, nullable=False, unique=True),
    sa.Column("mtime_ns", sa.BigInteger, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("skipped_reason", sa.Text),  # set: not a row (corrupt, wrong schema, wrong directory)
)
results = sa.Table(
    "slurmx_results",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("sweep", sa.Integer, sa.ForeignKey("slurmx_sweeps.id", ondelete="CASCADE"), nullable=False, index=True),
    sa.Column("file", sa.Integer, sa.ForeignKey("slurmx_files.id", ondelete="CASCADE"), nullable=False, unique=True),
    *(sa.Column(name, kind) for name, kind in ROW_COLUMNS),
    *(sa.Column(name, kind) for name, kind in _EXTRA),
    sa.UniqueConstraint("sweep", "point_id", "repeat"),
    sa.Index("slurmx_results_key", "config_key"),
)

# what `collect --index` last wrote beside each sweep: a digest of its rows and skipped files and the options
collected = sa.Table(
    "slurmx_collected",
    metadata,
    sa.Column("sweep", sa.Integer, sa.ForeignKey("slurmx_sweeps.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("digest", sa.Text, nullable=False),
)

# what `collect --index` printed (history/replay.py), by its options; printed again while `state` (its sweeps'
# index state) is unchanged and the summaries it names are still there
replays = sa.Table(
    "slurmx_replays",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("state", sa.String(64), nullable=False),
    sa.Column("summaries", sa.Text, nullable=False),  # a JSON list of the summary.json paths that must exist
    sa.Column("output", sa.LargeBinary, nullable=False),
)


def _schema_version() -> str:
    text = json.dumps(
        [(t.name, [(c.name, str(c.type)) for c in t.columns]) for t in metadata.sorted_tables], sort_keys=True
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


SCHEMA_VERSION = _schema_version()


# ---------------------------------------------------------------- opening


def default_path(root: Path) -> Path:
    """The SQLite file beside a results tree: results/ -> results-index.sqlite."""
    root = root.resolve()
    return root.with_name(f"{root.name}-index.sqlite")


def url_of(db: str | None, root: Path) -> str:
    """--db, else $SLURMX_DB, else the SQLite file beside the tree; a postgresql:// URL uses psycopg 3."""
    given = db or os.environ.get(ENV_DB) or ""
    if not given:
        return f"sqlite:///{default_path(root)}"
    for prefix in ("postgresql://", "postgres://"):
        if given.startswith(prefix):
            return "postgresql+psycopg://" + given.removeprefix(prefix)
    if "://" in given:
        return given
    return f"sqlite:///{Path(given).resolve()}"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL: readers go on while one writer ingests; a killed writer's transaction is rolled back on open
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def open_index(url: str) -> Engine:
    """An engine on the index, its tables created, or rebuilt empty when another schema version wrote them."""
    try:
        engine = sa.create_engine(url)
    except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError) as exc:
        raise UserError(f"--db {url}: not a database URL slurmx can open ({exc})") from None
    if engine.dialect.name == "sqlite":
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        path = engine.url.database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        with engine.begin() as conn:
            meta.create(conn, checkfirst=True)
            stored = conn.execute(sa.select(meta.c.value).where(meta.c.key == "schema_version")).scalar()
            if stored != SCHEMA_VERSION:
                # the index is derived from the files: another version's tables are dropped, re-ingest fills them
                for table in reversed(metadata.sorted_tables):
                    if table is not meta:
                        table.drop(conn, checkfirst=True)
                metadata.create_all(conn)
                conn.execute(sa.delete(meta).where(meta.c.key == "schema_version"))
                conn.execute(sa.insert(meta).values(key="schema_version", value=SCHEMA_VERSION))
    except sa.exc.OperationalError as exc:
        first = str(exc.orig).strip().splitlines()[0]  # the driver's hint lines would break the one-line error
        raise UserError(f"--db {engine.url.render_as_string(hide_password=True)}: cannot open: {first}") from None
    return engine


# ---------------------------------------------------------------- ingest


@dataclass
class Ingested:
    sweeps_seen: int = 0
    sweeps_written: int = 0  # sweeps whose files changed (one transaction each)
    files_read: int = 0
    rows: int = 0  # rows written
    removed: int = 0  # files gone since the last ingest (their rows deleted)
    skipped: list[col.Skipped] = field(default_factory=list)  # corrupt or mismatched files read this time
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"index: {self.sweeps_seen} sweep(s), {self.sweeps_written} changed; {self.files_read} file(s) read, "
            f"{self.rows} row(s) written, {self.removed} removed, {len(self.skipped)} skipped ({self.seconds:.2f} s)"
        )


def _stat_files(sweep: SweepDir) -> dict[str, tuple[int, int]]:
    """Path -> (mtime_ns, size) of the files `col.result_files` lists, on strings: the hot loop of a re-ingest."""
    out: dict[str, tuple[int, int]] = {}
    try:
        points = sorted((e.name, e.path) for e in os.scandir(sweep.path / POINTS) if e.is_dir())
    except FileNotFoundError:
        return {}
    for _, point in points:
        _stat_into(out, f"{point}/{RESULT_JSON}")
        try:
            repeats = [e.path for e in os.scandir(f"{point}/{REPEATS}") if e.name.isdigit()]
        except (FileNotFoundError, NotADirectoryError):
            continue
        for repeat in repeats:
            _stat_into(out, f"{repeat}/{RESULT_JSON}")
    return out


def _stat_into(out: dict[str, tuple[int, int]], path: str) -> None:
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    out[path] = (st.st_mtime_ns, st.st_size)


def ingest(engine: Engine, roots: Iterable[Path], only: set[Path] | None = None) -> Ingested:
    """Every sweep of each results tree into the index (of `only`, sweep paths, when given); sweeps whose files
    did not change are not read."""
    start = time.perf_counter()
    report = Ingested()
    for root in roots:
        root = root.resolve()
        tree_sweeps = list(ResultsTree(root).sweeps())
        with engine.connect() as conn:
            known, digests = {}, {}
            query = sa.select(sweeps.c.id, sweeps.c.config_key, sweeps.c.sweep_id, sweeps.c.stat_digest)
            for r in conn.execute(query.where(sweeps.c.root == str(root))):
                known[(r.config_key, r.sweep_id)] = r.id
                digests[r.id] = r.stat_digest
        for sweep in tree_sweeps:
            if only is not None and sweep.path not in only:
                continue
            report.sweeps_seen += 1
            now = _stat_files(sweep)
            digest = _stat_digest(now)
            sweep_ref = known.get((sweep.config_key, sweep.sweep_id))
            if sweep_ref is not None and digests.get(sweep_ref) == digest:
                continue
            before = _stored_files(engine, sweep_ref) if sweep_ref is not None else {}
            if sweep_ref is not None and now == before:  # the same files, no digest recorded yet
                with engine.begin() as conn:
                    conn.execute(sa.update(sweeps).where(sweeps.c.id == sweep_ref).values(stat_digest=digest))
                continue
            try:
                _ingest_sweep(engine, root, sweep, sweep_ref, now, before, digest, report)
            except sa.exc.IntegrityError:
                # another ingest wrote this sweep meanwhile (its transaction rolled ours back): read what it wrote
                sweep_ref, before = _stored_sweep(engine, root, sweep)
                if sweep_ref is None or now != before:
                    _ingest_sweep(engine, root, sweep, sweep_ref, now, before, digest, report)
        # a sweep directory gone from the tree leaves the index with it
        present = {(s.config_key, s.sweep_id) for s in tree_sweeps}
        gone = [ref for name, ref in known.items() if name not in present]
        if gone:
            with engine.begin() as conn:
                report.removed += len(conn.execute(sa.select(files.c.id).where(files.c.sweep.in_(gone))).all())
                _delete_sweeps(conn, gone)
    report.seconds = time.perf_counter() - start
    return report


def _stat_digest(stats: dict[str, tuple[int, int]]) -> str:
    return hashlib.sha256(repr(sorted(stats.items())).encode()).hexdigest()


def _stored_files(engine: Engine, ref: int) -> dict[str, tuple[int, int]]:
    """One sweep's files' (mtime, size) as the index holds them."""
    with engine.connect() as conn:
        rows = conn.execute(sa.select(files.c.path, files.c.mtime_ns, files.c.size).where(files.c.sweep == ref))
        return {r.path: (r.mtime_ns, r.size) for r in rows}


def _stored_sweep(engine: Engine, root: Path, sweep: SweepDir) -> tuple[int | None, dict[str, tuple[int, int]]]:
    """The index's id of one sweep and its files' (mtime, size), as committed now."""
    with engine.connect() as conn:
        ref = conn.execute(
            sa.select(sweeps.c.id).where(
                sweeps.c.root == str(root), sweeps.c.config_key == sweep.config_key, sweeps.c.sweep_id == sweep.sweep_id
            )
        ).scalar()
    return (None, {}) if ref is None else (ref, _stored_files(engine, ref))


def _delete_sweeps(conn: Connection, refs: list[int]) -> None:
    conn.execute(sa.delete(collected).where(collected.c.sweep.in_(refs)))
    conn.execute(sa.delete(results).where(results.c.sweep.in_(refs)))
    conn.execute(sa.delete(files).where(files.c.sweep.in_(refs)))
    conn.execute(sa.delete(sweeps).where(sweeps.c.id.in_(refs)))


def _sweep_facts(sweep: SweepDir) -> tuple[str | None, float | None]:
    """(cluster label, created_at) from sweep.json, read leniently: a hand-made sweep.json may hold neither."""
    try:
        data = json.loads(sweep.sweep_json.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    cluster = data.get("cluster_label")
    created = data.get("created_at")
    return (
        cluster if isinstance(cluster, str) else None,
        float(created) if isinstance(created, int | float) else None,
    )


def _ingest_sweep(
    engine: Engine,
    root: Path,
    sweep: SweepDir,
    sweep_ref: int | None,
    now: dict[str, tuple[int, int]],
    before: dict[str, tuple[int, int]],
    digest: str,
    report: Ingested,
) -> None:
    changed = [p for p, st in now.items() if before.get(p) != st]
    gone = [p for p in before if p not in now]
    parsed = [(p, now[p], *_read(Path(p), sweep)) for p in changed]  # read before the transaction opens
    cluster, created_at = _sweep_facts(sweep)
    starts = [row["started_at"] or row["ended_at"] for _, _, row, _ in parsed if row is not None]
    with engine.begin() as conn:  # the whole sweep, or nothing of it
        if sweep_ref is None:
            sweep_ref = conn.execute(
                sa.insert(sweeps).values(
                    root=str(root), config_key=sweep.config_key, sweep_id=sweep.sweep_id, cluster=cluster,
                    ran_at=created_at, ingested_at=time.time(), stat_digest=digest,
                ).returning(sweeps.c.id)
            ).scalar_one()  # fmt: skip
        else:
            conn.execute(
                sa.update(sweeps)
                .where(sweeps.c.id == sweep_ref)
                .values(cluster=cluster, ingested_at=time.time(), stat_digest=digest)
            )
        stale = [*changed, *gone]
        if stale:
            old = sa.select(files.c.id).where(files.c.sweep == sweep_ref, files.c.path.in_(stale))
            conn.execute(sa.delete(results).where(results.c.file.in_(old)))
            conn.execute(sa.delete(files).where(files.c.sweep == sweep_ref, files.c.path.in_(stale)))
        rows = []
        if parsed:  # one batched INSERT ... RETURNING, ids in the order given
            refs = conn.execute(
                sa.insert(files).returning(files.c.id, sort_by_parameter_order=True),
                [{"sweep": sweep_ref, "path": path, "mtime_ns": mtime_ns, "size": size, "skipped_reason": reason}
                 for path, (mtime_ns, size), _, reason in parsed],
            ).scalars().all()  # fmt: skip
            rows = [{**row, "sweep": sweep_ref, "file": ref} for ref, (_, _, row, _) in zip(refs, parsed) if row]
        if rows:
            conn.execute(sa.insert(results), rows)
        # the sweep's time: sweep.json's, else its earliest result's start over every row it holds now
        first = conn.execute(
            sa.select(sa.func.min(sa.func.coalesce(results.c.started_at, results.c.ended_at))).where(
                results.c.sweep == sweep_ref
            )
        ).scalar()
        ran_at = created_at if created_at is not None else (first if first is not None else min(starts, default=None))
        conn.execute(sa.update(sweeps).where(sweeps.c.id == sweep_ref).values(ran_at=ran_at))
    report.sweeps_written += 1
    report.files_read += len(parsed)
    report.rows += len(rows)
    report.removed += len(gone)
    report.skipped.extend(col.Skipped(Path(p), reason) for p, _, row, reason in parsed if row is None and reason)


def _read(path: Path, sweep: SweepDir) -> tuple[dict[str, Any] | None, str | None]:
    """(the row's columns, None) or (None, why the file is not a row): collect's own reading and gate."""
    result, reason = col.read_result(path)
    if result is None:
        return None, reason or "invalid"
    if result.slurmx is not None and result.slurmx.point_id != PointDir(path.parent).point_id:
        return None, f"point id {result.slurmx.point_id} in the file does not match its directory"
    return columns(col.flatten(result, path, sweep), result), None


def columns(row: col.Row, result: Result) -> dict[str, Any]:
    meta_ = result.slurmx
    cert = row.ttft_p90_cert
    out: dict[str, Any] = {name: getattr(row, name) for name, _ in ROW_COLUMNS}
    out.update(
        infmax_model_prefix=result.infmax_model_prefix, model=result.model, hw=result.hw,
        framework=result.framework, precision=result.precision, scenario_type=result.scenario_type,
        is_multinode=result.is_multinode, disagg=result.disagg, tp=result.tp, ep=result.ep,
        dp_attention=result.dp_attention.lower(), pp=result.pp or 1, dcp_size=result.dcp_size or 1,
        pcp_size=result.pcp_size or 1, kv_offloading=result.kv_offloading,
        recipe_fingerprint=result.recipe_fingerprint or None,
        image_digest=meta_.image_digest if meta_ else None, aiperf_version=meta_.aiperf_version if meta_ else None,
        started_at=meta_.started_at if meta_ else None, repeats=row.planned_repeats,
        ttft_p90_count=cert.count if cert else None, ttft_p90_need=cert.need if cert else None,
        ttft_p90_certified=cert.certified if cert else None,
    )  # fmt: skip
    return out


def skipped_files(engine: Engine, config_key: str | None = None) -> list[col.Skipped]:
    """Every file the index holds as not a row, with its reason (of one key, when given)."""
    query = sa.select(files.c.path, files.c.skipped_reason).where(files.c.skipped_reason.is_not(None))
    if config_key is not None:
        query = query.join(sweeps, files.c.sweep == sweeps.c.id).where(sweeps.c.config_key == config_key)
    with engine.connect() as conn:
        return [col.Skipped(Path(r.path), r.skipped_reason) for r in conn.execute(query.order_by(files.c.path))]
