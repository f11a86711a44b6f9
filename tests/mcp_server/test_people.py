"""One memory, several people: each session is a person's, shown and filterable as the agent is,
and a private one (of the `private` domain, or of a project its person keeps private) reads only
with that person's tokens, over real HTTP with the mcp SDK's client."""

import asyncio
import re

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from librarian_dagster.core.capture.touches import FileTouch
from librarian_dagster.core.service import tokens
from librarian_dagster.core.store.memories import ChunkRecord
from mcp_server.app import Served, build_server, http_app
from mcp_server.auth import TokenFileVerifier
from tests.core.test_store import memory_record
from tests.helpers import free_port, serve_http
from tests.mcp_server.test_tools import FakeEmbedder

# session -> (person, domain, private project)
SESSIONS = {
    "alice-work": ("alice", "technical", False),
    "alice-secret": ("alice", "private", False),
    "alice-hidden": ("alice", "technical", True),
    "bob-work": ("bob", "technical", False),
    "bob-secret": ("bob", "private", False),
}
FILE = "/src/alpha/billing.ts"


def _remember(store) -> None:
    for session_id, (person, domain, private) in SESSIONS.items():
        memory = memory_record(session_id, domain=domain, embedding_model=FakeEmbedder.model_name)
        store.memories.replace_memory(
            memory.model_copy(update={"person": person, "private": private}),
            [ChunkRecord("worked_on", 0, f"sqlite lock fix in {session_id}", [1.0, 0.0, 0.0])],
            [FileTouch(FILE, 2, 0)],
        )


@pytest.fixture
def team(store, tmp_path):
    _remember(store)
    path = tmp_path / "tokens.json"
    made = {
        "alice": tokens.add(path, "alice-laptop", tokens.PRIVATE, person="alice")[0],
        "bob": tokens.add(path, "bob-laptop", tokens.PRIVATE, person="bob")[0],
        "bob-read": tokens.add(path, "bob-phone", person="bob")[0],
        "owner": tokens.add(path, "owner", tokens.PRIVATE)[0],  # of no person: the server's own
    }
    server = build_server(
        Served.of(store, FakeEmbedder()),
        min_relevance=0.0,
        verifier=TokenFileVerifier(path),
        own_person="carol",
    )
    with serve_http(http_app(server, "127.0.0.1"), free_port()) as url:
        yield url, made


def _tools(url: str, token: str, person: str | None = None) -> dict[str, set[str]]:
    headers = {"Authorization": f"Bearer {token}"}
    only = {"person": person} if person else {}

    async def go():
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
            Client(streamable_http_client(url + "/mcp", http_client=http)) as client,
        ):
            found = await client.call_tool("search_chunks", {"query": "lock", "limit": 10, **only})
            listed = await client.call_tool("list_sessions", only)
            digests = {
                sid: await client.call_tool("get_digest", {"session_id": sid}) for sid in SESSIONS
            }
            history = await client.call_tool("file_history", {"path": FILE, "limit": 10})
            return found, listed, digests, history

    found, listed, digests, history = asyncio.run(go())
    return {
        "search": {r["session_id"] for r in found.structured_content["results"]},
        "persons": {r["person"] for r in found.structured_content["results"]},
        "list": {s["session_id"] for s in listed.structured_content["sessions"]},
        "digest": {sid for sid, got in digests.items() if not got.is_error},
        "history": {r["session_id"] for r in history.structured_content["results"]},
    }


EVERYONE_S = {"alice-work", "bob-work"}


@pytest.mark.parametrize(
    ("caller", "sees"),
    [
        ("alice", EVERYONE_S | {"alice-secret", "alice-hidden"}),
        ("bob", EVERYONE_S | {"bob-secret"}),
        ("bob-read", EVERYONE_S),
        ("owner", EVERYONE_S),  # a private-scope token of another person (the server's own)
    ],
)
def test_a_private_session_reads_only_with_its_person_s_tokens(team, caller, sees):
    url, made = team
    seen = _tools(url, made[caller])
    assert seen == {
        "search": sees,
        "persons": {SESSIONS[s][0] for s in sees},
        "list": sees,
        "digest": sees,
        "history": sees,
    }


def test_the_person_filters_and_is_on_every_json_answer(team):
    url, made = team
    seen = _tools(url, made["alice"], person="bob")
    assert seen["search"] == seen["list"] == {"bob-work"}
    headers = {"Authorization": f"Bearer {made['bob']}"}
    ask = {"query": "how did we fix the sqlite lock", "limit": 10, "budget": 9000}
    recall = httpx.post(url + "/recall", json=ask, headers=headers, timeout=30)
    assert recall.status_code == 200
    # The hooks' text names a teammate's session as theirs, and the asker's (the token's
    # person's) plainly.
    heads = sorted(x for x in recall.json()["context"].splitlines() if x.startswith("- "))
    assert [h.split(" (")[0] for h in heads] == [
        "- alice's session alice-work", "- session bob-secret", "- session bob-work",
    ]  # fmt: skip
    history = httpx.post(url + "/history", json={"path": FILE}, headers=headers, timeout=30)
    assert history.status_code == 200
    assert "\n- alice's session alice-" in history.json()["context"]
    only = httpx.post(url + "/recall", json={**ask, "person": "alice"}, headers=headers, timeout=30)
    assert [
        h.split(" (")[0] for h in only.json()["context"].splitlines() if h.startswith("- ")
    ] == ["- alice's session alice-work"]


def test_the_page_names_the_person_offers_them_and_forgets_only_one_s_own(store, tmp_path):
    from starlette.testclient import TestClient

    _remember(store)
    path = tmp_path / "tokens.json"
    bob = tokens.add(path, "bob-phone", person="bob")[0]
    forgot: list[list[str]] = []

    def forget(ids):
        forgot.append(list(ids))
        raise RuntimeError("stop here: who may forget is what this test checks")

    server = build_server(
        Served.of(store, FakeEmbedder()),
        min_relevance=0.0,
        verifier=TokenFileVerifier(path),
        forget=forget,
        own_person="carol",
    )
    origin = "http://127.0.0.1:3201"
    page = TestClient(http_app(server, "127.0.0.1"), base_url=origin, follow_redirects=False)
    bearer = {"authorization": f"Bearer {bob}"}
    answer = page.get("/?q=lock", headers=bearer).text
    assert re.search(r'<select name="person"[^>]*>.*alice.*bob', answer, re.S)
    assert re.search(r'<span class="person">alice</span>', answer)
    assert page.get("/session/alice-work/forget", headers=bearer).status_code == 403
    form = page.get("/session/bob-work/forget", headers=bearer)
    assert form.status_code == 200
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', form.text)
    assert csrf is not None
    refused = page.post(
        "/session/alice-work/forget",
        data={"csrf": csrf.group(1)},
        headers={**bearer, "origin": origin},
    )
    assert refused.status_code == 403 and forgot == []
    with pytest.raises(RuntimeError, match="stop here"):
        page.post(
            "/session/bob-work/forget",
            data={"csrf": csrf.group(1)},
            headers={**bearer, "origin": origin},
        )
    assert forgot == [["bob-work"]]
