"""What the recall server's tools read is opened as the server starts and closed as it stops."""

import asyncio
from contextlib import contextmanager

import httpx
from mcp import Client

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


def test_a_client_s_session_opens_it_once_and_the_last_one_out_closes_it(store):
    events: list[str] = []
    server = build_server(_recording_opener(store, events))

    async def go() -> None:
        async with Client(server) as first:
            async with Client(server) as second:  # a second connection shares what is open
                await second.call_tool("list_sessions", {})
            assert events == ["open"]
            listed = await first.call_tool("list_sessions", {})
            assert not listed.is_error

    asyncio.run(go())
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
