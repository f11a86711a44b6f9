"""Asking a running recall server: a search from the terminal that does not load the world.

`librarian search` in its own process would load every BM25 posting of the store before its one
question (seconds at 100,000 chunks). A recall server (`librarian up`, `librarian mcp --transport
http`) holds them already: its `POST /recall` gives the same answer as search_chunks, which
`librarian search --json` prints. Standard library only; a server that is not there is known at
once on loopback (the connection is refused), and then the search runs in process.
"""

import json
import urllib.error
import urllib.request
from datetime import datetime
from typing import TypeVar

from pydantic import BaseModel

from librarian_dagster.core.recall.history import FileQuestion
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.queries import SearchFilters
from librarian_dagster.core.store.rows import FileHistory, SearchResult

MAX_LIMIT = 10  # /recall's own limit
ANSWER_TIMEOUT_S = 10.0


class ServerRefused(Exception):
    """The server answered, but not with a result (a refused token, a failed search)."""


def recall_url(settings: Settings) -> str:
    """Where this machine's recall server answers: the settings' MCP host and port."""
    host = settings.mcp_host
    # A server listening on every address is asked on loopback; an IPv6 address goes in brackets.
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.mcp_port}/recall"


def ask_server(
    settings: Settings, query: str, filters: SearchFilters, limit: int
) -> SearchResult | None:
    """The running server's answer, or None when no server listens there.

    Raises ServerRefused when one answers with an error: the caller says so and searches itself.
    """
    body: dict[str, object] = {"query": query, "limit": limit}
    for name in ("project", "agent", "person", "domain", "since", "until"):
        value = getattr(filters, name)
        if value is not None:
            body[name] = value.isoformat() if isinstance(value, datetime) else value
    if filters.tags:
        body["tags"] = list(filters.tags)
    if filters.any_tags:
        body["any_tags"] = list(filters.any_tags)
    answer = _post(recall_url(settings), body, settings)
    return None if answer is None else _read(SearchResult, answer)


def ask_history(settings: Settings, question: FileQuestion) -> FileHistory | None:
    """The running server's `POST /history` answer, as `ask_server` (ServerRefused, None)."""
    body = {
        name: getattr(question, name)
        for name in ("path", "cwd", "root", "task", "session_id", "limit")
        if getattr(question, name) is not None
    }
    url = recall_url(settings).removesuffix("/recall") + "/history"
    answer = _post(url, body, settings)
    return None if answer is None else _read(FileHistory, answer)


Answer = TypeVar("Answer", bound=BaseModel)


def _read(model: type[Answer], answer: bytes) -> Answer:
    try:
        return model.model_validate_json(answer)
    except ValueError as exc:
        raise ServerRefused(type(exc).__name__) from None


def _post(url: str, body: dict[str, object], settings: Settings) -> bytes | None:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if settings.mcp_token:
        headers["Authorization"] = f"Bearer {settings.mcp_token}"
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=ANSWER_TIMEOUT_S) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        raise ServerRefused(f"HTTP {exc.code}") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return None
        raise ServerRefused(str(exc.reason)) from None
    except (TimeoutError, ConnectionError, ValueError) as exc:
        raise ServerRefused(type(exc).__name__) from None


def served(filters: SearchFilters, limit: int) -> bool:
    """Whether a server can answer this search as the process would: /recall takes at most 10
    results and neither the branch filter nor the private domain (which needs a token's scope)."""
    return limit <= MAX_LIMIT and filters.git_branch is None and not filters.include_private
