"""The shared fixtures give what a test would make itself: a copy of the template is the schema a
migration makes, and `database_url` is an empty database."""

import psycopg

from librarian_dagster.core.store.schema import migrate


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


def test_a_store_s_database_is_what_migrating_an_empty_one_makes(store, database_url):
    assert _tables(database_url) == {}
    copied = _tables(store.url)
    migrate(database_url)
    assert copied == _tables(database_url)
