"""The recall server: `search_chunks`, `get_digest` and `list_sessions` over MCP.

Tools are plain functions: MCPServer runs a sync tool in a worker thread, which is what the
blocking psycopg calls need. They validate, call core and return its pydantic models as they
are. Errors are raised, never returned as strings, so an agent sees a tool error.

Beside /mcp, the HTTP app answers `POST /recall`: `search_chunks` as plain JSON in one round
trip, for the prompt hook, which has under a second and no MCP client (docs/decisions/0004).

Who may read what (mcp_server/auth.py, SECURITY.md): over HTTP with tokens configured, every
endpoint demands a bearer token, and only a token with the `private` scope sees the `private`
domain; a server on an address other than loopback refuses to start without tokens.

What the tools read (the store's search and memories, over its pool of connections) is opened
in the server's lifespan and closed when the server stops (`Served`).
"""

import logging
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal, TypeVar

import anyio
import uvicorn
from mcp.server.auth.provider import TokenVerifier
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from librarian_dagster.core.assembly.forgetting import Forgotten, forget_sessions
from librarian_dagster.core.assembly.providers import configured_embedder
from librarian_dagster.core.assembly.store import Store, migrated_url, open_store
from librarian_dagster.core.capture.readers import (
    AGENTS,
    READERS,
    check_agent,
    live_task,
    live_tool,
)
from librarian_dagster.core.capture.session import CHANGE, READ
from librarian_dagster.core.digest.schema import PRIVATE_DOMAIN, Domain
from librarian_dagster.core.models.embeddings import Embedder
from librarian_dagster.core.ops.tokens import TokenFileError
from librarian_dagster.core.ops.watch import Watch, database_watch
from librarian_dagster.core.recall.answer import (
    MAX_RESULTS,
    EmbeddingSpaceMismatch,
    recall,
)
from librarian_dagster.core.recall.history import (
    DEFAULT_SESSIONS,
    MAX_SESSIONS,
    BadFileQuestion,
    FileQuestion,
)
from librarian_dagster.core.recall.history import file_history as file_history_of
from librarian_dagster.core.recall.ranking import DEFAULT_BOOSTS, Boosts, RecallContext
from librarian_dagster.core.recall.relevance import DEFAULT_THRESHOLD
from librarian_dagster.core.recall.search import Search
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.files import Files
from librarian_dagster.core.store.memories import InvalidCursor, Memories
from librarian_dagster.core.store.pool import SEARCH_CONNECTIONS
from librarian_dagster.core.store.queries import SearchFilters
from librarian_dagster.core.store.rows import (
    FileHistory,
    SearchResult,
    SessionDigest,
    SessionList,
)
from mcp_server.auth import (
    LOOPBACK_HOSTS,
    REBOUND,
    auth_settings,
    authenticated,
    may_read_private,
    named_elsewhere,
    verifier_for,
)
from mcp_server.page import Reader, page_routes

INSTRUCTIONS = """\
Librarian remembers past coding-agent sessions (Claude Code, Codex, Gemini CLI, OpenCode, Copilot
CLI, Pi; each result names its `agent`). Before solving a problem, ask search_chunks
"have I dealt with this before?" in plain words (an error message, a component, a decision);
read the whole session with get_digest; browse recent work with list_sessions. Before changing
a file, file_history says which earlier sessions changed it, and why."""

Transport = Literal["http", "stdio"]

logger = logging.getLogger(__name__)

DomainFilter = Annotated[Domain | None, Field(description="Only sessions of this domain.")]
SinceFilter = Annotated[
    datetime | None, Field(description="Only sessions that ended at or after this ISO time.")
]


def _no_nul(value: str) -> str:
    # PostgreSQL text cannot hold NUL: said here, rather than as a database error at the end.
    if "\x00" in value:
        raise ValueError("must not contain NUL bytes")
    return value


Text = Annotated[str, AfterValidator(_no_nul)]
"""Every text parameter: a string PostgreSQL can take as it is (always as a bound parameter)."""

ProjectFilter = Annotated[
    Text | None,
    Field(max_length=200, description="Only this project (the last folder name of its cwd)."),
]
Tag = Annotated[Text, Field(max_length=200)]
AgentFilter = Annotated[
    Annotated[Text, AfterValidator(check_agent)] | None,
    Field(
        description=f"Only sessions of this coding agent: one of {', '.join(AGENTS)}.",
        json_schema_extra={"enum": [*AGENTS, None]},
    ),
]
# The longest next_cursor is a timestamp and a session id, base64'd: well under this.
_MAX_CURSOR = 1000
_MAX_SESSION_ID = 200
_MAX_PATH = 4096  # PATH_MAX on Linux
_MAX_TASK = 2000

# The tools' parameters: what an agent sees of each, and its bounds.
Query = Annotated[Text, Field(min_length=1, max_length=2000, description="What to recall.")]
AllTags = Annotated[
    list[Tag] | None, Field(max_length=50, description="Only sessions carrying all of these tags.")
]
AnyTags = Annotated[
    list[Tag] | None, Field(max_length=50, description="Only sessions carrying one of these tags.")
]
BranchFilter = Annotated[Text | None, Field(max_length=200, description="Only this git branch.")]
UntilFilter = Annotated[
    datetime | None, Field(description="Only sessions that began at or before this.")
]
ChunkLimit = Annotated[int, Field(ge=1, le=MAX_RESULTS, description="How many chunks.")]
Cwd = Annotated[
    Text | None,
    Field(
        max_length=_MAX_PATH,
        description="Your working directory: its project's sessions rank first (not a filter).",
    ),
]
CurrentBranch = Annotated[
    Text | None,
    Field(
        max_length=200,
        description="Your git branch: earlier work on it is preferred (not a filter; "
        "git_branch filters).",
    ),
]
SessionId = Annotated[
    Text,
    Field(min_length=1, max_length=_MAX_SESSION_ID, description="A session id from a result."),
]
FilePath = Annotated[
    Text,
    Field(
        min_length=1, max_length=_MAX_PATH, description="The file: absolute, or relative to cwd."
    ),
]
RepositoryCwd = Annotated[
    Text | None,
    Field(
        max_length=_MAX_PATH, description="Your working directory: which repository the file is of."
    ),
]
Task = Annotated[
    Text | None,
    Field(
        max_length=_MAX_TASK,
        description="What you are doing: the sessions nearest to it come after the most recent "
        "one.",
    ),
]
HistoryLimit = Annotated[int, Field(ge=1, le=MAX_SESSIONS, description="How many sessions.")]
Root = Annotated[
    Text | None, Field(max_length=_MAX_PATH, description="The repository's root, if you know it.")
]
OwnSession = Annotated[
    Text | None,
    Field(max_length=_MAX_SESSION_ID, description="Your own session's id: never returned."),
]
PageLimit = Annotated[int, Field(ge=1, le=100, description="Sessions per page.")]
Cursor = Annotated[
    Text | None, Field(max_length=_MAX_CURSOR, description="`next_cursor` of the previous page.")
]

PRIVATE_REFUSED = "the private domain needs a token with the `private` scope"


@dataclass(frozen=True)
class Served:
    """What the tools read: one store's search and memories, and the embedder of the questions."""

    search: Search
    memories: Memories
    files: Files
    embedder: Embedder

    @classmethod
    def of(cls, store: Store, embedder: Embedder) -> "Served":
        return cls(store.search, store.memories, store.files, embedder)


Opener = Callable[[], AbstractContextManager[Served]]
"""Opens what the tools read when the server starts; leaving its block closes it."""


class _Lifespan:
    """The server's lifespan: what the tools read, opened at start and closed at shutdown.

    Entered once by the HTTP app at start (the streamable HTTP manager), and again by each legacy
    SSE connection and each in-memory client: the first entry opens, the last one out closes.
    The tools read `served()` rather than their request's lifespan context, because `POST
    /recall` calls a tool outside any MCP request.
    """

    def __init__(self, source: "Served | Opener") -> None:
        # Given open, it is the caller's to close: the lifespan only hands it to the tools.
        self._served = source if isinstance(source, Served) else None
        self._opener = None if isinstance(source, Served) else source
        self._entered = 0
        self._opened = ExitStack()
        self._lock = threading.Lock()

    @asynccontextmanager
    async def __call__(self, _server: MCPServer) -> AsyncIterator[Served]:
        with self._lock:
            if self._opener is not None and self._entered == 0:
                self._served = self._opened.enter_context(self._opener())
            self._entered += 1
        try:
            yield self.served()
        finally:
            with self._lock:
                self._entered -= 1
                if self._opener is not None and self._entered == 0:
                    self._served = None
                    self._opened.close()

    def served(self) -> Served:
        if self._served is None:
            raise RuntimeError("the recall server is not started: its store is not open")
        return self._served


def build_server(
    source: Served | Opener,
    min_relevance: float = DEFAULT_THRESHOLD,
    boosts: Boosts = DEFAULT_BOOSTS,
    *,
    verifier: TokenVerifier | None = None,
    issuer_url: str = "http://127.0.0.1:3201",
    private_without_token: bool = False,
    forget: Callable[[Sequence[str]], Forgotten] | None = None,
    dagster_url: str | None = None,
) -> MCPServer:
    """The tools over what `source` is, or opens when the server starts (and closes when it
    stops), and the page for people at the HTTP app's root (mcp_server/page.py). With
    `verifier`, the HTTP apps demand a bearer token it accepts (`issuer_url`: where the tokens
    come from, this server). `private_without_token`: whether a request that carries no token
    (stdio, in-memory) sees the private domain. `forget`: how the page forgets sessions (None:
    it does not); `dagster_url`: the Dagster UI a session's page links to."""
    lifespan = _Lifespan(source)
    server = MCPServer(
        "librarian",
        instructions=INSTRUCTIONS,
        token_verifier=verifier,
        auth=auth_settings(issuer_url) if verifier is not None else None,
        lifespan=lifespan,
    )

    def private_allowed(domain: str | None) -> bool:
        allowed = may_read_private(private_without_token)
        if domain == PRIVATE_DOMAIN and not allowed:
            # Said, not an empty answer: the caller learns why, and nothing about the sessions.
            raise ToolError(PRIVATE_REFUSED)
        return allowed

    _add_search(server, lifespan, private_allowed, min_relevance, boosts)
    _add_readers(server, lifespan, private_allowed)
    reader = Reader(lifespan.served, min_relevance, boosts, verifier, forget, dagster_url)
    for route in page_routes(reader):
        # The SDK's own way to serve more than MCP: in both of its HTTP apps, behind its bearer
        # backend (the page reads the token it accepted), and required by the page itself.
        server.custom_route(route.path, sorted(route.methods or ()))(route.endpoint)
    return server


def _add_search(
    server: MCPServer,
    lifespan: _Lifespan,
    private_allowed: Callable[[str | None], bool],
    min_relevance: float,
    boosts: Boosts,
) -> None:
    @server.tool()
    def search_chunks(
        query: Query,
        project: ProjectFilter = None,
        agent: AgentFilter = None,
        domain: DomainFilter = None,
        tags: AllTags = None,
        any_tags: AnyTags = None,
        git_branch: BranchFilter = None,
        since: SinceFilter = None,
        until: UntilFilter = None,
        limit: ChunkLimit = 5,
        cwd: Cwd = None,
        current_branch: CurrentBranch = None,
    ) -> SearchResult:
        """Find remembered facts from past sessions that answer a question, best first.

        Each result's score is its session's relevance (0 to 1); when no session is relevant
        enough the results are empty and `note` says so: then nothing was remembered about it.
        """
        filters = SearchFilters(
            project=project,
            agent=agent,
            domain=domain,
            tags=tuple(tags or ()),
            any_tags=tuple(any_tags or ()),
            git_branch=git_branch,
            since=since,
            until=until,
            include_private=private_allowed(domain),
        )
        context = RecallContext(cwd, current_branch) if cwd or current_branch else None
        served = lifespan.served()
        try:
            return recall(
                served.search, served.embedder, query, filters, limit,
                min_relevance=min_relevance, boosts=boosts, context=context,
            )  # fmt: skip
        except EmbeddingSpaceMismatch as exc:
            raise ToolError(str(exc)) from None


def _add_readers(
    server: MCPServer, lifespan: _Lifespan, private_allowed: Callable[[str | None], bool]
) -> None:
    @server.tool()
    def get_digest(session_id: SessionId) -> SessionDigest:
        """The whole digest of one session: what, problem, solution, what is left open."""
        # A private session the caller may not read is answered like one that does not exist.
        memories = lifespan.served().memories
        memory = memories.get_memory(session_id, include_private=private_allowed(None))
        if memory is None:
            raise ToolError(f"no session {session_id!r} in memory")
        return memory

    @server.tool()
    def file_history(
        path: FilePath,
        cwd: RepositoryCwd = None,
        task: Task = None,
        limit: HistoryLimit = DEFAULT_SESSIONS,
        root: Root = None,
        session_id: OwnSession = None,
    ) -> FileHistory:
        """The earlier sessions of this repository that changed the file (or read it), and
        why: the most recent first, then those nearest the task. Each names its session,
        dates, branch, what it did, the digest lines that name the file and, where the
        repository is on the server's machine, whether the file changed since."""
        question = FileQuestion(
            path=path, cwd=cwd, root=root, task=task, session_id=session_id, limit=limit,
            include_private=private_allowed(None),
        )  # fmt: skip
        served = lifespan.served()
        try:
            return file_history_of(served.files, served.embedder, question)
        except BadFileQuestion as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    def list_sessions(
        project: ProjectFilter = None,
        agent: AgentFilter = None,
        domain: DomainFilter = None,
        since: SinceFilter = None,
        limit: PageLimit = 20,
        cursor: Cursor = None,
    ) -> SessionList:
        """Remembered sessions, newest first, a page at a time."""
        filters = SearchFilters(
            project=project, agent=agent, domain=domain, since=since,
            include_private=private_allowed(domain),
        )  # fmt: skip
        try:
            return lifespan.served().memories.list_sessions(filters, limit=limit, cursor=cursor)
        except InvalidCursor as exc:
            # Any other exception reaches the agent without its message: this one is theirs.
            raise ToolError(str(exc)) from None


RECALL_PATH = "/recall"
HISTORY_PATH = "/history"
TOUCHES_PATH = "/touches"
RECALL_MAX_LIMIT = 10
# A query is at most 2,000 characters (search_chunks' own limit): 16 KiB is ample JSON for one,
# and reading no more keeps a bad client from making us buffer a large body.
_RECALL_MAX_BODY = 16 * 1024


class RecallRequest(BaseModel):
    """The body of `POST /recall`. Strict: a typo'd field or a string limit is an error.

    `cwd` and `git_branch` say where the prompt comes from (context: that project's sessions
    first, earlier work on that branch preferred); the other fields filter, as in search_chunks.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    query: Text = Field(min_length=1, max_length=2000, description="What to recall.")
    limit: int = Field(default=3, ge=1, le=RECALL_MAX_LIMIT, description="How many chunks.")
    cwd: Text | None = Field(default=None, max_length=_MAX_PATH)
    git_branch: Text | None = Field(default=None, max_length=200)
    project: ProjectFilter = None
    agent: AgentFilter = None
    domain: DomainFilter = None
    tags: list[Tag] | None = Field(default=None, max_length=50)
    any_tags: list[Tag] | None = Field(default=None, max_length=50)
    since: datetime | None = None
    until: datetime | None = None


_RECALL_SHAPE = (
    '{"query": str, "limit": 1..10} and optionally "cwd", "git_branch", "project", "agent", '
    '"domain", "tags", "any_tags", "since", "until"'
)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class HistoryRequest(BaseModel):
    """The body of `POST /history`: file_history's parameters, as strict as `RecallRequest`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    path: Text = Field(min_length=1, max_length=_MAX_PATH)
    cwd: Text | None = Field(default=None, max_length=_MAX_PATH)
    root: Text | None = Field(default=None, max_length=_MAX_PATH)
    task: Text | None = Field(default=None, max_length=_MAX_TASK)
    session_id: Text | None = Field(default=None, max_length=_MAX_SESSION_ID)
    limit: int = Field(default=DEFAULT_SESSIONS, ge=1, le=MAX_SESSIONS)
    transcript_path: Text | None = Field(default=None, max_length=_MAX_PATH)
    """The asker's live transcript, for its task when none is given (a hook reads no
    transcript itself; the server's readers do, on this machine)."""
    subagent: Text | None = Field(default=None, max_length=_MAX_SESSION_ID)
    """The subagent asking, whose own task is then the task."""


_HISTORY_SHAPE = (
    '{"path": str} and optionally "cwd", "root", "task", "session_id", "limit", '
    '"transcript_path", "subagent"'
)

HOOKED = tuple(agent for agent, reader in READERS.items() if reader.live_tool is not None)
"""The agents whose hooks ask /touches what a tool call touches."""
MAX_TOUCHED = 20


class TouchesRequest(BaseModel):
    """The body of `POST /touches`: a tool call as an agent's hook shows it, before it runs."""

    model_config = ConfigDict(extra="forbid", strict=True)

    agent: Literal[HOOKED]  # type: ignore[valid-type]
    tool_name: Text = Field(min_length=1, max_length=200)
    tool_input: dict[str, object]
    cwd: Text | None = Field(default=None, max_length=_MAX_PATH)


_TOUCHES_SHAPE = '{"agent": str, "tool_name": str, "tool_input": {...}} and optionally "cwd"'


def _recall_arguments(asked: RecallRequest) -> dict[str, object]:
    # The tool's `git_branch` is a filter: the hook's branch is context, its `current_branch`.
    arguments = asked.model_dump(mode="json", exclude_none=True, exclude={"git_branch"})
    if asked.git_branch is not None:
        arguments["current_branch"] = asked.git_branch
    return arguments


Asked = TypeVar("Asked", bound=BaseModel)
Answer = Callable[[Asked], Awaitable[Response]]


def _hook_endpoint(host: str, auth_required: bool, name: str, request: type[Asked], shape: str,
                   answer: "Answer[Asked]"):  # fmt: skip
    """`POST` a JSON body of `request`'s shape -> `answer`'s response: one round trip, for a
    hook with no MCP client and a deadline (`/recall`, `/history`, `/touches`)."""
    loopback = host in LOOPBACK_HOSTS

    async def endpoint(http: Request) -> Response:
        # The same DNS-rebinding guard the SDK puts on /mcp when it serves loopback: a web page
        # must not read memories through a hostname that resolves to 127.0.0.1.
        if loopback and named_elsewhere(http.headers.get("host", "")):
            return _error(421, REBOUND)
        # The SDK's bearer backend has checked the token of every request to this app before it
        # gets here (the same verifier as /mcp); it does not refuse, so this endpoint does.
        if auth_required and not authenticated():
            return _error(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
        # JSON only: a browser cannot send it cross-origin without a preflight we never allow.
        if not http.headers.get("content-type", "").lower().startswith("application/json"):
            return _error(415, "send the body as Content-Type: application/json")
        body = bytearray()
        try:
            async for part in http.stream():
                body += part
                if len(body) > _RECALL_MAX_BODY:
                    return _error(413, f"the body must be at most {_RECALL_MAX_BODY} bytes")
        except ClientDisconnect:
            return Response(status_code=400)
        try:
            asked = request.model_validate_json(bytes(body))
        except ValidationError as exc:
            # Locations and reasons only: pydantic's own message repeats the input, a prompt.
            reasons = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            return _error(400, f"expected {shape}: {reasons}")
        return await answer(asked)

    return endpoint


def _through_tool(
    server: MCPServer, name: str, tool: str, arguments_of: Callable[[Asked], dict[str, object]]
) -> "Answer[Asked]":
    """The answer of the `tool` itself, as JSON, not a second call of core: the endpoint gives
    exactly the answer the tool gives (same threshold, same errors). `arguments_of` may read
    files, so it runs in a worker thread, as MCPServer runs the tool."""
    path = f"POST /{name}"

    async def answer(asked: Asked) -> Response:
        arguments = await anyio.to_thread.run_sync(arguments_of, asked)
        try:
            result = await server.call_tool(tool, arguments)
        except UnexpectedToolError as exc:
            # The database is down or broken: the cause goes to the server's log (psycopg's
            # messages name the server, never query parameters), not to the client.
            logger.error("%s: %s failed", path, tool, exc_info=exc.__cause__)
            return _error(503, f"{name} failed on the server")
        except ToolError as exc:  # a deliberate refusal from the tool, meant for the caller
            return _error(400, str(exc))
        if not isinstance(result, CallToolResult) or result.structured_content is None:
            return _error(503, f"{name} returned no structured result")
        return JSONResponse(result.structured_content)

    return answer


def _history_arguments(asked: HistoryRequest) -> dict[str, object]:
    """file_history's arguments; without a `task`, the one the live transcript gives (its
    reader's turns: the latest prompt, or the subagent's task)."""
    arguments = asked.model_dump(exclude_none=True, exclude={"transcript_path", "subagent"})
    if asked.task is None and asked.transcript_path is not None:
        task = live_task(Path(asked.transcript_path), asked.subagent)
        if task:
            arguments["task"] = task[:_MAX_TASK]
    return arguments


async def _touches(asked: "TouchesRequest") -> Response:
    use = live_tool(asked.agent, asked.tool_name, asked.tool_input, asked.cwd)
    if use is None:
        return _error(400, f"no hook of {asked.agent!r} is read: one of {', '.join(HOOKED)}")
    paths = list(use.file_paths) if use.action in (READ, CHANGE) else []
    return JSONResponse({"action": use.action, "paths": paths[:MAX_TOUCHED]})


def http_app(server: MCPServer, host: str) -> Starlette:
    """One ASGI app: streamable HTTP at /mcp, `POST /recall` for the prompt hook, `POST /history`
    for the PreToolUse hook and, for older
    clients, legacy SSE at /sse. A server built with a verifier demands a token on all three."""
    app = server.streamable_http_app(host=host)
    auth_required = server.settings.auth is not None
    recall = _through_tool(server, "recall", "search_chunks", _recall_arguments)
    recall_endpoint = _hook_endpoint(
        host, auth_required, "recall", RecallRequest, _RECALL_SHAPE, recall
    )
    app.add_route(RECALL_PATH, recall_endpoint, methods=["POST"])
    history = _through_tool(server, "history", "file_history", _history_arguments)
    history_endpoint = _hook_endpoint(
        host, auth_required, "history", HistoryRequest, _HISTORY_SHAPE, history
    )
    app.add_route(HISTORY_PATH, history_endpoint, methods=["POST"])
    touches_endpoint = _hook_endpoint(
        host, auth_required, "touches", TouchesRequest, _TOUCHES_SHAPE, _touches
    )
    app.add_route(TOUCHES_PATH, touches_endpoint, methods=["POST"])
    # Mounted last, so /mcp and /recall match first; the SSE app serves /sse and /messages/.
    app.mount("/", server.sse_app(host=host))
    return app


# How long a stop waits for the warm-up's first embedding (the model's load) to finish.
ENCODER_WARM_UP_WAIT_S = 30.0


@dataclass(frozen=True)
class _WarmUp:
    """The warm-up's progress, for whoever stops the server: started, and past the encoder."""

    started: threading.Event
    encoded: threading.Event

    def wait(self) -> None:
        """A process that exits while a thread is inside the encoder's native code is aborted by
        its runtime ("terminate called without an active exception", exit -6, seen when a stop
        came during the model's load): let that step end first. The postings' load after it is
        Python's own and may be left to the exit. Waited for by the lifespan's end and again
        after the server returns: a legacy SSE stream cut at shutdown can keep the lifespan
        from ending."""
        if self.started.is_set():
            self.encoded.wait(ENCODER_WARM_UP_WAIT_S)


def _warm_up(served: Served, progress: _WarmUp) -> None:
    try:
        try:
            served.embedder.embed_query("warm up")
        finally:
            progress.encoded.set()
        served.search.warm_up()
    except Exception:  # the first real question will meet the same error, and report it
        logger.warning("could not warm up the recall server", exc_info=True)


@contextmanager
def _open(
    url: str, postings_dir: Path, embedder: Embedder, warm: _WarmUp | None
) -> Iterator[Served]:
    """The store at `url`, open for as long as the server runs, with connections kept for a
    search at once (`SEARCH_CONNECTIONS`) and its BM25 postings kept in `postings_dir`; with
    `warm`, the model and the postings loaded in the background as it starts."""
    with Store(url, min_connections=SEARCH_CONNECTIONS, postings_dir=postings_dir) as store:
        served = Served.of(store, embedder)
        if warm is not None and not warm.started.is_set():
            # Both load in the background while the server starts: the first question need not
            # wait.
            warm.started.set()
            threading.Thread(target=_warm_up, args=(served, warm), daemon=True).start()
        try:
            yield served
        finally:
            if warm is not None:
                warm.wait()


def serve(
    settings: Settings,
    transport: Transport = "http",
    host: str | None = None,
    port: int | None = None,
    watch_database: bool = True,
) -> None:
    """Serve the memory the settings point at until stopped; host/port default to the settings.

    Raises SystemExit with one line when HTTP would serve an address other than loopback with
    no token configured, or the token file is unreadable: before the store is opened. A store
    that cannot serve, or an embedder that cannot be made, fails before the server starts too;
    the store's connections are opened as it starts and closed as it stops.
    """
    host = host or settings.mcp_host
    port = port or settings.mcp_port
    verifier = _http_verifier(settings, host) if transport == "http" else None
    url, embedder = migrated_url(settings), configured_embedder(settings)
    warm = _WarmUp(threading.Event(), threading.Event()) if transport == "http" else None
    server = build_server(
        lambda: _open(url, settings.postings_dir, embedder, warm),
        settings.recall_threshold,
        Boosts.of(settings),
        verifier=verifier,
        issuer_url=f"http://{_url_host(host)}:{port}",
        # Over stdio the user's own process started it: local and trusted. No token travels over
        # a pipe, so the private domain is returned only if LIBRARIAN_STDIO_PRIVATE says so.
        private_without_token=transport == "stdio" and settings.stdio_private,
        forget=_forgetting(settings),
        dagster_url=settings.ui_url,
    )
    if transport == "stdio":
        server.run("stdio")
        return
    _say_served(settings, host, port, verifier)
    app = http_app(server, host)
    # Served alone, the server watches its database as `librarian up` does (which watches it
    # for its children, and so starts this one with `watch_database=False`).
    watch = database_watch(settings, url) if watch_database else None
    stopping = threading.Event()
    if watch is not None:
        threading.Thread(target=_watch, args=(watch, stopping), daemon=True).start()
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        # uvicorn raises the signal that stopped it again as it returns: a Ctrl-C comes out of
        # `run` as KeyboardInterrupt, and the warm-up must still be waited for on the way out.
        stopping.set()
        if warm is not None:
            warm.wait()
    if watch is not None and watch.lost:
        raise SystemExit(f"librarian mcp: {watch.lost}")


def _forgetting(settings: Settings) -> "Callable[[Sequence[str]], Forgotten]":
    """The page's forget: the store's part at once, Dagster's records at the mirror sensor's
    next tick (core/assembly/forgetting.py); the server imports no Dagster."""

    def forget(session_ids: Sequence[str]) -> Forgotten:
        with open_store(settings) as store:
            return forget_sessions(session_ids, settings, store, history=None)

    return forget


def _http_verifier(settings: Settings, host: str) -> TokenVerifier | None:
    """The tokens HTTP demands (None: none configured); SystemExit with one line when the
    token file cannot be read, or when `host` is not loopback and no token is configured."""
    try:
        verifier = verifier_for(settings)
    except TokenFileError as exc:
        raise SystemExit(f"librarian mcp: {exc}") from None
    if verifier is None and host not in LOOPBACK_HOSTS:
        raise SystemExit(
            f"librarian mcp: refusing to serve {host} without tokens: anyone who can reach "
            "it could read the memory; make one with `librarian token add NAME` "
            "(or set LIBRARIAN_MCP_TOKEN), or serve 127.0.0.1"
        )
    return verifier


def _say_served(settings: Settings, host: str, port: int, verifier: TokenVerifier | None) -> None:
    print(
        f"MCP server on http://{_url_host(host)}:{port}/mcp (legacy SSE at /sse; the page for "
        "people at /)",
        file=sys.stderr,
    )
    if verifier is None:
        print(
            "no tokens configured: open to every process on this machine (loopback only); "
            "the private domain is not served",
            file=sys.stderr,
        )
    else:
        print(f"bearer tokens required ({settings.tokens_file})", file=sys.stderr)


def _watch(watch: Watch, stopping: threading.Event) -> None:
    """Watch the database; when it is lost, stop the server as a user's stop would (uvicorn
    ends its connections), and `serve` exits saying why."""
    watch.run(stopping)
    if watch.lost:
        os.kill(os.getpid(), signal.SIGTERM)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
