"""The recall server: `search_chunks`, `get_digest` and `list_sessions` over MCP.

Tools are thin: they validate, call the store in a worker thread (psycopg is blocking) and shape
pydantic results. Errors are raised, never returned as strings, so an agent sees a tool error.
"""

from datetime import datetime
from typing import Annotated

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from librarian_dagster.core.digest import DOMAINS
from librarian_dagster.core.embeddings import Embedder
from librarian_dagster.core.models import SearchResult, SessionDigest, SessionList
from librarian_dagster.core.recall import MAX_RESULTS, recall
from librarian_dagster.core.store import InvalidCursor, SearchFilters, Store

INSTRUCTIONS = """\
Librarian remembers past Claude Code sessions. Before solving a problem, ask search_chunks
"have I dealt with this before?" in plain words (an error message, a component, a decision);
read the whole session with get_digest; browse recent work with list_sessions."""

DomainFilter = Annotated[
    str | None, Field(description="Only this domain: " + ", ".join(DOMAINS) + ".")
]
SinceFilter = Annotated[
    datetime | None, Field(description="Only sessions that ended at or after this ISO time.")
]
ProjectFilter = Annotated[
    str | None, Field(description="Only this project (the last folder name of its cwd).")
]


def build_server(store: Store, embedder: Embedder) -> MCPServer:
    server = MCPServer("librarian", instructions=INSTRUCTIONS)

    @server.tool()
    async def search_chunks(
        query: Annotated[str, Field(min_length=1, max_length=2000, description="What to recall.")],
        project: ProjectFilter = None,
        domain: DomainFilter = None,
        tags: Annotated[
            list[str] | None, Field(description="Only sessions carrying all of these tags.")
        ] = None,
        since: SinceFilter = None,
        limit: Annotated[int, Field(ge=1, le=MAX_RESULTS, description="How many chunks.")] = 5,
    ) -> SearchResult:
        """Find remembered facts from past sessions that answer a question, best first."""
        _check_domain(domain)
        filters = SearchFilters(project=project, domain=domain, tags=tuple(tags or ()), since=since)
        return await anyio.to_thread.run_sync(
            lambda: recall(store, embedder, query, filters, limit)
        )

    @server.tool()
    async def get_digest(
        session_id: Annotated[str, Field(min_length=1, description="A session id from a result.")],
    ) -> SessionDigest:
        """The whole digest of one session: what, problem, solution, what is left open."""
        memory = await anyio.to_thread.run_sync(store.get_memory, session_id)
        if memory is None:
            raise ToolError(f"no session {session_id!r} in memory")
        return memory

    @server.tool()
    async def list_sessions(
        project: ProjectFilter = None,
        domain: DomainFilter = None,
        since: SinceFilter = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Sessions per page.")] = 20,
        cursor: Annotated[
            str | None, Field(description="`next_cursor` of the previous page.")
        ] = None,
    ) -> SessionList:
        """Remembered sessions, newest first, a page at a time."""
        _check_domain(domain)
        filters = SearchFilters(project=project, domain=domain, since=since)
        try:
            return await anyio.to_thread.run_sync(
                lambda: store.list_sessions(filters, limit=limit, cursor=cursor)
            )
        except InvalidCursor as exc:
            # Any other exception reaches the agent without its message: this one is theirs.
            raise ToolError(str(exc)) from None

    return server


def _check_domain(domain: str | None) -> None:
    if domain is not None and domain not in DOMAINS:
        raise ToolError(f"unknown domain {domain!r}; use one of: {', '.join(DOMAINS)}")


def http_app(server: MCPServer, host: str):
    """One ASGI app: streamable HTTP at /mcp and, for older clients, legacy SSE at /sse."""
    app = server.streamable_http_app(host=host)
    app.router.routes.extend(server.sse_app(host=host).routes)
    return app
