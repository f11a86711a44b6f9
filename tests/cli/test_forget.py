"""`librarian forget`: a session ingested through the real job is taken out of everything the
product keeps (the store and its statistics, the staged files, Dagster's runs, event metadata and
partitions), is never ingested again, and a search that was already running stops finding it;
forgotten from the page, its Dagster records go at the sessions sensor's next tick."""

import os

import dagster as dg
import psycopg

from librarian_dagster.core.assembly.forgetting import forget_sessions
from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.agents import folders
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.recall.answer import recall
from librarian_dagster.core.store.queries import SearchFilters
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.definitions import defs as load_defs
from librarian_dagster.defs.partitions import SESSIONS, STAGES, session_id_of
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.helpers import make_settings, sensor_tick, write_transcript

PRIVATE = "11111111-1111-1111-1111-111111111111"
KEPT = ("22222222-2222-2222-2222-222222222222", "33333333-3333-3333-3333-333333333333")
ALONE = "44444444-4444-4444-4444-444444444444"
LATER = "55555555-5555-5555-5555-555555555555"
WORD = "zanzibarquokka"  # in the private session only, so any trace of it is found
QUESTION = f"How did we fix the {WORD} cache test that hangs on CI?"


def _env(settings, database_url: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "LIBRARIAN_HOME": str(settings.home),
        "LIBRARIAN_MIRROR": str(folders(settings)["claude-code"]),
        "LIBRARIAN_DATABASE_URL": database_url,
    }


def _traces(database_url: str, session_id: str) -> dict[str, int]:
    """Where the session, or its one word, can still be read in the database."""
    with psycopg.connect(database_url) as conn:

        def count(query: str, *params: object) -> int:
            row = conn.execute(query, params).fetchone()
            return int(row[0]) if row else 0

        return {
            "memories": count("SELECT count(*) FROM memories WHERE session_id = %s", session_id),
            "chunks": count(
                "SELECT count(*) FROM indexed_chunks WHERE session_id = %s", session_id
            ),
            "chunk text": count(
                "SELECT count(*) FROM indexed_chunks WHERE text ILIKE %s", f"%{WORD}%"
            ),
            "session vector": count(
                "SELECT count(*) FROM session_vectors WHERE session_id = %s", session_id
            ),
            "sources": count(
                "SELECT count(*) FROM session_sources WHERE session_id = %s", session_id
            ),
            "lexeme": count("SELECT count(*) FROM lexeme_df WHERE lexeme LIKE %s", f"{WORD[:8]}%"),
            # Dagster's storage is in the same database: every event of every run, raw.
            "dagster events": count(
                "SELECT count(*) FROM event_logs WHERE event LIKE %s OR event LIKE %s",
                f"%{session_id}%",
                f"%{WORD}%",
            ),
        }  # fmt: skip


def test_forget_leaves_nothing_readable_and_keeps_it_out(
    tmp_path, database_url, librarian_cli, monkeypatch
):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, PRIVATE, QUESTION, f"The {WORD} lock was held by the teardown.")
    for i, sid in enumerate(KEPT):
        write_transcript(folder, sid, f"Question {i} about the CSS grid?", f"Answer {i}: gap.")
    settings = make_settings(tmp_path, database_url, folder.parent)
    instance = open_instance(settings)
    outcomes = ingest_sessions(session_files_for([folder]), settings, instance, per_run=10)
    assert [o.status for o in outcomes] == ["ingested"] * 3  # one run for the three
    write_transcript(folder, ALONE, "Why is the login page slow on mobile?", "Big images.")
    ingest_sessions(session_files_for([folder / f"{ALONE}.jsonl"]), settings, instance)
    write_transcript(folder, LATER, "Why does the export time out?", "The query had no index.")
    ingest_sessions(session_files_for([folder / f"{LATER}.jsonl"]), settings, instance)
    assert _traces(database_url, PRIVATE)["dagster events"] > 0
    staged = [settings.home / "staging" / stage / f"{PRIVATE}.json" for stage in STAGES]
    assert any(p.exists() for p in staged)

    # A recall server's search, started before: its postings already hold the session, and
    # kept them in this machine's file.
    running = Store(database_url, postings_dir=settings.postings_dir)
    embedder = local_embedder()
    asked = recall(running.search, embedder, QUESTION, SearchFilters(), 3, min_relevance=0)
    assert asked.results[0].session_id == PRIVATE
    [kept] = settings.postings_dir.glob("*.postings")
    assert WORD.encode() in kept.read_bytes()

    refused = librarian_cli(["forget", PRIVATE], _env(settings, database_url))
    assert refused.returncode == 1 and "add --yes" in refused.stderr  # nothing asked: no change
    assert _traces(database_url, PRIVATE)["memories"] == 1

    done = librarian_cli(["forget", PRIVATE, "--yes"], _env(settings, database_url))
    assert done.returncode == 0, done.stderr
    assert "forgot 1 session(s): 1 memories with their chunks" in done.stdout
    assert "1 Dagster run(s), 1 partition(s)" in done.stdout
    assert "2 other session(s) ran in the same runs: their memories are kept" in done.stdout
    assert all(sid in done.stdout for sid in KEPT)

    assert _traces(database_url, PRIVATE) == dict.fromkeys(_traces(database_url, PRIVATE), 0)
    assert not any(p.exists() for p in staged)
    assert "1 search cache file(s)" in done.stdout
    assert not list(settings.postings_dir.glob("*.postings"))  # the writers' lock file stays
    keys = instance.get_dynamic_partitions(SESSIONS)
    assert PRIVATE not in {session_id_of(k) for k in keys}
    assert {session_id_of(k) for k in keys} == {*KEPT, ALONE, LATER}
    with Store(database_url) as store:
        assert all(store.memories.get_memory(sid) is not None for sid in KEPT)
        assert PRIVATE in store.ledger.skip_list().session_ids

    # The running search no longer finds it; what it found besides is still found.
    again = recall(running.search, embedder, QUESTION, SearchFilters(), 3, min_relevance=0)
    assert PRIVATE not in {r.session_id for r in again.results}
    assert again.results  # the other sessions are still searchable
    # A new process loads the postings anew, and keeps them without the forgotten words.
    with Store(database_url, postings_dir=settings.postings_dir) as fresh:
        recall(fresh.search, embedder, QUESTION, SearchFilters(), 3, min_relevance=0)
    [rewritten] = settings.postings_dir.glob("*.postings")
    assert WORD.encode() not in rewritten.read_bytes()
    running.close()

    # Kept out: an ingest of the whole mirror skips it.
    [again_in] = ingest_sessions(
        session_files_for([folder / f"{PRIVATE}.jsonl"]), settings, instance
    )
    assert again_in.status == "skipped"
    assert _traces(database_url, PRIVATE)["memories"] == 0

    # A session that ran alone, forgotten as the recall server's page forgets (no Dagster in
    # that process): its memory at once, its run and partition at the sessions sensor's tick,
    # and no other session's history with them.
    with Store(database_url, postings_dir=settings.postings_dir) as store:
        page = forget_sessions([ALONE], settings, store, history=None)
    assert page.memories == 1 and "at the next tick of `librarian up`'s sessions sensor" in (
        page.said()
    )
    assert _traces(database_url, ALONE)["memories"] == 0
    assert _traces(database_url, ALONE)["dagster events"] > 0
    monkeypatch.setenv("LIBRARIAN_HOME", str(settings.home))
    monkeypatch.setenv("LIBRARIAN_MIRROR", str(folders(settings)["claude-code"]))
    monkeypatch.setenv("LIBRARIAN_DATABASE_URL", database_url)
    sensor_tick(load_defs(), instance, None)
    assert _traces(database_url, ALONE) == dict.fromkeys(_traces(database_url, ALONE), 0)
    assert ALONE not in {session_id_of(k) for k in instance.get_dynamic_partitions(SESSIONS)}
    with Store(database_url) as store:
        assert store.ledger.queued_run_history() == []
        assert all(store.memories.get_memory(sid) is not None for sid in KEPT)

    # Without `librarian up`, `librarian forget --pending` finishes what the page left.
    with Store(database_url, postings_dir=settings.postings_dir) as store:
        forget_sessions([LATER], settings, store, history=None)
    assert _traces(database_url, LATER)["dagster events"] > 0
    pending = librarian_cli(["forget", "--pending"], _env(settings, database_url))
    assert pending.returncode == 0, pending.stderr
    assert "of 1 session(s) forgotten from the page: 1 run(s), 1 partition(s)" in pending.stdout
    assert _traces(database_url, LATER) == dict.fromkeys(_traces(database_url, LATER), 0)
    again = librarian_cli(["forget", "--pending"], _env(settings, database_url))
    assert "nothing forgotten from the page is left in Dagster" in again.stdout
    memories = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("memory")), limit=100
    ).records
    forgotten = {PRIVATE, ALONE, LATER}
    assert not {session_id_of(r.partition_key or "") for r in memories} & forgotten
    dispose_instance(instance)


def test_forget_by_project_asks_and_refuses_bad_input(tmp_path, database_url, librarian_cli):
    settings = make_settings(tmp_path, database_url)
    env = _env(settings, database_url)
    assert librarian_cli(["forget"], env).returncode == 2
    assert librarian_cli(["forget", "x", "--project", "p"], env).returncode == 2
    assert librarian_cli(["forget", "x", "--pending"], env).returncode == 2
    bad = librarian_cli(["forget", "../etc/passwd"], env)
    assert bad.returncode == 2 and "not a session id" in bad.stderr
    nothing = librarian_cli(["forget", "--project", "nowhere", "--yes"], env)
    assert nothing.returncode == 0 and "nothing to forget" in nothing.stdout
