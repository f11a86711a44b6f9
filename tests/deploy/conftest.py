"""deploy/dagster.yaml in a DAGSTER_HOME of its own, on a fresh database of the embedded server."""

import shutil
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import psycopg
import pytest
from psycopg import sql

DAGSTER_YAML = Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml"


@pytest.fixture
def dagster_db(pg_server) -> str:
    """A fresh, empty database for Dagster's storage on the embedded server."""
    name = f"dagster_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return name


@pytest.fixture
def instance_env(tmp_path, monkeypatch, pg_server, dagster_db) -> Path:
    """DAGSTER_HOME holding deploy/dagster.yaml, and its variables set as a server sets them."""
    home = tmp_path / "dagster-home"
    home.mkdir()
    shutil.copy(DAGSTER_YAML, home / "dagster.yaml")
    # The embedded server listens on a Unix socket only: an empty host makes libpq take the
    # socket folder from PGHOST, as deploy/README.md says for a local socket.
    socket_dir = parse_qs(urlparse(pg_server.get_uri()).query)["host"][0]
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("PGHOST", socket_dir)
    monkeypatch.setenv("DAGSTER_PG_HOST", "")
    monkeypatch.setenv("DAGSTER_PG_PORT", "5432")
    monkeypatch.setenv("DAGSTER_PG_USERNAME", "postgres")
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "")
    monkeypatch.setenv("DAGSTER_PG_DB", dagster_db)
    return home
