"""The hooks' REST adapter: `POST /recall`, `/history` and `/touches`, one round trip each, for a
hook with no MCP client and a deadline of under a second (docs/decisions/0004).

`/recall` and `/history` answer what their MCP tool answers (`_through_tool`: the same
threshold, the same refusals), which `librarian search` and `librarian history` print, and beside
it the text an agent reads, finished (core/recall/hook_text.py) within the budget the caller
sends: `"context"` (null for nothing) and how many `"sessions"` it names. Every agent's hooks and
plugins only print it. The asker is the token's person (a teammate's session names whose it is).
A hook sends what the user typed as `prompt`, not `query`: one that says too little (a slash
command, under four words) is not looked up.

Guarded by middleware on each route: Starlette's body limit, the loopback guard (`LoopbackOnly`,
the rule the SDK applies to /mcp on loopback) and, with tokens, the SDK's
`RequireAuthMiddleware`. Left here: JSON only (a browser cannot send it cross-origin
without a preflight we never allow), and pydantic's validation, said by location and reason only
(its own message repeats the input, a prompt). The middleware answers in its own words: the
SDK's JSON for a 401, plain text for a 413 or a 421; the endpoints' own refusals are
`{"error": ...}`. A hook reads the status alone.
"""

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Literal, TypeVar

import anyio
from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from librarian_dagster.core.capture.readers import READERS, live_task, live_tool
from librarian_dagster.core.capture.session import CHANGE, READ
from librarian_dagster.core.recall.history import DEFAULT_SESSIONS, MAX_SESSIONS
from librarian_dagster.core.recall.hook_text import (
    HISTORY_BUDGET,
    RECALL_BUDGET,
    budget_of,
    history_text,
    recall_text,
    skip_reason,
    typed,
)
from librarian_dagster.core.store.rows import FileHistory, SearchResult
from mcp_server.auth import LOOPBACK_HOSTS, LoopbackOnly, caller_person
from mcp_server.parameters import (
    MAX_PATH,
    MAX_SESSION_ID,
    MAX_TASK,
    AgentFilter,
    DomainFilter,
    PersonFilter,
    ProjectFilter,
    Tag,
    Text,
)

logger = logging.getLogger(__name__)

RECALL_PATH = "/recall"
HISTORY_PATH = "/history"
TOUCHES_PATH = "/touches"
RECALL_MAX_LIMIT = 10
MAX_PROMPT = 8000
"""A prompt as a hook sends it: what the user typed may follow an agent's own context
(hook_text.typed), and is looked up by its first 2,000 characters."""
# A prompt's 8,000 characters, each \uXXXX in the worst case, or a history question's few paths:
# 64 KiB is ample JSON for either, and reading no more keeps a bad client from making us buffer a
# large body.
_MAX_BODY = 64 * 1024


class RecallRequest(BaseModel):
    """The body of `POST /recall`. Strict: a typo'd field or a string limit is an error.

    `cwd` and `git_branch` say where the prompt comes from (context: that project's sessions
    first, earlier work on that branch preferred); the other fields filter, as in search_chunks.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    query: Text | None = Field(default=None, min_length=1, max_length=2000)
    """What to recall."""
    prompt: Text | None = Field(default=None, min_length=1, max_length=MAX_PROMPT)
    """What a user typed to an agent, in place of `query`: not looked up when it says too
    little."""
    limit: int = Field(default=3, ge=1, le=RECALL_MAX_LIMIT, description="How many chunks.")
    cwd: Text | None = Field(default=None, max_length=MAX_PATH)
    git_branch: Text | None = Field(default=None, max_length=200)
    project: ProjectFilter = None
    agent: AgentFilter = None
    person: PersonFilter = None
    domain: DomainFilter = None
    tags: list[Tag] | None = Field(default=None, max_length=50)
    any_tags: list[Tag] | None = Field(default=None, max_length=50)
    since: datetime | None = None
    until: datetime | None = None
    budget: int | None = Field(default=None, description="Characters of context, at most.")
    deadline_ms: int | None = Field(default=None, ge=1, le=60_000)
    """How long the caller waits for the answer: git's check of the sessions' files stops in
    time for it."""

    @model_validator(mode="after")
    def _one_question(self) -> "RecallRequest":
        if (self.query is None) == (self.prompt is None):
            raise ValueError("one of query and prompt")
        return self

    @property
    def asked(self) -> str:
        return self.query or typed(self.prompt or "")


_RECALL_SHAPE = (
    '{"query": str, "limit": 1..10} (or "prompt" in place of "query") and optionally "cwd", '
    '"git_branch", "project", "agent", "person", "domain", "tags", "any_tags", "since", "until", '
    '"budget", "deadline_ms"'
)
STALE_DEFAULT_S = 0.3
"""git's share of an answer whose caller says no deadline."""
STALE_MARGIN_S = 0.1
"""Of the caller's deadline, what is left for the way back."""


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class HistoryRequest(BaseModel):
    """The body of `POST /history`: file_history's parameters, as strict as `RecallRequest`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    path: Text = Field(min_length=1, max_length=MAX_PATH)
    cwd: Text | None = Field(default=None, max_length=MAX_PATH)
    root: Text | None = Field(default=None, max_length=MAX_PATH)
    task: Text | None = Field(default=None, max_length=MAX_TASK)
    session_id: Text | None = Field(default=None, max_length=MAX_SESSION_ID)
    limit: int = Field(default=DEFAULT_SESSIONS, ge=1, le=MAX_SESSIONS)
    transcript_path: Text | None = Field(default=None, max_length=MAX_PATH)
    """The asker's live transcript, for its task when none is given (a hook reads no
    transcript itself; the server's readers do, on this machine)."""
    subagent: Text | None = Field(default=None, max_length=MAX_SESSION_ID)
    """The subagent asking, whose own task is then the task."""
    remote: Text | None = Field(default=None, max_length=400)
    """The remote of the asker's repository, as its git config says (without user or password):
    a teammate's checkout of it, in a folder named otherwise, is the same repository."""
    budget: int | None = Field(default=None, description="Characters of context, at most.")


_HISTORY_SHAPE = (
    '{"path": str} and optionally "cwd", "root", "task", "session_id", "limit", '
    '"transcript_path", "subagent", "remote", "budget"'
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
    cwd: Text | None = Field(default=None, max_length=MAX_PATH)


_TOUCHES_SHAPE = '{"agent": str, "tool_name": str, "tool_input": {...}} and optionally "cwd"'


def _recall_arguments(asked: RecallRequest) -> dict[str, object]:
    # The tool's `git_branch` is a filter: the hook's branch is context, its `current_branch`.
    arguments = asked.model_dump(
        mode="json",
        exclude_none=True,
        exclude={"prompt", "git_branch", "budget", "deadline_ms"},
    )
    arguments["query"] = asked.asked
    if asked.git_branch is not None:
        arguments["current_branch"] = asked.git_branch
    return arguments


Asked = TypeVar("Asked", bound=BaseModel)
Answer = Callable[[Asked], Awaitable[Response]]
Facts = TypeVar("Facts", bound=BaseModel)


async def _through_tool(
    server: MCPServer, name: str, tool: str, arguments: dict[str, object], facts: type[Facts]
) -> Facts | Response:
    """The answer of the `tool` itself, not a second call of core: the endpoint says exactly
    what the tool says (same threshold, same errors); a refusal as the Response to send."""
    try:
        result = await server.call_tool(tool, arguments)
    except UnexpectedToolError as exc:
        # The database is down or broken: the cause goes to the server's log (psycopg's
        # messages name the server, never query parameters), not to the client.
        logger.error("POST /%s: %s failed", name, tool, exc_info=exc.__cause__)
        return _error(503, f"{name} failed on the server")
    except ToolError as exc:  # a deliberate refusal from the tool, meant for the caller
        return _error(400, str(exc))
    if not isinstance(result, CallToolResult) or result.structured_content is None:
        return _error(503, f"{name} returned no structured result")
    return facts.model_validate(result.structured_content)


def _told(facts: BaseModel, text: str | None, sessions: int) -> JSONResponse:
    """The tool's answer, and the text for an agent beside it."""
    return JSONResponse({**facts.model_dump(mode="json"), "context": text, "sessions": sessions})


def _recall(server: MCPServer, own_person: str) -> "Answer[RecallRequest]":
    async def answer(asked: RecallRequest) -> Response:
        started = time.perf_counter()
        skipped = skip_reason(asked.asked) if asked.prompt is not None else None
        if skipped:
            # Not looked up: no result could reach any relevance.
            nothing = SearchResult(query=asked.asked, results=[], min_relevance=1.0, note=skipped)
            return _told(nothing, None, 0)
        facts = await _through_tool(
            server, "recall", "search_chunks", _recall_arguments(asked), SearchResult
        )
        if isinstance(facts, Response):
            return facts
        wait = STALE_DEFAULT_S
        if asked.deadline_ms is not None:
            wait = asked.deadline_ms / 1000.0 - STALE_MARGIN_S
        budget, asker = budget_of(asked.budget, RECALL_BUDGET), caller_person(own_person)
        text, named = await anyio.to_thread.run_sync(  # git runs: not on the event loop
            lambda: recall_text(facts.results, budget, asker, asked.cwd, started + wait)
        )
        return _told(facts, text, named)

    return answer


def _history(server: MCPServer, own_person: str) -> "Answer[HistoryRequest]":
    async def answer(asked: HistoryRequest) -> Response:
        # The live transcript is read for the task: a worker thread, as the tools run.
        arguments = await anyio.to_thread.run_sync(_history_arguments, asked)
        facts = await _through_tool(server, "history", "file_history", arguments, FileHistory)
        if isinstance(facts, Response):
            return facts
        budget = budget_of(asked.budget, HISTORY_BUDGET)
        shown = Path(asked.path).name
        text, named = history_text(facts, shown, budget, caller_person(own_person))
        return _told(facts, text, named)

    return answer


def _history_arguments(asked: HistoryRequest) -> dict[str, object]:
    """file_history's arguments; without a `task`, the one the live transcript gives (its
    reader's turns: the latest prompt, or the subagent's task)."""
    arguments = asked.model_dump(exclude_none=True, exclude={"transcript_path", "subagent"})
    if asked.task is None and asked.transcript_path is not None:
        task = live_task(Path(asked.transcript_path), asked.subagent)
        if task:
            arguments["task"] = task[:MAX_TASK]
    return arguments


async def _touches(asked: "TouchesRequest") -> Response:
    use = live_tool(asked.agent, asked.tool_name, asked.tool_input, asked.cwd)
    if use is None:
        return _error(400, f"no hook of {asked.agent!r} is read: one of {', '.join(HOOKED)}")
    paths = list(use.file_paths) if use.action in (READ, CHANGE) else []
    return JSONResponse({"action": use.action, "paths": paths[:MAX_TOUCHED]})


def hook_routes(server: MCPServer, host: str, own_person: str) -> list[Route]:
    """The three endpoints, answered through `server`'s tools, for an app served on `host`;
    `own_person`: whose a request without a token's person is."""
    guards = [Middleware(LoopbackOnly)] if host in LOOPBACK_HOSTS else []
    if server.settings.auth is not None:
        # The app's bearer backend has checked the token (mcp_server/app.py); this refuses a
        # request without one, as /mcp does.
        guards.append(Middleware(RequireAuthMiddleware, required_scopes=[]))
    endpoints = {
        RECALL_PATH: _endpoint(RecallRequest, _RECALL_SHAPE, _recall(server, own_person)),
        HISTORY_PATH: _endpoint(HistoryRequest, _HISTORY_SHAPE, _history(server, own_person)),
        TOUCHES_PATH: _endpoint(TouchesRequest, _TOUCHES_SHAPE, _touches),
    }
    return [
        Route(path, endpoint, methods=["POST"], middleware=guards, max_body_size=_MAX_BODY)
        for path, endpoint in endpoints.items()
    ]


def _endpoint(request: type[Asked], shape: str, answer: "Answer[Asked]"):
    """`POST` a JSON body of `request`'s shape -> `answer`'s response."""

    async def endpoint(http: Request) -> Response:
        if not http.headers.get("content-type", "").lower().startswith("application/json"):
            return _error(415, "send the body as Content-Type: application/json")
        try:
            body = await http.body()
        except ClientDisconnect:
            return Response(status_code=400)
        try:
            asked = request.model_validate_json(body)
        except ValidationError as exc:
            reasons = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            return _error(400, f"expected {shape}: {reasons}")
        return await answer(asked)

    return endpoint
