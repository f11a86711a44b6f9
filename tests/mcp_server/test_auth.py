"""Who may read what, over real HTTP with the mcp SDK's client: the auth matrix.

No token and a wrong one get 401 on every endpoint; a token without the `private` scope sees
every domain but `private` through every tool and /recall; one with it sees everything.
"""

import asyncio
import os
import subprocess
import sys
from contextlib import contextmanager

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from librarian_dagster.core.service import tokens
from librarian_dagster.core.store.memories import ChunkRecord
from mcp_server.app import Served, build_server, http_app
from mcp_server.auth import TokenFileVerifier
from mcp_server.tools import PRIVATE_REFUSED
from tests.core.test_store import memory_record
from tests.helpers import free_port, serve_http
from tests.mcp_server.test_tools import FakeEmbedder

SHARED = "shared-secret-from-LIBRARIAN_MCP_TOKEN"
WORK, PRIVATE = "work-session", "private-session"


def _remember(store) -> None:
    for session_id, domain in ((WORK, "technical"), (PRIVATE, "private")):
        store.memories.replace_memory(
            memory_record(session_id, domain=domain, embedding_model=FakeEmbedder.model_name),
            [ChunkRecord("worked_on", 0, f"sqlite lock fix in {session_id}", [1.0, 0.0, 0.0])],
        )


@pytest.fixture
def world(store, tmp_path):
    """A served recall server with one work and one private session, and its tokens."""
    _remember(store)
    path = tmp_path / "tokens.json"
    reader, _ = tokens.add(path, "reader")
    owner, _ = tokens.add(path, "owner", tokens.PRIVATE)
    server = build_server(
        Served.of(store, FakeEmbedder()), verifier=TokenFileVerifier(path, shared_token=SHARED)
    )
    with serve_http(http_app(server, "127.0.0.1"), free_port()) as url:
        yield {"url": url, "path": path, "reader": reader, "owner": owner}


def _headers(world, caller: str) -> dict[str, str]:
    token = {
        "none": None,
        "wrong": tokens.new_token(),
        "reader": world["reader"],
        "owner": world["owner"],
        "shared": SHARED,
    }[caller]
    return {"Authorization": f"Bearer {token}"} if token else {}


def _ask_every_tool(url: str, headers: dict[str, str]) -> dict:
    """What one caller gets from each tool, in one MCP session over streamable HTTP."""

    async def go():
        async with (
            # The SDK's own client timeouts, not httpx2's 5 s default: a busy machine is slow.
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
            Client(streamable_http_client(url + "/mcp", http_client=http)) as client,
        ):
            found = await client.call_tool("search_chunks", {"query": "lock", "limit": 10})
            listed = await client.call_tool("list_sessions", {})
            work = await client.call_tool("get_digest", {"session_id": WORK})
            private = await client.call_tool("get_digest", {"session_id": PRIVATE})
            by_domain = await client.call_tool(
                "search_chunks", {"query": "lock", "domain": "private"}
            )
            return found, listed, work, private, by_domain

    found, listed, work, private, by_domain = asyncio.run(go())
    assert not (found.is_error or listed.is_error or work.is_error)
    return {
        "search_chunks": {r["session_id"] for r in found.structured_content["results"]},
        "list_sessions": {s["session_id"] for s in listed.structured_content["sessions"]},
        "get_digest": {WORK} | (set() if private.is_error else {PRIVATE}),
        "private_refused": by_domain.is_error
        and by_domain.content[0].text.endswith(PRIVATE_REFUSED),
        "unknown_and_private_alike": private.is_error
        and private.content[0].text.endswith(f"no session {PRIVATE!r} in memory"),
    }


@pytest.mark.parametrize("caller", ["none", "wrong"])
def test_no_token_or_a_wrong_one_is_a_401_everywhere(world, caller):
    url, headers = world["url"], _headers(world, caller)
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    mcp = httpx.post(url + "/mcp", json=initialize, headers=headers | accept, timeout=20)
    sse = httpx.get(url + "/sse", headers=headers, timeout=20)
    recall = httpx.post(url + "/recall", json={"query": "lock"}, headers=headers, timeout=20)
    for response in (mcp, sse, recall):
        assert response.status_code == 401, response.request.url
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert "lock fix" not in response.text
    # The SDK's client gets no further than the handshake.
    with pytest.raises(BaseException, match="unhandled errors"):
        _ask_every_tool(url, headers)


@pytest.mark.parametrize("caller", ["reader", "shared"])
def test_a_token_without_the_private_scope_never_sees_the_private_domain(world, caller):
    seen = _ask_every_tool(world["url"], _headers(world, caller))
    assert seen["search_chunks"] == {WORK}
    assert seen["list_sessions"] == {WORK}
    assert seen["get_digest"] == {WORK}
    assert seen["unknown_and_private_alike"]
    assert seen["private_refused"]
    recall = httpx.post(
        world["url"] + "/recall",
        json={"query": "lock", "limit": 10},
        headers=_headers(world, caller),
        timeout=20,
    )
    assert recall.status_code == 200
    assert {r["session_id"] for r in recall.json()["results"]} == {WORK}


def test_a_token_with_the_private_scope_sees_everything(world):
    seen = _ask_every_tool(world["url"], _headers(world, "owner"))
    assert seen["search_chunks"] == {WORK, PRIVATE}
    assert seen["list_sessions"] == {WORK, PRIVATE}
    assert seen["get_digest"] == {WORK, PRIVATE}
    assert not seen["private_refused"]
    recall = httpx.post(
        world["url"] + "/recall",
        json={"query": "lock", "limit": 10},
        headers=_headers(world, "owner"),
        timeout=20,
    )
    assert recall.status_code == 200
    assert {r["session_id"] for r in recall.json()["results"]} == {WORK, PRIVATE}


def test_a_revoked_token_is_refused_on_the_next_request(world):
    def ask() -> int:
        return httpx.post(
            world["url"] + "/recall",
            json={"query": "lock"},
            headers=_headers(world, "reader"),
            timeout=20,
        ).status_code

    assert ask() == 200
    tokens.revoke(world["path"], "reader")
    assert ask() == 401


def test_without_a_token_the_server_decides_about_private(store):
    """The in-memory client, like stdio, carries no token: `private_without_token` decides."""
    _remember(store)

    def listed(server) -> set[str]:
        async def go():
            async with Client(server) as client:
                return await client.call_tool("list_sessions", {})

        return {s["session_id"] for s in asyncio.run(go()).structured_content["sessions"]}

    assert listed(build_server(Served.of(store, FakeEmbedder()))) == {WORK}
    assert listed(build_server(Served.of(store, FakeEmbedder()), private_without_token=True)) == {
        WORK,
        PRIVATE,
    }


def test_an_open_loopback_server_serves_no_private_domain(store):
    _remember(store)
    with serve_http(
        http_app(build_server(Served.of(store, FakeEmbedder())), "127.0.0.1"), free_port()
    ) as url:
        seen = _ask_every_tool(url, {})
    assert seen["list_sessions"] == {WORK} and seen["search_chunks"] == {WORK}


# -- starting the server ---------------------------------------------------------------------------


def _env(tmp_path, store, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    return env | {
        "LIBRARIAN_HOME": str(tmp_path / "home"),
        "LIBRARIAN_DATABASE_URL": store.url,
        **extra,
    }


def test_refuses_an_address_other_than_loopback_without_tokens(tmp_path, store):
    done = subprocess.run(
        [sys.executable, "-m", "mcp_server", "--host", "0.0.0.0", "--port", str(free_port())],
        env=_env(tmp_path, store),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("librarian mcp: refusing to serve 0.0.0.0 without tokens")


def test_a_broken_token_file_stops_the_start_with_one_line(tmp_path, store):
    broken = tmp_path / "tokens.json"
    broken.write_text("{", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mcp_server", "--port", str(free_port())],
        env=_env(tmp_path, store, LIBRARIAN_MCP_TOKENS=str(broken)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("librarian mcp: ") and "not a Librarian token file" in line


@contextmanager
def _started(env: dict[str, str], port: int):
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "--port", str(port)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        yield proc.stderr.readline() + proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_on_loopback_without_tokens_it_runs_open_and_says_so(tmp_path, store):
    with _started(_env(tmp_path, store), free_port()) as said:
        assert "no tokens configured: open to every process on this machine" in said


def test_with_tokens_it_says_they_are_required(tmp_path, store):
    with _started(_env(tmp_path, store, LIBRARIAN_MCP_TOKEN=SHARED), free_port()) as said:
        assert "bearer tokens required" in said


@pytest.mark.parametrize(("setting", "seen"), [("", {WORK}), ("true", {WORK, PRIVATE})])
def test_stdio_serves_private_only_if_LIBRARIAN_STDIO_PRIVATE(tmp_path, store, setting, seen):
    _remember(store)
    env = _env(tmp_path, store, LIBRARIAN_STDIO_PRIVATE=setting)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server", "--transport", "stdio"], env=env
    )

    async def go():
        async with Client(params) as client:
            return await client.call_tool("list_sessions", {})

    listed = asyncio.run(go()).structured_content["sessions"]
    assert {s["session_id"] for s in listed} == seen


# -- the verifier on its own -----------------------------------------------------------------------


def _verify(verifier, token: str):
    return asyncio.run(verifier.verify_token(token))


def test_no_token_configured_means_no_verifier(tmp_path):
    from librarian_dagster.core.settings import Settings
    from mcp_server.auth import verifier_for

    home = {"LIBRARIAN_HOME": str(tmp_path / "home")}
    assert verifier_for(Settings.from_env(home)) is None
    assert verifier_for(Settings.from_env(home | {"LIBRARIAN_MCP_TOKEN": SHARED})) is not None
    tokens.add(tmp_path / "home" / "tokens.json", "x")
    assert verifier_for(Settings.from_env(home)) is not None


def test_the_shared_token_has_the_default_scope_unless_it_is_a_file_token(tmp_path):
    path = tmp_path / "tokens.json"
    owner, _ = tokens.add(path, "owner", tokens.PRIVATE)
    shared = _verify(TokenFileVerifier(path, shared_token=SHARED), SHARED)
    assert shared is not None and shared.scopes == [tokens.READ]
    assert shared.client_id == "LIBRARIAN_MCP_TOKEN" and shared.token != SHARED
    # LIBRARIAN_MCP_TOKEN set to a token of the file: the file's scopes apply.
    same = _verify(TokenFileVerifier(path, shared_token=owner), owner)
    assert same is not None and same.scopes == [tokens.READ, tokens.PRIVATE]
    assert owner not in same.model_dump_json()
    assert _verify(TokenFileVerifier(path, shared_token=SHARED), SHARED[:-1]) is None
    assert _verify(TokenFileVerifier(path, shared_token=SHARED), "") is None


def test_a_token_file_broken_while_serving_refuses_its_tokens(tmp_path, caplog):
    path = tmp_path / "tokens.json"
    reader, _ = tokens.add(path, "reader")
    verifier = TokenFileVerifier(path, shared_token=SHARED)
    assert _verify(verifier, reader) is not None
    path.write_text("{ half written", encoding="utf-8")
    assert _verify(verifier, reader) is None
    assert _verify(verifier, SHARED) is not None
    assert "refusing the token file's tokens" in caplog.text and reader not in caplog.text


def test_legacy_sse_applies_the_same_scopes(world):
    from mcp import ClientSession
    from mcp.client.sse import sse_client

    def listed(caller: str) -> set[str]:
        async def go():
            async with (
                sse_client(world["url"] + "/sse", headers=_headers(world, caller)) as (r, w),
                ClientSession(r, w) as session,
            ):
                await session.initialize()
                return await session.call_tool("list_sessions", {})

        return {s["session_id"] for s in asyncio.run(go()).structured_content["sessions"]}

    assert listed("reader") == {WORK}
    assert listed("owner") == {WORK, PRIVATE}
