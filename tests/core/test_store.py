import random
import string
import types
import typing
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pydantic
import pytest

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.agents import AGENTS
from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.digest.schema import Digest
from librarian_dagster.core.recall.ranking import Boosts
from librarian_dagster.core.recall.relevance import DEFAULT_THRESHOLD
from librarian_dagster.core.store.memories import ChunkRecord, InvalidCursor
from librarian_dagster.core.store.queries import SearchFilters
from librarian_dagster.core.store.rows import MemoryRecord
from librarian_dagster.core.store.schema import MIGRATIONS, migrate

MODEL = "test-model"


def _unit(*xs: float) -> list[float]:
    norm = sum(x * x for x in xs) ** 0.5
    return [x / norm for x in xs]


def memory_record(
    session_id: str,
    *,
    project="alpha",
    domain="technical",
    tags=("go",),
    days_ago=0,
    embedding_model=MODEL,
    agent="claude-code",
) -> MemoryRecord:
    """A memory as the write path would store it; other test folders build theirs here too."""
    end = datetime(2026, 11, 1, tzinfo=UTC) - timedelta(days=days_ago)
    return MemoryRecord(
        session_id=session_id,
        project=project,
        agent=agent,
        cwd=f"/src/{project}",
        git_branch="main",
        started_at=end - timedelta(hours=1),
        ended_at=end,
        title=None,
        digest={
            "summary": f"summary of {session_id}",
            "worked_on": [f"worked on {session_id}"],
            "problem": [],
            "solution": [],
            "open_items": [],
            "tags": list(tags),
            "domain": domain,
            "importance": 3,
        },
        digest_text=f"digest of {session_id}",
        summary=f"summary of {session_id}",
        domain=domain,
        tags=list(tags),
        importance=3,
        content_hash=f"hash-{session_id}",
        digest_version=1,
        digest_model="offline",
        embedding_model=embedding_model,
        turns=4,
    )


def test_migrate_is_idempotent_and_records_the_version(store):
    assert migrate(store.url) == MIGRATIONS[-1][0]
    assert migrate(store.url) == MIGRATIONS[-1][0]
    with psycopg.connect(store.url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0] == len(
            MIGRATIONS
        )


# What each Python type of a MemoryRecord field is stored as (information_schema.data_type).
_PG_TYPES = {
    str: {"text"},
    int: {"smallint", "integer", "bigint"},
    datetime: {"timestamp with time zone"},
    list[str]: {"ARRAY"},
    bool: {"boolean"},
}


def test_memory_record_and_the_migrated_table_agree(store):
    with psycopg.connect(store.url) as conn:
        rows = conn.execute(
            "SELECT column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_name = 'memories'"
        ).fetchall()
    columns = {name: (data_type, nullable == "YES", default) for name, data_type, nullable, default
               in rows}  # fmt: skip
    fields = MemoryRecord.model_fields
    # Only the database's own timestamp is not written by the model.
    assert set(columns) - set(fields) == {"ingested_at"}
    assert columns["ingested_at"][2] == "now()"
    assert set(fields) - set(columns) == set()
    for name, field in fields.items():
        data_type, nullable, _default = columns[name]
        annotation = field.annotation
        optional = typing.get_origin(annotation) is types.UnionType
        assert nullable == optional, name
        if optional:
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        if typing.get_origin(annotation) is typing.Literal:
            annotation = str
        elif isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
            assert data_type == "jsonb", name
            continue
        assert data_type in _PG_TYPES[annotation], (name, data_type)


def test_a_memory_round_trips_through_the_table(store):
    written = memory_record("s1", tags=("go", "sql"))
    store.memories.replace_memory(written, [ChunkRecord("worked_on", 0, "a bullet", _unit(1, 0))])
    read = store.memories.get_memory("s1")
    assert read is not None
    assert read.chunk_count == 1
    for name in type(read).model_fields.keys() & MemoryRecord.model_fields.keys():
        assert getattr(read, name) == getattr(written, name), name
    assert store.memories.get_memory("missing") is None
    assert store.memories.memory_record("s1") == written
    assert store.memories.memory_record("missing") is None


def test_search_ranks_the_nearest_chunk_first_and_filters(store):
    store.memories.replace_memory(
        memory_record("s1", project="alpha", tags=("go", "git")),
        [
            ChunkRecord("worked_on", 0, "fixed the sqlite lock timeout", _unit(1, 0, 0)),
            ChunkRecord("solution", 0, "raised busy_timeout to 5s", _unit(0.9, 0.1, 0)),
        ],
    )
    store.memories.replace_memory(
        memory_record("s2", project="beta", tags=("python",), days_ago=3),
        [ChunkRecord("worked_on", 0, "wrote the release notes", _unit(0, 1, 0))],
    )
    hits = store.search.find("sqlite lock", _unit(1, 0.05, 0), MODEL, limit=5)
    assert [h.session_id for h in hits][:2] == ["s1", "s1"]
    assert hits[0].text == "fixed the sqlite lock timeout"
    assert hits[0].score > hits[-1].score
    assert hits[0].project == "alpha" and hits[0].summary == "summary of s1"

    only_beta = store.search.find(
        "sqlite lock", _unit(1, 0, 0), MODEL, SearchFilters(project="beta")
    )
    assert {h.session_id for h in only_beta} == {"s2"}
    by_tag = store.search.find("x", _unit(1, 0, 0), MODEL, SearchFilters(tags=["python"]))
    assert {h.session_id for h in by_tag} == {"s2"}
    recent = store.search.find(
        "x", _unit(1, 0, 0), MODEL, SearchFilters(since=datetime(2026, 10, 31, tzinfo=UTC))
    )
    assert {h.session_id for h in recent} == {"s1"}
    assert store.search.find("x", _unit(1, 0, 0), "another-model") == []


def test_full_text_finds_an_exact_identifier_the_vectors_miss(store):
    store.memories.replace_memory(
        memory_record("s1"),
        [ChunkRecord("solution", 0, "ChunkJSONL splits big lines", _unit(0, 0, 1))],
    )
    store.memories.replace_memory(
        memory_record("s2"), [ChunkRecord("solution", 0, "unrelated words here", _unit(1, 0, 0))]
    )
    hits = store.search.find("ChunkJSONL", _unit(1, 0, 0), MODEL, limit=2)
    # s2 wins on the vector alone; s1 is in both lists only through full text, and still ranks.
    assert "s1" in {h.session_id for h in hits}


def test_max_per_session_keeps_one_session_from_filling_the_results(store):
    store.memories.replace_memory(
        memory_record("big"),
        [ChunkRecord("solution", i, f"bullet {i}", _unit(1, 0.01 * i, 0)) for i in range(6)],
    )
    store.memories.replace_memory(
        memory_record("small"), [ChunkRecord("solution", 0, "b", _unit(0.5, 0.5, 0))]
    )
    hits = store.search.find("q", _unit(1, 0, 0), MODEL, limit=5, max_per_session=2)
    assert [h.session_id for h in hits].count("big") == 2
    assert "small" in {h.session_id for h in hits}


def test_replace_memory_swaps_chunks_and_delete_cascades(store):
    store.memories.replace_memory(
        memory_record("s1"), [ChunkRecord("a", i, f"old {i}", _unit(1, 0)) for i in range(3)]
    )
    store.memories.replace_memory(memory_record("s1"), [ChunkRecord("a", 0, "new", _unit(1, 0))])
    assert store.memories.get_memory("s1").chunk_count == 1
    assert store.memories.delete_memory("s1")
    with psycopg.connect(store.url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM indexed_chunks").fetchone()[0] == 0


def test_a_failed_write_leaves_the_previous_memory_whole(store):
    store.memories.replace_memory(memory_record("s1"), [ChunkRecord("a", 0, "kept", _unit(1, 0))])
    duplicate_position = [
        ChunkRecord("a", 0, "x", _unit(1, 0)),
        ChunkRecord("a", 0, "y", _unit(1, 0)),
    ]
    with pytest.raises(psycopg.errors.UniqueViolation):
        store.memories.replace_memory(memory_record("s1"), duplicate_position)
    memory = store.memories.get_memory("s1")
    assert memory is not None and memory.chunk_count == 1
    assert [h.text for h in store.search.find("kept", _unit(1, 0), MODEL)] == ["kept"]


def test_sessions_written_at_once_all_land_and_count_as_written_one_by_one(store):
    """Writers meet (a run of `up` beside a `librarian ingest`, or two runs): every session
    lands, new or replaced, and the BM25 statistics are what counting every chunk gives. Before,
    `CREATE INDEX IF NOT EXISTS` took a lock on the table at each write, and two writers each
    waited for the other's inserts: a deadlock."""
    sessions = {
        f"w{i}": [
            ChunkRecord(EXCHANGE, j, f"lock {i} retry{j} sqlite", _unit(1, j + i)) for j in range(6)
        ]
        for i in range(12)
    }

    def write(item: tuple[str, list[ChunkRecord]]) -> None:
        store.memories.replace_memory(memory_record(item[0]), item[1])

    write(("w-first", [ChunkRecord(EXCHANGE, 0, "the first", _unit(1, 0))]))  # its indexes made
    for _ in range(2):  # new, then each replaced
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(write, sessions.items()))
    with psycopg.connect(store.url) as conn:
        counted = conn.execute("SELECT chunks, total_length FROM chunk_stats").fetchone()
        lexemes = dict(conn.execute("SELECT lexeme, df FROM lexeme_df").fetchall())
    store.memories.recount_from_chunks()
    with psycopg.connect(store.url) as conn:
        assert conn.execute("SELECT chunks, total_length FROM chunk_stats").fetchone() == counted
        assert dict(conn.execute("SELECT lexeme, df FROM lexeme_df").fetchall()) == lexemes
    assert counted[0] == 1 + 12 * 6
    assert all(store.memories.get_memory(s).chunk_count == 6 for s in sessions)


def test_list_sessions_is_newest_first_and_pages_with_a_cursor(store):
    for i in range(5):
        store.memories.replace_memory(memory_record(f"s{i}", days_ago=i), [])
    first = store.memories.list_sessions(limit=2)
    assert [r.session_id for r in first.sessions] == ["s0", "s1"]
    assert first.sessions[0].chunk_count == 0
    rest = store.memories.list_sessions(limit=10, cursor=first.next_cursor)
    assert [r.session_id for r in rest.sessions] == ["s2", "s3", "s4"]
    assert rest.next_cursor is None
    assert store.memories.stats().sessions == 5
    with pytest.raises(InvalidCursor):
        store.memories.list_sessions(cursor="%%%not-a-cursor")


def test_two_dimensions_live_side_by_side(store):
    store.memories.replace_memory(memory_record("small"), [ChunkRecord("a", 0, "t", _unit(1, 0))])
    store.memories.replace_memory(
        memory_record("wide"), [ChunkRecord("a", 0, "t", _unit(1, 0, 0, 0))]
    )
    assert {h.session_id for h in store.search.find("t", _unit(1, 0, 0, 0), MODEL)} == {"wide"}


def test_a_database_without_pgvector_fails_with_a_clear_error(monkeypatch, database_url):
    def refuse(conn):
        raise psycopg.ProgrammingError("vector type not found in the database")

    monkeypatch.setattr("librarian_dagster.core.store.pool.register_vector", refuse)
    with (
        Store(database_url) as store,
        pytest.raises(Exception, match="no `vector` extension"),
        store.database.connection(),
    ):
        pass


def test_filters_on_any_tag_branch_and_time(store):
    store.memories.replace_memory(
        memory_record("s1", tags=("go", "git")).model_copy(update={"git_branch": "feature"}),
        [ChunkRecord("solution", 0, "fixed the lock", _unit(1, 0, 0))],
    )
    store.memories.replace_memory(
        memory_record("s2", tags=("python",), days_ago=10),
        [ChunkRecord("solution", 0, "fixed the lock", _unit(1, 0, 0))],
    )

    def found(**filters) -> set[str]:
        hits = store.search.find("lock", _unit(1, 0, 0), MODEL, SearchFilters(**filters), limit=10)
        return {h.session_id for h in hits}

    assert found(any_tags=["rust", "python"]) == {"s2"}
    assert found(any_tags=["git", "python"]) == {"s1", "s2"}
    assert found(tags=["go", "python"]) == set()
    assert found(git_branch="feature") == {"s1"}
    assert found(until=datetime(2026, 10, 25, tzinfo=UTC)) == {"s2"}


def test_boosts_order_near_ties_by_recency_and_importance(store):
    chunk = [ChunkRecord("solution", 0, "fixed the lock", _unit(1, 0, 0))]
    store.memories.replace_memory(memory_record("a-old", days_ago=400), chunk)
    store.memories.replace_memory(
        memory_record("b-important", days_ago=400).model_copy(update={"importance": 5}), chunk
    )
    store.memories.replace_memory(memory_record("c-recent", days_ago=0), chunk)

    def order(boosts: Boosts) -> list[str]:
        hits = store.search.find("lock", _unit(1, 0, 0), MODEL, limit=3, boosts=boosts)
        return [h.session_id for h in hits]

    # Identical matches: without boosts the tie falls to the session id.
    assert order(Boosts(recency=0, importance=0)) == ["a-old", "b-important", "c-recent"]
    assert order(Boosts(recency=0, importance=0.02))[0] == "b-important"
    assert order(Boosts(recency=0.05, importance=0))[0] == "c-recent"


def test_a_result_names_its_session_and_carries_its_distilled_lines(store):
    long = "Raised busy_timeout to five seconds " + "and more words " * 20
    digest = {
        "summary": "summary of s1",
        "worked_on": ["the user's own prompt, never a highlight"],
        "problem": ["database is locked under two writers"],
        "solution": [long, "WAL mode on", "WAL mode on"],
        "open_items": ["check the reader path"],
        "tags": ["go"],
        "domain": "technical",
        "importance": 3,
    }
    record = memory_record("s1").model_copy(
        update={"title": "Fix the lock", "git_branch": "fix/lock", "digest": Digest(**digest)}
    )
    store.memories.replace_memory(
        record,
        [
            ChunkRecord("open_items", 0, "check the reader path", _unit(1, 0, 0)),
            ChunkRecord(
                EXCHANGE, 0, "User: why is it locked? Assistant: two writers", _unit(1, 0, 0)
            ),
        ],
    )
    [first, *rest] = store.search.find("reader path locked", _unit(1, 0, 0), MODEL)
    assert (first.title, first.git_branch, first.context) == ("Fix the lock", "fix/lock", None)
    cut = long[:199].rsplit(" ", 1)[0].rstrip() + "\u2026"
    # The bullet that matched the query first; then solution, problem, open items in turn.
    assert first.highlights == [
        "check the reader path",
        cut,
        "database is locked under two writers",
    ]
    assert all(len(line) <= 200 for line in first.highlights)
    assert all(hit.highlights == first.highlights for hit in rest)


def test_bm25_statistics_and_session_vectors_follow_every_write_and_a_recount(store):
    store.memories.replace_memory(
        memory_record("s1"),
        [ChunkRecord("a", i, f"sqlite lock number {i}", _unit(1, 0)) for i in range(3)],
    )
    store.memories.replace_memory(
        memory_record("s2"), [ChunkRecord("a", 0, "sqlite rename", _unit(1, 0))]
    )
    store.memories.replace_memory(
        memory_record("s1"), [ChunkRecord("a", 0, "lock again", _unit(1, 0))]
    )
    store.memories.delete_memory("s2")
    with psycopg.connect(store.url) as conn:
        kept = dict(conn.execute("SELECT lexeme, df FROM lexeme_df WHERE df <> 0").fetchall())
        recount = dict(
            conn.execute(
                "SELECT u.lexeme, COUNT(*) FROM indexed_chunks c, unnest(c.text_search) u"
                " GROUP BY u.lexeme"
            ).fetchall()
        )
        stats = conn.execute("SELECT chunks, total_length FROM chunk_stats").fetchone()
        actual = conn.execute(
            "SELECT COUNT(*), SUM(length(text_search)) FROM indexed_chunks"
        ).fetchone()
    assert kept == recount == {"lock": 1}  # "again" is an English stop word
    assert stats == actual == (1, 1)
    with psycopg.connect(store.url, autocommit=True) as conn:
        held = conn.execute("SELECT session_id, embedding::text FROM session_vectors").fetchall()
        conn.execute("DELETE FROM session_vectors")  # as after a bulk load around the store
    store.memories.recount_from_chunks()
    with psycopg.connect(store.url) as conn:
        assert dict(conn.execute("SELECT lexeme, df FROM lexeme_df").fetchall()) == recount
        assert conn.execute("SELECT chunks, total_length FROM chunk_stats").fetchone() == stats
        assert (
            conn.execute("SELECT session_id, embedding::text FROM session_vectors").fetchall()
            == held
        )
        assert held


def test_relevance_comes_from_whichever_layer_says_it(store):
    store.memories.replace_memory(
        memory_record("s1"),
        [
            ChunkRecord("solution", 0, "unrelated bullet", _unit(0, 1, 0)),
            ChunkRecord(EXCHANGE, 0, "why does the sqlite lock time out", _unit(1, 0, 0)),
        ],
    )
    # A digest in its own words (an LLM's), the transcript saying something else.
    store.memories.replace_memory(
        memory_record("s2"),
        [
            ChunkRecord("summary", 0, "made the cache warm up at start", _unit(0, 0.2, 1)),
            ChunkRecord(EXCHANGE, 0, "can you look at this", _unit(0, 1, 0)),
        ],
    )
    [near, *_] = store.search.find("sqlite lock time out", _unit(1, 0, 0), MODEL)
    [digest, *_] = store.search.find("cache warm up", _unit(0, 0.2, 1), MODEL)
    [far, *_] = store.search.find("kubernetes ingress", _unit(-1, 0, 0), MODEL)
    assert near.session_id == "s1" and digest.session_id == "s2"
    assert min(near.score, digest.score) > 0.9 > 0.1 > far.score


def test_each_memory_has_its_mean_exchange_vector_written_and_removed_with_it(store):
    store.memories.replace_memory(
        memory_record("s1"),
        [ChunkRecord(EXCHANGE, 0, "one", _unit(1, 0, 0)), ChunkRecord(EXCHANGE, 1, "two",
         _unit(0, 1, 0)), ChunkRecord("solution", 0, "a bullet", _unit(0, 0, 1))],
    )  # fmt: skip
    store.memories.replace_memory(
        memory_record("s2"), [ChunkRecord("summary", 0, "x", _unit(0, 0, 1))]
    )

    def vectors() -> dict[str, list[float]]:
        with psycopg.connect(store.url) as conn:
            rows = conn.execute("SELECT session_id, embedding::text FROM session_vectors")
            return {sid: [float(x) for x in text.strip("[]").split(",")] for sid, text in rows}

    # The exchanges' mean, bullets left out; a memory without exchanges: all its chunks'.
    assert vectors() == {"s1": pytest.approx([0.5, 0.5, 0]), "s2": pytest.approx([0, 0, 1])}
    store.memories.replace_memory(
        memory_record("s1"), [ChunkRecord(EXCHANGE, 0, "new", _unit(0, 1, 0))]
    )
    assert vectors()["s1"] == pytest.approx([0, 1, 0])
    store.memories.delete_memory("s2")
    assert set(vectors()) == {"s1"}


def _undo_migration_13(conn) -> None:
    """The store as it was before each session recorded its agent (and what came after)."""
    conn.execute("DROP TABLE pushed_sessions, push_machines")  # migration 15's
    conn.execute("DROP INDEX memories_cwd")
    conn.execute("ALTER TABLE memories DROP COLUMN person, DROP COLUMN repository, "
                 "DROP COLUMN private")  # fmt: skip
    conn.execute("DROP TABLE run_history_to_forget")  # migration 14's
    conn.execute("ALTER TABLE memories DROP COLUMN agent")
    conn.execute("ALTER TABLE session_sources DROP COLUMN agent, DROP COLUMN version")


def test_migration_9_gives_the_sessions_already_stored_their_mean_vector(store):
    store.memories.replace_memory(
        memory_record("old"),
        [ChunkRecord(EXCHANGE, 0, "one", _unit(1, 0, 0)), ChunkRecord(EXCHANGE, 1, "two",
         _unit(0, 1, 0))],
    )  # fmt: skip
    with psycopg.connect(store.url, autocommit=True) as conn:
        _undo_migration_13(conn)
        conn.execute("DROP TABLE session_files")  # migration 12's
        conn.execute("DROP TABLE session_vectors")
        conn.execute("DROP FUNCTION librarian_ensure_session_vector_index")
        conn.execute("ALTER TABLE memories DROP COLUMN files")  # migration 10's
        conn.execute("DROP TABLE space_calibrations, store_identity")  # migration 11's
        conn.execute("DELETE FROM schema_migrations WHERE version >= 9")
    assert migrate(store.url) == max(v for v, _ in MIGRATIONS)
    with psycopg.connect(store.url) as conn:
        [(session, text)] = conn.execute("SELECT session_id, embedding::text FROM session_vectors")
        names = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes")}
    assert session == "old" and text == "[0.5,0.5,0]"
    assert "session_vectors_3_hnsw" in names
    # A memory stored before migration 10 changed no files that it knows of, and is searchable.
    old = store.memories.get_memory("old")
    assert old is not None and old.files == []
    [hit] = store.search.find("one", _unit(1, 0, 0), MODEL, limit=1)
    assert hit.session_id == "old" and hit.files == []


def test_migration_12_keeps_the_changed_files_of_the_sessions_already_stored(store):
    record = memory_record("old").model_copy(update={"files": ["a/b.go", "/elsewhere/c.md"]})
    store.memories.replace_memory(record, [])
    with psycopg.connect(store.url, autocommit=True) as conn:
        _undo_migration_13(conn)
        conn.execute("DROP TABLE session_files")
        conn.execute("DELETE FROM schema_migrations WHERE version >= 12")
    assert migrate(store.url) == max(v for v, _ in MIGRATIONS)
    with psycopg.connect(store.url) as conn:
        rows = conn.execute(
            "SELECT path, name, edits, reads FROM session_files ORDER BY path"
        ).fetchall()
    assert rows == [("/elsewhere/c.md", "c.md", 1, 0), ("/src/alpha/a/b.go", "b.go", 1, 0)]


def test_migration_13_keeps_every_memory_as_claude_code_s(store):
    store.memories.replace_memory(memory_record("old"), [])
    store.ledger.record_sources([(SessionFiles("old", Path("/m/old.jsonl")), "f1")])
    with psycopg.connect(store.url, autocommit=True) as conn:
        _undo_migration_13(conn)
        conn.execute("DELETE FROM schema_migrations WHERE version >= 13")
    assert migrate(store.url) == max(v for v, _ in MIGRATIONS)
    old = store.memories.get_memory("old")
    assert old is not None and old.agent == "claude-code"
    assert store.ledger.session_source("old") == SessionFiles("old", Path("/m/old.jsonl"))


def test_a_session_s_agent_and_version_are_kept_where_its_files_are(store):
    files = SessionFiles("ses_1", Path("/d/opencode.db"), agent="opencode", version="1786465939714")
    store.ledger.record_sources([(files, files.fingerprint())])
    assert store.ledger.session_source("ses_1") == files
    store.memories.replace_memory(memory_record("ses_1").model_copy(update={"agent": "codex"}), [])
    again = store.memories.get_memory("ses_1")
    assert again is not None and again.agent == "codex"


def _two_agents(store) -> None:
    """The same work done by Claude Code and by Codex, a private Codex session, and a Claude Code
    session of another project: every list finds each of them."""
    for session_id, agent, project, domain in (
        ("cc", "claude-code", "alpha", "technical"),
        ("cx", "codex", "alpha", "technical"),
        ("cx-private", "codex", "alpha", "private"),
        ("cc-beta", "claude-code", "beta", "technical"),
    ):
        store.memories.replace_memory(
            memory_record(session_id, agent=agent, project=project, domain=domain),
            [
                ChunkRecord("solution", 0, "fixed the sqlite lock timeout", _unit(1, 0, 0)),
                ChunkRecord(EXCHANGE, 0, "User: sqlite lock? Assistant: timeout", _unit(1, 0, 0)),
            ],
        )


@pytest.mark.parametrize("mode", ["hybrid", "vector", "text"])
def test_the_agent_filter_keeps_one_agent_s_sessions_in_every_list(store, mode):
    _two_agents(store)

    def found(**filters) -> dict[str, str]:
        hits = store.search.find(
            "sqlite lock", _unit(1, 0, 0), MODEL, SearchFilters(**filters), limit=10, mode=mode
        )
        return {h.session_id: h.agent for h in hits}

    assert found() == {"cc": "claude-code", "cx": "codex", "cc-beta": "claude-code"}
    assert found(agent="codex") == {"cx": "codex"}
    assert found(agent="codex", include_private=True) == {"cx": "codex", "cx-private": "codex"}
    assert found(agent="claude-code") == {"cc": "claude-code", "cc-beta": "claude-code"}
    assert found(agent="claude-code", project="beta") == {"cc-beta": "claude-code"}
    assert found(agent="codex", project="beta") == {}
    assert found(agent="gemini") == {}
    # A session written after the index's last refresh is filtered by its agent too.
    store.memories.replace_memory(
        memory_record("cx-new", agent="codex"),
        [ChunkRecord("solution", 0, "the sqlite lock again", _unit(1, 0, 0))],
    )
    assert found(agent="codex") == {"cx": "codex", "cx-new": "codex"}
    assert "cx-new" not in found(agent="claude-code")


def test_listings_filter_and_count_by_agent(store):
    _two_agents(store)
    listed = store.memories.list_sessions(SearchFilters(agent="codex"))
    assert [(s.session_id, s.agent) for s in listed.sessions] == [("cx", "codex")]
    every = store.memories.list_sessions(SearchFilters(agent="codex", include_private=True))
    assert {s.session_id for s in every.sessions} == {"cx", "cx-private"}
    assert {s.agent for s in store.memories.list_sessions().sessions} == {"claude-code", "codex"}
    digest = store.memories.get_memory("cx")
    assert digest is not None and digest.agent == "codex"
    counts = [(a.agent, a.sessions) for a in store.memories.agents(include_private=True)]
    assert counts == [("claude-code", 2), ("codex", 2)]
    assert [(a.agent, a.sessions) for a in store.memories.agents()] == [
        ("claude-code", 2),
        ("codex", 1),
    ]
    known = tuple(AGENTS)
    assert store.memories.agents_held(known) == ["claude-code", "codex"]
    store.memories.delete_memory("cx")
    assert store.memories.agents_held(known) == ["claude-code"]
    assert store.memories.agents_held(known, include_private=True) == ["claude-code", "codex"]


def test_a_question_in_other_words_is_ranked_by_meaning_not_by_a_shared_filler_word(store):
    # The session that answers shares no word with the question; another shares "window" and
    # nothing else. BM25 votes only as much as the question's words are found (one word of
    # five), so the vectors and the sessions' whole decide.
    store.memories.replace_memory(
        memory_record("answer"),
        [
            ChunkRecord(
                EXCHANGE, 0, "the telemetry subprocess panicked into stderr", _unit(1, 0.1, 0)
            )
        ],
    )
    store.memories.replace_memory(
        memory_record("filler"),
        [ChunkRecord(EXCHANGE, 0, "resized the window of the dashboard", _unit(0, 1, 0))],
    )
    for i in range(12):  # sessions in between, nearer the question than the filler one
        store.memories.replace_memory(
            memory_record(f"between{i}"),
            [ChunkRecord(EXCHANGE, 0, f"unrelated work {i}", _unit(1, 0.5 + i, 0))],
        )
    hits = store.search.find("crash report scribbled over my shell window", _unit(1, 0, 0), MODEL)
    assert hits[0].session_id == "answer"
    assert (
        store.search.find("resized window dashboard", _unit(0, 1, 0), MODEL)[0].session_id
        == "filler"
    )


@pytest.mark.parametrize("query", ["how did we", "what's O'Reilly & co | !x (y) <-> z:*", ""])
def test_queries_of_stop_words_or_tsquery_syntax_still_search(store, query):
    store.memories.replace_memory(
        memory_record("s1"), [ChunkRecord(EXCHANGE, 0, "fixed the lock", _unit(1, 0, 0))]
    )
    hits = store.search.find(query, _unit(1, 0, 0), MODEL)
    assert [h.session_id for h in hits] == ["s1"]  # found by its vector alone


def test_a_store_from_before_migration_4_gets_one_vector_index_per_layer(store):
    store.memories.replace_memory(
        memory_record("s1"),
        [ChunkRecord(EXCHANGE, 0, "an exchange", _unit(1, 0, 0)),
         ChunkRecord("solution", 0, "a bullet", _unit(0, 1, 0))],
    )  # fmt: skip
    with psycopg.connect(store.url, autocommit=True) as conn:
        # The layout up to migration 3: one index per dimension, both layers in it.
        conn.execute("DROP INDEX indexed_chunks_3_exchange_hnsw, indexed_chunks_3_bullets_hnsw")
        conn.execute("DROP FUNCTION librarian_ensure_vector_indexes")
        conn.execute(
            "CREATE INDEX indexed_chunks_embedding_3_hnsw ON indexed_chunks USING hnsw "
            "((embedding::vector(3)) vector_cosine_ops) WHERE embedding_dim = 3"
        )
        # And what came after it (migrations 5 to 13), as a store of that time lacked them.
        _undo_migration_13(conn)
        conn.execute("DROP TABLE session_files")
        conn.execute("DROP TABLE llm_usage, deferred_digests, skip_list, session_vectors")
        conn.execute("DROP TABLE space_calibrations, store_identity")
        conn.execute("DROP FUNCTION librarian_ensure_session_vector_index")
        conn.execute("ALTER TABLE memories DROP COLUMN source_fingerprint")
        conn.execute("ALTER TABLE memories DROP COLUMN files")
        conn.execute("ALTER TABLE session_sources DROP COLUMN nothing_at_fingerprint")
        conn.execute("DELETE FROM schema_migrations WHERE version >= 4")
    migrate(store.url)
    with psycopg.connect(store.url) as conn:
        names = {
            r[0]
            for r in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'indexed_chunks'"
            )
        }
    assert {"indexed_chunks_3_exchange_hnsw", "indexed_chunks_3_bullets_hnsw"} <= names
    assert "indexed_chunks_embedding_3_hnsw" not in names
    hits = store.search.find("exchange", _unit(1, 0, 0), MODEL)
    assert hits[0].text == "an exchange"


def test_a_chunks_vector_stays_in_its_row(store):
    # Searches read the vectors of the chunks they rank: out of line, each cost three more page
    # reads. A 384-d vector (1.5 kB) with an exchange's 1,000 characters passes PostgreSQL's
    # 2 kB threshold: before migration 8 the vector, the largest field, went out of line.
    rng = random.Random(7)
    text = "".join(rng.choice(string.ascii_letters + " ") for _ in range(1000))
    vector = _unit(*(rng.uniform(-1, 1) for _ in range(384)))
    store.memories.replace_memory(memory_record("long"), [ChunkRecord(EXCHANGE, 0, text, vector)])
    with store.database.connection() as conn:
        row = conn.execute(
            "SELECT pg_column_toast_chunk_id(embedding) AS vector_toast,"
            " pg_column_toast_chunk_id(text) AS text_toast FROM indexed_chunks"
            " WHERE session_id = 'long'"
        ).fetchone()
    assert row is not None
    assert row["vector_toast"] is None, "the vector was moved out of its row"
    assert store.search.find(text[:40], vector, MODEL)[0].text == text


def test_a_question_naming_what_no_chunk_holds_is_less_relevant(store):
    store.memories.replace_memory(
        memory_record("agents"),
        [ChunkRecord(EXCHANGE, 0, "we added Gemini and Claude as agents to track", _unit(1, 0, 0))],
    )
    vector = _unit(1, 0.3, 0)  # the same closeness for both questions
    [seen] = store.search.find("Did we add Gemini or Claude as an agent?", vector, MODEL, limit=1)
    [unseen] = store.search.find(
        "Did we add Ollama or LocalAI as an agent?", vector, MODEL, limit=1
    )
    assert seen.session_id == unseen.session_id == "agents"
    assert seen.score > DEFAULT_THRESHOLD > unseen.score


def test_jargon_no_chunk_holds_is_less_relevant_and_a_held_word_mistyped_is_not(store):
    store.memories.replace_memory(
        memory_record("scans"),
        [ChunkRecord(EXCHANGE, 0, "we run gitleaks over the checkpoint commits", _unit(1, 0, 0))],
    )
    vector = _unit(1, 0.3, 0)  # the same closeness for every question

    def best(question: str) -> float:
        [hit] = store.search.find(question, vector, MODEL, limit=1)
        assert hit.session_id == "scans"
        return hit.score

    held, mistyped = best("do we run gitleaks?"), best("do we run gitlaeks?")
    assert held > DEFAULT_THRESHOLD > best("do we run trufflehog?")
    assert mistyped == pytest.approx(held, abs=0.05)


def test_the_same_cosine_counts_for_less_in_a_store_whose_unrelated_chunks_are_alike(
    pg_server,
):
    # Two stores of 12 sessions x 20 chunks (enough to measure their own background): in one,
    # unrelated chunks point anywhere (cosine ~0 between sessions); in the other, every chunk
    # leans the same way (cosine ~0.8). A question at cosine 0.8 to its best chunk stands out in
    # the first and is chance in the second.
    rng = random.Random(3)
    judged = {}
    for name, lean in (("spread", 0.0), ("alike", 8.0)):
        database = f"{name}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{database}"')
        migrate(pg_server.get_uri(database))
        with Store(pg_server.get_uri(database)) as store:
            for s in range(12):
                chunks = []
                for i in range(20):
                    noise = [rng.gauss(0, 1) for _ in range(16)]
                    chunks.append(ChunkRecord(EXCHANGE, i, f"s{s} c{i}", _unit(lean, *noise)))
                store.memories.replace_memory(memory_record(f"s{s}"), chunks)
            target = _unit(0.8, 0.6, *[0.0] * 15)  # cosine 0.8 with the lean's direction
            store.memories.replace_memory(
                memory_record("target"),
                [ChunkRecord(EXCHANGE, 0, "the answer", _unit(1, *[0.0] * 16))],
            )
            [hit] = store.search.find("the answer", target, MODEL, limit=1)
        judged[name] = (hit.session_id, hit.score)
    assert judged["spread"][0] == "target" and judged["spread"][1] > 0.9
    assert judged["alike"][1] < judged["spread"][1] - 0.3


def test_the_ledger_knows_the_folders_stored_sessions_ran_in(store):
    """Gemini CLI's transcripts keep only a hash of their folder: these place them."""
    assert store.ledger.known_cwds() == []
    for session_id, project in (("s1", "web"), ("s2", "web"), ("s3", "api")):
        store.memories.replace_memory(memory_record(session_id, project=project), [])
    assert sorted(store.ledger.known_cwds()) == ["/src/api", "/src/web"]
