"""The recall server: `search_chunks`, `get_digest` and `list_sessions` over MCP.

Tools are plain functions: MCPServer runs a sync tool in a worker thread, which is what the
blocking psycopg calls need. They validate, call core and return its pydantic models as they
are. Errors are raised, never returned as strings, so an agent sees a tool error.
"""

import sys
from datetime import datetime
from typing import Annotated, Literal

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field
from starlette.applications import Starlette

from librarian_dagster.core.digest import Domain
from librarian_dagster.core.embeddings import Embedder, local_embedder
from librarian_dagster.core.models import SearchResult, SessionDigest, SessionList
from librarian_dagster.core.recall import MAX_RESULTS, boosts_for, recall
from librarian_dagster.core.relevance import DEFAULT_THRESHOLD
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store import (
    DEFAULT_BOOSTS,
    Boosts,
    InvalidCursor,
    SearchFilters,
    Store,
    open_store,
)

INSTRUCTIONS = """\
Librarian remembers past Claude Code sessions. Before solving a problem, ask search_chunks
"have I dealt with this before?" in plain words (an error message, a component, a decision);
read the whole session with get_digest; browse recent work with list_sessions."""

Transport = Literal["http", "stdio"]

DomainFilter = Annotated[Domain | None, Field(description="Only sessions of this domain.")]
SinceFilter = Annotated[
    datetime | None, Field(description="Only sessions that ended at or after this ISO time.")
]
ProjectFilter = Annotated[
    str | None, Field(description="Only this project (the last folder name of its cwd).")
]


def build_server(
    store: Store,
    embedder: Embedder,
    min_relevance: float = DEFAULT_THRESHOLD,
    boosts: Boosts = DEFAULT_BOOSTS,
) -> MCPServer:
    server = MCPServer("librarian", instructions=INSTRUCTIONS)

    @server.tool()
    def search_chunks(
        query: Annotated[str, Field(min_length=1, max_length=2000, description="What to recall.")],
        project: ProjectFilter = None,
        domain: DomainFilter = None,
        tags: Annotated[
            list[str] | None, Field(description="Only sessions carrying all of these tags.")
        ] = None,
        any_tags: Annotated[
            list[str] | None, Field(description="Only sessions carrying one of these tags.")
        ] = None,
        git_branch: Annotated[str | None, Field(description="Only this git branch.")] = None,
        since: SinceFilter = None,
        until: Annotated[
            datetime | None, Field(description="Only sessions that began at or before this.")
        ] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_RESULTS, description="How many chunks.")] = 5,
    ) -> SearchResult:
        """Find remembered facts from past sessions that answer a question, best first.

        Each result's score is its session's relevance (0 to 1); when no session is relevant
        enough the results are empty and `note` says so: then nothing was remembered about it.
        """
        filters = SearchFilters(
            project=project,
            domain=domain,
            tags=tuple(tags or ()),
            any_tags=tuple(any_tags or ()),
            git_branch=git_branch,
            since=since,
            until=until,
        )
        return recall(
            store, embedder, query, filters, limit, min_relevance=min_relevance, boosts=boosts
        )

    @server.tool()
    def get_digest(
        session_id: Annotated[str, Field(min_length=1, description="A session id from a result.")],
    ) -> SessionDigest:
        """The whole digest of one session: what, problem, solution, what is left open."""
        memory = store.get_memory(session_id)
        if memory is None:
            raise ToolError(f"no session {session_id!r} in memory")
        return memory

    @server.tool()
    def list_sessions(
        project: ProjectFilter = None,
        domain: DomainFilter = None,
        since: SinceFilter = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Sessions per page.")] = 20,
        cursor: Annotated[
            str | None, Field(description="`next_cursor` of the previous page.")
        ] = None,
    ) -> SessionList:
        """Remembered sessions, newest first, a page at a time."""
        filters = SearchFilters(project=project, domain=domain, since=since)
        try:
            return store.list_sessions(filters, limit=limit, cursor=cursor)
        except InvalidCursor as exc:
            # Any other exception reaches the agent without its message: this one is theirs.
            raise ToolError(str(exc)) from None

    return server


def http_app(server: MCPServer, host: str) -> Starlette:
    """One ASGI app: streamable HTTP at /mcp and, for older clients, legacy SSE at /sse."""
    app = server.streamable_http_app(host=host)
    # Mounted last, so /mcp matches first; the SSE app serves /sse and /messages/ itself.
    app.mount("/", server.sse_app(host=host))
    return app


def serve(
    settings: Settings,
    transport: Transport = "http",
    host: str | None = None,
    port: int | None = None,
) -> None:
    """Serve the memory the settings point at until stopped; host/port default to the settings."""
    server = build_server(
        open_store(settings), local_embedder(), settings.recall_threshold, boosts_for(settings)
    )
    if transport == "stdio":
        server.run("stdio")
        return
    host = host or settings.mcp_host
    port = port or settings.mcp_port
    print(f"MCP server on http://{host}:{port}/mcp (legacy SSE at /sse)", file=sys.stderr)
    uvicorn.run(http_app(server, host), host=host, port=port, log_level="warning")
