"""The shared fixtures give what a test would make itself: `database_url`, a copy of the template,
is the database a first start leaves (Librarian's schema and Dagster's tables), and
`empty_database_url` is an empty one."""

import psycopg

from librarian_dagster.core.assembly.store import migrated_url
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.ingest import open_instance
from tests.helpers import make_settings


def _tables(url: str) -> dict[str, list[tuple[str, str]]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
        ).fetchall()
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in rows:
        tables.setdefault(table, []).append((column, kind))
    return tables


def test_a_copy_of_the_template_is_what_a_first_start_makes(
    tmp_path, monkeypatch, database_url, empty_database_url
):
    assert _tables(empty_database_url) == {}
    copied = _tables(database_url)
    settings = make_settings(tmp_path, empty_database_url)
    migrated_url(settings)  # the store's schema, as every command makes it first
    monkeypatch.setenv("DAGSTER_HOME", "")  # open_instance sets it: put back after the test
    dispose_instance(open_instance(settings))  # Dagster's tables, as the first ingest makes them
    assert copied == _tables(empty_database_url)
