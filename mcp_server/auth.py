"""Who may read what: bearer tokens through the mcp SDK's own auth hooks, and the private domain.

Over HTTP, with tokens configured, every request (/mcp, /sse, /recall) passes the SDK's
`BearerAuthBackend`, which asks `TokenFileVerifier` about the `Authorization: Bearer` header;
/mcp, /sse and the hooks' endpoints refuse a request without a valid token with a 401
(`RequireAuthMiddleware`). A token is valid if it is in the token file (`librarian token
add`, core/service/tokens.py), or if it equals `LIBRARIAN_MCP_TOKEN`, which counts as a token of the
default scope: the plugin's .mcp.json and the prompt hook send that variable.

The tools read the caller's scopes with the SDK's `get_access_token()`: a private session (of the
`private` domain, or of a project its person keeps private) goes only to a token with the
`private` scope of that session's person (a token made without `--person` is the server's own
person's). Without a token (stdio, the in-memory client, an open loopback server) the server's
`private_without_token` decides.
"""

import hmac
import logging
from dataclasses import dataclass
from pathlib import Path

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from pydantic import AnyHttpUrl
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from librarian_dagster.core.service import tokens
from librarian_dagster.core.settings import Settings

logger = logging.getLogger(__name__)

SHARED_TOKEN_NAME = "LIBRARIAN_MCP_TOKEN"
"""The client id a request authenticated with LIBRARIAN_MCP_TOKEN carries."""

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


class TokenFileVerifier(TokenVerifier):
    """The SDK's `TokenVerifier` over the token file and the shared LIBRARIAN_MCP_TOKEN."""

    def __init__(self, token_file: Path | None = None, shared_token: str | None = None) -> None:
        # Read once now, so a broken file stops the server at start with its message.
        self._file = tokens.TokenFile(token_file) if token_file is not None else None
        self._shared = shared_token.encode("utf-8") if shared_token else None

    def configured(self) -> bool:
        """Whether any token is known: if not, there is nothing to check a request against."""
        return self._shared is not None or bool(self._file and self._file.entries())

    async def verify_token(self, token: str) -> AccessToken | None:
        token = token.strip()
        entry = None
        if self._file is not None:
            try:
                entry = self._file.find(token)
            except tokens.TokenFileError as exc:
                # Edited into something unreadable while we run: refuse its tokens, say why.
                logger.error("refusing the token file's tokens: %s", exc)
        if entry is not None:
            return _access(entry.name, entry.scopes, entry.person)
        # compare_digest: the time taken does not tell how much of a guess was right.
        if self._shared is not None and hmac.compare_digest(token.encode("utf-8"), self._shared):
            return _access(SHARED_TOKEN_NAME, (tokens.READ,), None)
        return None


class PersonAccess(AccessToken):
    """The SDK's access token, with whose token it is."""

    person: str | None = None
    """The token's person (`librarian token add --person`); None: the server's own person."""


def _access(name: str, scopes: tuple[str, ...], person: str | None) -> PersonAccess:
    # `token` holds the name, not the secret: the AccessToken lives on in the request's context,
    # and nothing needs the secret once it is checked.
    return PersonAccess(token=name, client_id=name, scopes=list(scopes), person=person)


def person_of(access: AccessToken, own_person: str) -> str:
    """Whose token `access` is: its person; a token of none is the server's own person's."""
    if isinstance(access, PersonAccess) and access.person:
        return access.person
    return own_person


def caller_person(own_person: str) -> str:
    """Whose request this is: its token's person; a token of none, or no token, is the
    server's own person's."""
    access = get_access_token()
    return own_person if access is None else person_of(access, own_person)


REBOUND = "this server answers requests to localhost only"
"""What a loopback server answers (421) a request that names another host."""


def named_elsewhere(host_header: str) -> bool:
    """Whether a request's Host names something other than loopback: on a loopback server, a
    web page reaching 127.0.0.1 through a name of its own (DNS rebinding), as the SDK refuses
    it on /mcp."""
    return host_name(host_header) not in LOOPBACK_HOSTS


class LoopbackOnly:
    """Refuses (421) a request whose Host names something other than loopback, as the SDK
    refuses it on /mcp: a web page must not read memories through a name of its own that
    resolves to 127.0.0.1 (DNS rebinding). For what a loopback server serves beside /mcp."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and named_elsewhere(Headers(scope=scope).get("host", "")):
            await PlainTextResponse(REBOUND, 421)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def host_name(header: str) -> str:
    """`127.0.0.1:3201` -> `127.0.0.1`, `[::1]:3201` -> `::1`."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0]


def verifier_for(settings: Settings) -> TokenFileVerifier | None:
    """The verifier the settings configure, or None when no token is configured at all."""
    verifier = TokenFileVerifier(settings.tokens_file, settings.mcp_token)
    return verifier if verifier.configured() else None


def auth_settings(issuer_url: str) -> AuthSettings:
    """The SDK's auth settings for a server that checks its own tokens (no OAuth discovery:
    tokens are made with `librarian token add`, not fetched from an authorization server)."""
    return AuthSettings(issuer_url=AnyHttpUrl(issuer_url), resource_server_url=None)


@dataclass(frozen=True)
class Reading:
    """What one request may read of the private sessions (the `private` domain, and projects
    their person keeps private)."""

    include_private: bool
    """Whether any: its token has the `private` scope (without a token, the server's own
    setting)."""
    viewer: str | None
    """Whose: the token's person reads their own alone (a token of no person is the server's
    own person's); None, without a token, everyone's (stdio, an open loopback server)."""


def reading(private_without_token: bool, own_person: str) -> Reading:
    """What this request may read of the private sessions: its token decides."""
    access = get_access_token()
    if access is None:
        return Reading(private_without_token, None)
    return Reading(tokens.PRIVATE in access.scopes, person_of(access, own_person))
