"""What the recall server's tools read is opened as the server starts and closed as it stops."""

import asyncio
from contextlib import contextmanager

import httpx
from mcp import Client, ClientSession
from mcp.client.sse import sse_client

from mcp_server.app import Served, build_server, http_app
from tests.helpers import free_port, serve_http
from tests.mcp_server.test_tools import FakeEmbedder


def _recording_opener(store, events: list[str]):
    @contextmanager
    def opener():
        events.append("open")
        try:
            yield Served.of(store, FakeEmbedder())
        finally:
            events.append("close")

    return opener


def test_mcp_sessions_over_both_transports_share_what_the_app_opened_once(store):
    # The HTTP app's lifespan opens it; an MCP session, streamable or legacy SSE, opens nothing.
    events: list[str] = []
    server = build_server(_recording_opener(store, events))

    async def go(url: str) -> None:
        async with (
            Client(url + "/mcp") as streamable,
            sse_client(url + "/sse") as (read, write),
            ClientSession(read, write) as legacy,
        ):
            await legacy.initialize()
            assert not (await streamable.call_tool("list_sessions", {})).is_error
            assert not (await legacy.call_tool("list_sessions", {})).is_error
            assert events == ["open"]
        assert events == ["open"]  # both sessions over: the store stays open for the next

    with serve_http(http_app(server, "127.0.0.1"), free_port()) as url:
        asyncio.run(go(url))
    assert events == ["open", "close"]


def test_the_http_app_opens_it_at_start_and_closes_it_at_shutdown(store):
    events: list[str] = []
    server = build_server(_recording_opener(store, events))
    with serve_http(http_app(server, "127.0.0.1"), free_port()) as url:
        assert events == ["open"]
        # The prompt hook's endpoint, which calls the tool outside any MCP session, reads it too.
        answered = httpx.post(url + "/recall", json={"query": "lock"}, timeout=20)
        assert answered.status_code == 200, answered.text
    assert events == ["open", "close"]
