"""The recall server over its other transports: legacy SSE and stdio (a subprocess)."""

import asyncio
import os
import subprocess
import sys

import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.sse import sse_client

from mcp_server.app import Served, build_server, http_app
from tests.core.test_store import memory_record
from tests.helpers import free_port, serve_http
from tests.mcp_server.test_tools import FakeEmbedder

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


def test_legacy_sse_endpoint_answers_tool_calls(store):
    store.memories.replace_memory(memory_record("s1"), [])
    server = build_server(Served.of(store, FakeEmbedder()))

    async def go(url):
        async with (
            sse_client(url + "/sse") as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool("list_sessions", {})

    with serve_http(http_app(server, "127.0.0.1"), free_port()) as url:
        result = asyncio.run(go(url))
    assert not result.is_error
    assert [s["session_id"] for s in result.structured_content["sessions"]] == ["s1"]


@pytest.mark.parametrize(
    "command",
    [["-m", "mcp_server"], ["-m", "librarian_dagster.cli.main", "mcp"]],
    ids=["python -m mcp_server", "librarian mcp"],
)
def test_stdio_transport_serves_the_same_tools(store, tmp_path, command):
    store.memories.replace_memory(memory_record("s1"), [])
    env = {
        **os.environ,
        "LIBRARIAN_HOME": str(tmp_path / "home"),
        "LIBRARIAN_DATABASE_URL": store.url,
    }
    params = StdioServerParameters(
        command=sys.executable, args=[*command, "--transport", "stdio"], env=env
    )

    async def go():
        async with Client(params) as client:
            tools = await client.list_tools()
            listed = await client.call_tool("list_sessions", {})
            return tools, listed

    tools, listed = asyncio.run(go())
    names = {t.name for t in tools.tools}
    assert names == {"search_chunks", "get_digest", "list_sessions", "file_history"}
    assert [s["session_id"] for s in listed.structured_content["sessions"]] == ["s1"]


def test_the_server_does_not_import_the_librarian_command():
    # A fresh interpreter: this test process has imported the CLI already.
    check = (
        "import sys, mcp_server.__main__; "
        "cli = [m for m in sys.modules if m.startswith('librarian_dagster.cli')]; "
        "sys.exit(' '.join(cli) or None)"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
