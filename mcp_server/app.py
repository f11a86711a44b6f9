"""The recall server: `search_chunks`, `get_digest` and `list_sessions` over MCP.

Tools are plain functions: MCPServer runs a sync tool in a worker thread, which is what the
blocking psycopg calls need. They validate, call core and return its pydantic models as they
are. Errors are raised, never returned as strings, so an agent sees a tool error.

Beside /mcp, the HTTP app answers `POST /recall`: `search_chunks` as plain JSON in one round
trip, for the prompt hook, which has under a second and no MCP client (docs/decisions/0004).
"""

import hmac
import logging
import sys
from datetime import datetime
from typing import Annotated, Literal

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from librarian_dagster.core.digest import Domain
from librarian_dagster.core.embeddings import Embedder
from librarian_dagster.core.models import SearchResult, SessionDigest, SessionList
from librarian_dagster.core.providers import configured_embedder
from librarian_dagster.core.recall import (
    MAX_RESULTS,
    EmbeddingSpaceMismatch,
    boosts_for,
    recall,
)
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

logger = logging.getLogger(__name__)

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
        try:
            return recall(
                store, embedder, query, filters, limit, min_relevance=min_relevance, boosts=boosts
            )
        except EmbeddingSpaceMismatch as exc:
            raise ToolError(str(exc)) from None

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


RECALL_PATH = "/recall"
RECALL_MAX_LIMIT = 10
# A query is at most 2,000 characters (search_chunks' own limit): 16 KiB is ample JSON for one,
# and reading no more keeps a bad client from making us buffer a large body.
_RECALL_MAX_BODY = 16 * 1024
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class RecallRequest(BaseModel):
    """The body of `POST /recall`. Strict: a typo'd field or a string limit is an error."""

    model_config = ConfigDict(extra="forbid", strict=True)

    query: str = Field(min_length=1, max_length=2000, description="What to recall.")
    limit: int = Field(default=3, ge=1, le=RECALL_MAX_LIMIT, description="How many chunks.")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _host_name(header: str) -> str:
    """`127.0.0.1:3201` -> `127.0.0.1`, `[::1]:3201` -> `::1`."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0]


def _bearer_ok(request: Request, token: str) -> bool:
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    # compare_digest: the time taken does not tell how much of a guess was right.
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode("utf-8"), token.encode("utf-8")
    )


def _recall_endpoint(server: MCPServer, host: str, token: str | None):
    """`POST /recall {"query": str, "limit": 1..10}` -> search_chunks' `SearchResult` as JSON."""
    loopback = host in _LOOPBACK_HOSTS

    async def recall_endpoint(request: Request) -> Response:
        # The same DNS-rebinding guard the SDK puts on /mcp when it serves loopback: a web page
        # must not read memories through a hostname that resolves to 127.0.0.1.
        if loopback and _host_name(request.headers.get("host", "")) not in _LOOPBACK_HOSTS:
            return _error(421, "this server answers requests to localhost only")
        # Minimal on purpose: one shared secret from LIBRARIAN_MCP_TOKEN. Token files and scopes
        # come with the server's auth (a later issue); until then /mcp itself stays open.
        if token is not None and not _bearer_ok(request, token):
            return _error(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        # JSON only: a browser cannot send it cross-origin without a preflight we never allow.
        if not request.headers.get("content-type", "").lower().startswith("application/json"):
            return _error(415, "send the body as Content-Type: application/json")
        body = bytearray()
        try:
            async for part in request.stream():
                body += part
                if len(body) > _RECALL_MAX_BODY:
                    return _error(413, f"the body must be at most {_RECALL_MAX_BODY} bytes")
        except ClientDisconnect:
            return Response(status_code=400)
        try:
            asked = RecallRequest.model_validate_json(bytes(body))
        except ValidationError as exc:
            # Locations and reasons only: pydantic's own message repeats the input, a prompt.
            reasons = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            return _error(400, f'expected {{"query": str, "limit": 1..10}}: {reasons}')
        # Through the tool itself, not a second call of core.recall: the endpoint gives exactly
        # the answer search_chunks gives (same relevance threshold, same errors), and MCPServer
        # runs the blocking search in a worker thread.
        try:
            result = await server.call_tool(
                "search_chunks", {"query": asked.query, "limit": asked.limit}
            )
        except UnexpectedToolError as exc:
            # The database is down or broken: the cause goes to the server's log (psycopg's
            # messages name the server, never query parameters), not to the client.
            logger.error("POST %s: search_chunks failed", RECALL_PATH, exc_info=exc.__cause__)
            return _error(503, "recall failed on the server")
        except ToolError as exc:  # a deliberate refusal from the tool, meant for the caller
            return _error(400, str(exc))
        if not isinstance(result, CallToolResult) or result.structured_content is None:
            return _error(503, "recall returned no structured result")
        return JSONResponse(result.structured_content)  # SearchResult, as search_chunks gives it

    return recall_endpoint


def http_app(server: MCPServer, host: str, *, token: str | None = None) -> Starlette:
    """One ASGI app: streamable HTTP at /mcp, `POST /recall` for the prompt hook and, for older
    clients, legacy SSE at /sse. With `token`, /recall demands it as a bearer token."""
    app = server.streamable_http_app(host=host)
    app.add_route(RECALL_PATH, _recall_endpoint(server, host, token), methods=["POST"])
    # Mounted last, so /mcp and /recall match first; the SSE app serves /sse and /messages/.
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
        open_store(settings),
        configured_embedder(settings),
        settings.recall_threshold,
        boosts_for(settings),
    )
    if transport == "stdio":
        server.run("stdio")
        return
    host = host or settings.mcp_host
    port = port or settings.mcp_port
    print(f"MCP server on http://{host}:{port}/mcp (legacy SSE at /sse)", file=sys.stderr)
    app = http_app(server, host, token=settings.mcp_token)
    uvicorn.run(app, host=host, port=port, log_level="warning")
