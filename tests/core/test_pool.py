"""The store's pool of kept connections: a dropped one is replaced, an absent server is said."""

import time

import psycopg
import pytest

from librarian_dagster.core.store.pool import CANDIDATES, Database


def test_every_connection_is_set_up_for_search(database_url):
    with Database(database_url) as db, db.connection() as conn:
        assert conn.autocommit
        row = conn.execute("SHOW hnsw.ef_search").fetchone()
        assert row is not None and int(row["hnsw.ef_search"]) == CANDIDATES
        # pgvector's types are registered: a vector comes back as one, not as text.
        vector = conn.execute("SELECT '[1,2]'::vector AS v").fetchone()
        assert vector is not None and vector["v"].to_list() == [1.0, 2.0]


def test_connections_the_server_dropped_are_all_replaced_at_once(database_url):
    # A restart drops every kept connection. Found dead one after another, each would cost a
    # longer pause than the last (the pool's back-off for failed checks: 0, 1, 2 s): about 3 s
    # for four. Replaced together, the next caller waits for one connect.
    with Database(database_url, min_size=4) as db:
        db.pool.wait(timeout=60)
        with psycopg.connect(database_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        started = time.monotonic()
        with db.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
        assert time.monotonic() - started < 1.5


def test_a_server_that_is_not_there_is_said_at_once_in_its_own_words(tmp_path):
    socket = tmp_path / "no-socket"
    started = time.monotonic()
    with (
        Database(f"postgresql://postgres@/librarian?host={socket}") as db,
        pytest.raises(psycopg.OperationalError, match="no-socket") as raised,
        db.connection(),
    ):
        pass
    # Not the pool's own timeout (30 s, "couldn't get a connection"): the connect's reason.
    assert "couldn't get a connection" not in str(raised.value)
    assert time.monotonic() - started < 10
