"""A fresh database on the real PostgreSQL server (scripts/local-postgres.sh up) per test that asks for one."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from slurmx.history import index

# scripts/local-postgres.sh url
DEFAULT_URL = "postgresql://slurmx@127.0.0.1:15432/slurmx"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    base = os.environ.get("SLURMX_TEST_POSTGRES", DEFAULT_URL)
    admin = sa.create_engine(index.url_of(base, os.curdir), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        if os.environ.get("CI") == "true":  # CI starts the server (.ci/run): its absence is a failure there
            pytest.fail(f"no PostgreSQL server at {base} under CI ({exc.orig})")
        pytest.skip(f"no PostgreSQL server at {base}: run scripts/local-postgres.sh up ({exc.orig})")
    name = f"slurmx_test_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    try:
        yield base.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
