"""The `database_url` fixture's databases, used again: once a test is done with its copy of the
template and nothing holds it, the copy is put back as the template left it (every table's rows,
every sequence's position) and the worker's next test gets it, unless its schema changed then.

A new copy costs the server about 60 ms of CPU (CREATE DATABASE copies the template's 9 MB, the
catalogs most of it) and its first connection 3 ms more; putting one back, a few ms. A copy that
cannot be put back (another connection holds it, a test changed its schema) is left as it is, as
every copy was before, and the next test gets a new one."""

from collections.abc import Callable
from dataclasses import dataclass

import psycopg
from psycopg import sql

_OURS = (
    "n.nspname NOT IN ('pg_catalog', 'information_schema') "
    "AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%'"
)
SCHEMA = f"""
SELECT md5(string_agg(item, E'\\n' ORDER BY item)) FROM (
  SELECT 'relation ' || c.oid::regclass::text || ' ' || c.relkind::text || ' '
         || coalesce(array_to_string(c.reloptions, ','), '') || ' ' || coalesce(c.relacl::text, '')
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_OURS}
  UNION ALL
  SELECT 'column ' || c.oid::regclass::text || '.' || a.attname || ' '
         || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' '
         || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attnum > 0 AND NOT a.attisdropped AND {_OURS}
  UNION ALL
  SELECT 'index ' || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_OURS}
  UNION ALL
  SELECT 'constraint ' || o.conrelid::regclass::text || ' ' || o.conname || ' '
         || pg_get_constraintdef(o.oid)
    FROM pg_constraint o JOIN pg_namespace n ON n.oid = o.connamespace WHERE {_OURS}
  UNION ALL
  SELECT 'function ' || p.oid::regprocedure::text || ' ' || md5(p.prosrc)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE {_OURS}
  UNION ALL
  SELECT 'trigger ' || pg_get_triggerdef(t.oid) FROM pg_trigger t WHERE NOT t.tgisinternal
  UNION ALL
  SELECT 'type ' || t.oid::regtype::text
    FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE {_OURS}
  UNION ALL
  SELECT 'label ' || e.enumtypid::regtype::text || ' ' || e.enumlabel FROM pg_enum e
  UNION ALL
  SELECT 'extension ' || x.extname || ' ' || x.extversion FROM pg_extension x
  UNION ALL
  SELECT 'schema ' || n.nspname FROM pg_namespace n WHERE {_OURS}
  UNION ALL
  SELECT 'setting ' || array_to_string(s.setconfig, ',') FROM pg_db_role_setting s
    WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
) AS schema (item)
"""
"""One hash of everything a test could change besides rows: relations, columns, indexes,
constraints, functions, triggers, types, extensions, schemas and the database's settings."""


@dataclass(frozen=True)
class _Pristine:
    """What a new copy of the template holds: its schema's hash, its indexes, its tables, the rows
    of those that have any (as JSON), and where each sequence stands (`setval`'s arguments)."""

    schema: str
    indexes: frozenset[str]
    tables: tuple[sql.Composable, ...]
    rows: tuple[tuple[sql.Composable, str], ...]
    sequences: tuple[tuple[str, int, bool], ...]


def _pristine(conn: psycopg.Connection) -> _Pristine:
    names = conn.execute(
        "SELECT schemaname, tablename FROM pg_tables WHERE schemaname = 'public'"
    ).fetchall()
    tables = tuple(sql.Identifier(schema, table) for schema, table in names)
    rows = []
    for table in tables:
        query = sql.SQL("SELECT json_agg(t)::text FROM {} AS t").format(table)
        if (held := conn.execute(query).fetchone()[0]) is not None:  # type: ignore[index]
            rows.append((table, held))
    sequences = conn.execute(
        "SELECT format('%I.%I', schemaname, sequencename), coalesce(last_value, start_value), "
        "last_value IS NOT NULL FROM pg_sequences"
    ).fetchall()
    schema = conn.execute(SCHEMA).fetchone()[0]  # type: ignore[index]
    return _Pristine(schema, _indexes(conn), tables, tuple(rows), tuple(sequences))


def _indexes(conn: psycopg.Connection) -> frozenset[str]:
    return frozenset(
        name
        for (name,) in conn.execute(
            "SELECT indexrelid::regclass::text FROM pg_index i JOIN pg_class c ON c.oid = "
            "i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE " + _OURS
        )
    )


class TemplateCopies:
    """One worker's copies of the template: `take` one for a test, `give_back` it after."""

    def __init__(self) -> None:
        self._ready: list[str] = []
        self._pristine: _Pristine | None = None

    def take(self, new_copy: Callable[[], str]) -> str:
        """A copy put back, or a new one (`new_copy()`, the first of which is measured)."""
        if self._ready:
            return self._ready.pop()
        url = new_copy()
        if self._pristine is None:
            with psycopg.connect(url) as conn:
                self._pristine = _pristine(conn)
        return url

    def give_back(self, url: str) -> None:
        """Put the copy back as it was made, for the next test, where it can be."""
        if self._pristine is not None and _put_back(url, self._pristine):
            self._ready.append(url)


def _put_back(url: str, pristine: _Pristine) -> bool:
    """In one transaction: the indexes the template has not dropped (the vector indexes that
    storing a first embedding of a size makes), every table emptied and its first rows written
    again, every sequence where it stood. Not where another connection is open on it (it may
    write on) or its schema is not the template's otherwise; nothing is changed then."""
    try:
        with psycopg.connect(url) as conn:
            return _put_back_in(conn, pristine)
    except psycopg.Error:
        return False  # rolled back: left as the test left it


def _put_back_in(conn: psycopg.Connection, pristine: _Pristine) -> bool:
    others = conn.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchone()[0]  # type: ignore[index]
    if others:
        return False
    conn.execute("SET LOCAL lock_timeout = '2s'")
    for index in _indexes(conn) - pristine.indexes:
        conn.execute(sql.SQL("DROP INDEX {}").format(sql.SQL(index)))
    if conn.execute(SCHEMA).fetchone()[0] != pristine.schema:  # type: ignore[index]
        conn.rollback()
        return False
    # Triggers and foreign keys off (a superuser's setting): the rows are the template's.
    conn.execute("SET LOCAL session_replication_role = replica")
    for table in pristine.tables:
        conn.execute(sql.SQL("DELETE FROM {}").format(table))
    for table, rows in pristine.rows:
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT * FROM json_populate_recordset(NULL::{}, %s)").format(
                table, table
            ),
            (rows,),
        )
    for sequence, value, called in pristine.sequences:
        conn.execute("SELECT setval(%s, %s, %s)", (sequence, value, called))
    return True
