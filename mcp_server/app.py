"""The recall server: `search_chunks`, `get_digest` and `list_sessions` over MCP.

Tools are thin: they validate, call the store in a worker thread (psycopg is blocking) and shape
pydantic results. Errors are raised, never returned as strings, so an agent sees a tool error.
"""

import base64
import binascii
from datetime import datetime
from typing import Annotated

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from librarian_dagster.core.digest import DOMAINS
from librarian_dagster.core.embeddings import Embedder
from librarian_dagster.core.store import SearchFilters, Store
from mcp_server.models import (
    ChunkResult,
    SearchResult,
    SessionDigest,
    SessionInfo,
    SessionList,
)

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
        limit: Annotated[int, Field(ge=1, le=50, description="How many chunks.")] = 5,
    ) -> SearchResult:
        """Find remembered facts from past sessions that answer a question, best first."""
        _check_domain(domain)
        filters = SearchFilters(project=project, domain=domain, tags=tuple(tags or ()), since=since)

        def run():
            vector = embedder.embed_query(query)
            return store.search(query, vector, embedder.model_name, filters, limit=limit)

        hits = await anyio.to_thread.run_sync(run)
        return SearchResult(
            query=query,
            results=[ChunkResult.model_validate(h, from_attributes=True) for h in hits],
        )

    @server.tool()
    async def get_digest(
        session_id: Annotated[str, Field(min_length=1, description="A session id from a result.")],
    ) -> SessionDigest:
        """The whole digest of one session: what, problem, solution, what is left open."""
        row = await anyio.to_thread.run_sync(store.get_memory, session_id)
        if row is None:
            raise ToolError(f"no session {session_id!r} in memory")
        # The digest's four bullet lists are its sections; the rendered Markdown is its text.
        return SessionDigest.model_validate(
            {**row, "sections": row["digest"], "text": row["digest_text"]}
        )

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
        after = decode_cursor(cursor) if cursor else None
        rows = await anyio.to_thread.run_sync(
            lambda: store.list_sessions(filters, limit=limit + 1, after=after)
        )
        page, more = rows[:limit], len(rows) > limit
        return SessionList(
            sessions=[SessionInfo.model_validate(r) for r in page],
            next_cursor=encode_cursor(page[-1]["sort_date"], page[-1]["session_id"])
            if more
            else None,
        )

    return server


def _check_domain(domain: str | None) -> None:
    if domain is not None and domain not in DOMAINS:
        raise ToolError(f"unknown domain {domain!r}; use one of: {', '.join(DOMAINS)}")


def encode_cursor(date: datetime, session_id: str) -> str:
    return base64.urlsafe_b64encode(f"{date.isoformat()}|{session_id}".encode()).decode()


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        date, session_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        return datetime.fromisoformat(date), session_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ToolError("invalid cursor: pass the next_cursor of a previous page") from None


def http_app(server: MCPServer, host: str):
    """One ASGI app: streamable HTTP at /mcp and, for older clients, legacy SSE at /sse."""
    app = server.streamable_http_app(host=host)
    app.router.routes.extend(server.sse_app(host=host).routes)
    return app
