"""From a mirror folder to an MCP answer: sensor, Dagster on Postgres storage, MCP over HTTP."""

import asyncio
import shutil

import pytest
from mcp import Client

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.store.database import database_url as resolve_url
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.definitions import defs as load_defs
from librarian_dagster.defs.partitions import session_id_of
from librarian_dagster.ingest import open_instance
from mcp_server.app import Served, build_server, http_app
from tests.conftest import TRANSCRIPTS
from tests.helpers import age, append_prompt, free_port, sensor_tick, serve_http, settings_in_env

CSS = "4379d1bf-ccb1-414e-a856-9791b73f3af2"  # adds margin-bottom to closed <details>
CI = "fe869ecb-c176-478f-9734-7e4b8ef12cff"  # adds a GitHub Action for tests and linting


@pytest.fixture
def env(tmp_path, database_url, monkeypatch):
    mirror = tmp_path / "mirror"
    for project, session in (("-Users-dain-site", CSS), ("-Users-dain-claude-code-log", CI)):
        target = mirror / project / f"{session}.jsonl"
        target.parent.mkdir(parents=True)
        shutil.copy(TRANSCRIPTS / "daaain__claude-code-log" / f"{session}.jsonl", target)
        age(target, 600)
    settings = settings_in_env(monkeypatch, tmp_path, database_url, mirror)
    definitions = load_defs()
    instance = open_instance(settings)
    yield settings, definitions, instance, mirror
    dispose_instance(instance)


def _run(definitions, instance, result):
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    job = definitions.resolve_job_def("ingest_session")
    for request in result.run_requests:
        outcome = job.execute_in_process(partition_key=request.partition_key, instance=instance)
        assert outcome.success


def _call(url, tool, arguments):
    async def go():
        async with Client(url + "/mcp") as client:
            return await client.call_tool(tool, arguments)

    return asyncio.run(go())


def test_mirror_to_mcp_answer_and_resumed_session(env):
    settings, definitions, instance, mirror = env

    first = sensor_tick(definitions, instance, None)
    assert sorted(session_id_of(r.partition_key) for r in first.run_requests) == sorted([CSS, CI])
    assert len({r.run_key for r in first.run_requests}) == 2
    _run(definitions, instance, first)
    assert {session_id_of(k) for k in instance.get_dynamic_partitions("sessions")} == {CSS, CI}

    store = Store(resolve_url(settings))
    server = build_server(Served.of(store, local_embedder()))
    with serve_http(http_app(server, "127.0.0.1"), free_port()) as url:
        found = _call(url, "search_chunks", {"query": "spacing below collapsed details elements"})
        results = found.structured_content["results"]
        assert results[0]["session_id"] == CSS
        assert results[0]["score"] >= results[-1]["score"]

        digest = _call(url, "get_digest", {"session_id": CSS}).structured_content
        assert digest["session_id"] == CSS
        assert digest["summary"] == results[0]["summary"]
        # The session's ask, as its summary (the digest says it once).
        assert "margin-bottom" in digest["summary"]

        listed = _call(url, "list_sessions", {}).structured_content["sessions"]
        assert {s["session_id"] for s in listed} == {CSS, CI}
        by_id = {s["session_id"]: s for s in listed}
        assert by_id[CSS]["summary"] == digest["summary"]
        assert listed[0]["ended_at"] >= listed[1]["ended_at"]

        ci = _call(url, "search_chunks", {"query": "GitHub workflow running the test suite"})
        assert ci.structured_content["results"][0]["session_id"] == CI

    # Unchanged files: nothing is requested again.
    again = sensor_tick(definitions, instance, first.cursor)
    assert again.run_requests == []

    # The CSS session is resumed: it grows, and is requested exactly once more.
    grown = mirror / "-Users-dain-site" / f"{CSS}.jsonl"
    append_prompt(grown, CSS, "Also make the summary text bold please", "u-extra")
    age(grown, 600)
    grown_tick = sensor_tick(definitions, instance, again.cursor)
    assert [session_id_of(r.partition_key) for r in grown_tick.run_requests] == [CSS]
    assert grown_tick.run_requests[0].run_key != next(
        r.run_key for r in first.run_requests if session_id_of(r.partition_key) == CSS
    )
    _run(definitions, instance, grown_tick)
    assert sensor_tick(definitions, instance, grown_tick.cursor).run_requests == []
    memory = store.memories.get_memory(CSS)
    assert memory is not None
    assert any("bold" in b for b in memory.digest.worked_on)
    assert store.memories.stats().sessions == 2
    store.close()


def test_a_session_still_being_written_waits_until_it_settles(env):
    _settings, definitions, instance, mirror = env
    fresh = mirror / "-Users-dain-site" / f"{CSS}.jsonl"
    age(fresh, 5)  # written 5 s ago, settle time is 120 s
    result = sensor_tick(definitions, instance, None)
    assert [session_id_of(r.partition_key) for r in result.run_requests] == [CI]
    age(fresh, 600)
    later = sensor_tick(definitions, instance, result.cursor)
    assert [session_id_of(r.partition_key) for r in later.run_requests] == [CSS]
