"""The `database_url` fixture's copies of the template are used again only as the template left
them (tests/template_copies.py): what a test wrote is gone, and a copy whose schema a test changed,
or that a connection still holds, is not handed out again."""

import psycopg
import pytest

from tests.conftest import TEMPLATE, _new_database
from tests.template_copies import TemplateCopies, _pristine


@pytest.fixture
def copies(pg_server):
    made: list[str] = []

    def new_copy() -> str:
        made.append(_new_database(pg_server, TEMPLATE))
        return made[-1]

    copies = TemplateCopies()
    return copies, new_copy, made


def _as_made(url: str):
    with psycopg.connect(url) as conn:
        return _pristine(conn)


def test_a_used_copy_comes_back_as_the_template_left_it(copies, pg_server):
    from librarian_dagster.core.assembly.store import Store
    from librarian_dagster.core.store.memories import ChunkRecord
    from tests.core.test_store import memory_record

    copies, new_copy, made = copies
    url = copies.take(new_copy)
    with Store(url) as store:  # rows in most tables, a vector index per size, sequences moved
        for session, vector in (("s1", [1.0, 0.0, 0.0]), ("s2", [0.6, 0.8, 0.0, 0.0, 0.0])):
            chunk = ChunkRecord("worked_on", 0, f"a bullet of {session}", vector)
            store.memories.replace_memory(memory_record(session), [chunk])
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE store_identity SET id = gen_random_uuid()")
        conn.execute("INSERT INTO kvs (key, value) VALUES ('a', 'b')")
    assert _as_made(url) != _as_made(_new_database(pg_server, TEMPLATE))

    copies.give_back(url)

    assert copies.take(new_copy) == url and made == [url]
    assert _as_made(url) == _as_made(_new_database(pg_server, TEMPLATE))


def test_a_copy_whose_schema_changed_or_still_held_is_not_handed_out_again(copies):
    copies, new_copy, made = copies
    changed = copies.take(new_copy)
    with psycopg.connect(changed) as conn:
        conn.execute("ALTER TABLE memories ADD COLUMN spare text")
    copies.give_back(changed)
    held = copies.take(new_copy)
    with psycopg.connect(held) as holder:
        holder.execute("INSERT INTO kvs (key, value) VALUES ('a', 'b')")
        holder.commit()
        copies.give_back(held)
    third = copies.take(new_copy)
    assert len({changed, held, third}) == 3 and made == [changed, held, third]
    with psycopg.connect(changed) as conn:  # each left as its test left it
        assert conn.execute("SELECT count(*) FROM pg_attribute WHERE attname = 'spare'").fetchone()
    with psycopg.connect(held) as conn:
        assert conn.execute("SELECT value FROM kvs WHERE key = 'a'").fetchone() == ("b",)
