"""The recall server put together: the MCP tools (mcp_server/tools.py), the hooks' REST adapter
(mcp_server/hooks_api.py), the page for people (mcp_server/page.py) and the sessions pushed from
other machines (mcp_server/push_api.py) over one store.

`http_app` is the SDK's pattern for serving more than MCP: an outer Starlette app that owns the
lifespan (what the tools read, opened once at start and closed at shutdown, and the streamable
HTTP session manager) and mounts the SDK's own apps (streamable HTTP at /mcp, legacy SSE at /sse).
With tokens, every route of it passes the SDK's bearer backend (mcp_server/auth.py).
"""

import getpass
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.provider import TokenVerifier
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Mount

from librarian_dagster.core.assembly.forgetting import Forgotten
from librarian_dagster.core.consolidation.pending import Waiting
from librarian_dagster.core.recall.ranking import DEFAULT_BOOSTS, Boosts
from librarian_dagster.core.recall.relevance import DEFAULT_THRESHOLD
from mcp_server.auth import auth_settings
from mcp_server.hooks_api import hook_routes
from mcp_server.page import PageSource, page_routes
from mcp_server.push_api import Intake, push_routes
from mcp_server.served import Opener, Served, ServedSlot
from mcp_server.tools import INSTRUCTIONS, add_tools


class RecallServer(MCPServer):
    """The MCP server with its tools, and what its HTTP app serves beside them: the store they
    read (`served`), the page (`page`) and the tokens every route checks (`verifier`)."""

    def __init__(
        self, served: ServedSlot, page: PageSource, issuer_url: str, intake: Intake | None
    ) -> None:
        verifier = page.verifier
        super().__init__(
            "librarian",
            instructions=INSTRUCTIONS,
            token_verifier=verifier,
            auth=auth_settings(issuer_url) if verifier is not None else None,
        )
        self.served = served
        self.page = page
        self.verifier = verifier
        self.intake = intake


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
    intake: Intake | None = None,
    own_person: str | None = None,
    waiting: Callable[[], list[Waiting]] | None = None,
) -> RecallServer:
    """The tools over what `source` is, or opens when the HTTP app starts (and closes when it
    stops; elsewhere, as over stdio, `server.served.opened()` opens it), and the page for people
    at the HTTP app's root. With `verifier`, the HTTP app demands
    a bearer token it accepts (`issuer_url`: where the tokens come from, this server).
    `private_without_token`: whether a request that carries no token (stdio, in-memory) sees the
    private domain. `forget`: how the page forgets sessions (None: it does not); `dagster_url`:
    the Dagster UI a session's page links to; `intake`: where `POST /push` stages sessions
    pushed from other machines (None: it takes none); `own_person`: whose the sessions read on
    the server's own machine are (default: the login name), and a token's of no person;
    `waiting`: the library proposals waiting for a person, which the projects' pages show."""
    served = ServedSlot(source)
    own = own_person or getpass.getuser()
    page = PageSource(served, min_relevance, boosts, verifier, forget, dagster_url, own, waiting)
    server = RecallServer(served, page, issuer_url, intake)
    add_tools(server, served, min_relevance, boosts, private_without_token, own)
    return server


def http_app(server: RecallServer, host: str) -> Starlette:
    """One ASGI app for `host`: streamable HTTP at /mcp, legacy SSE at /sse for older clients,
    the hooks' `POST /recall`, `/history` and `/touches`, and the page at /. A server built with a
    verifier demands a token on all of them but the page's login and its style sheet. Each
    request's token is checked here, and again by the SDK's own apps for /mcp and /sse."""
    mcp = server.streamable_http_app(host=host)
    # Mounted last inside it, so /mcp matches first; the SSE app serves /sse and /messages/.
    mcp.mount("/", server.sse_app(host=host))

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        with server.served.opened():
            async with server.session_manager.run():
                yield

    middleware, verifier = [], server.verifier
    if verifier is not None:
        # The SDK's bearer backend, as its own apps put it before /mcp: the token's scopes for
        # the hooks' endpoints and the page (`get_access_token`), and none for a request without.
        middleware = [
            Middleware(AuthenticationMiddleware, backend=BearerAuthBackend(verifier)),
            Middleware(AuthContextMiddleware),
        ]
    pushes = (
        push_routes(
            server.served, server.intake, host, verifier is not None, server.page.own_person
        )
        if server.intake is not None
        else []
    )
    routes = [
        *hook_routes(server, host, server.page.own_person),
        *pushes,
        *page_routes(server.page),
        Mount("/", app=mcp),
    ]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
