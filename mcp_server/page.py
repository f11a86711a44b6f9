"""The memory as a page for people, at the recall server's root URL: search, a session in full, the
projects and their sessions. Server-rendered HTML (Jinja2, autoescaped), no script, its one style
sheet shipped in the package.

Who may see it follows the server's rules for /mcp and /recall: an open server (no tokens, which
`serve` allows on loopback only) shows it to this machine only (a Host header other than loopback
is refused, as the SDK refuses it on /mcp: a web page must not read it through a name that
resolves to 127.0.0.1); with tokens, a request needs one, as `Authorization: Bearer` (scripts) or
as the HttpOnly, SameSite=Strict cookie the login form sets. The private domain shows only to a
token with the `private` scope (an open server never shows it, as it never serves it on /mcp).

Forgetting is `librarian forget`'s own service (core/assembly/forgetting.py), behind a confirmation
page whose form carries a token only this server can make (an HMAC of the session and the viewer,
with a key drawn at start) and a same-origin check: another site cannot make a browser forget. It
needs a token with the `forget` scope, or an open server.

Transcripts hold anything: every field is escaped by the templates, stripped of terminal escapes
and control characters, and cut at FIELD_CHARS with a link to the whole; the headers forbid
script, framing and sniffing (CSP `default-src 'none'`).
"""

import hashlib
import hmac
import re
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import TokenVerifier
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from librarian_dagster.core.capture.keys import partition_key
from librarian_dagster.core.capture.readers import AGENTS, label
from librarian_dagster.core.capture.skips import valid_session_id
from librarian_dagster.core.digest.schema import SECTIONS
from librarian_dagster.core.recall.answer import recall
from librarian_dagster.core.recall.cards import dates, session_cards
from librarian_dagster.core.recall.history import changed_since
from librarian_dagster.core.recall.ranking import Boosts
from librarian_dagster.core.service.tokens import FORGET, PRIVATE
from librarian_dagster.core.store.memories import InvalidCursor
from librarian_dagster.core.store.queries import SearchFilters
from mcp_server.auth import LoopbackOnly, person_of

if TYPE_CHECKING:
    from librarian_dagster.core.assembly.forgetting import Forgotten
    from librarian_dagster.core.consolidation.pending import Waiting
    from librarian_dagster.core.store.rows import SessionDigest
    from mcp_server.served import Served

COOKIE = "librarian_token"
FIELD_CHARS = 2000
"""A field longer than this is cut, with a link to the whole (a transcript line can be 5 MB)."""
SESSIONS_PER_PAGE = 25
RESULTS = 5
"""Results a search asks for, as `librarian search` does (twice as many cost 3x the time at a
million chunks: benchmarks/page_latency.py)."""
QUERY_CHARS = 2000
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # Same-origin: the forget form's POST carries its Origin (with no-referrer, Chromium sends
    # "null"), and no other site learns a URL of the page, which holds the question asked.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class SecurityHeaders:
    """The page's headers on every response of it: no script, framing or sniffing."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


# Terminal escapes (CSI and OSC sequences), then what is left of the C0/C1 controls but
# newline and tab: a transcript's `ls --color` output shows as its text.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def plain(text: object, limit: int | None = FIELD_CHARS) -> str:
    """`text` as it may be shown: no terminal escapes or control characters, at most `limit`."""
    shown = _CONTROLS.sub("", _ESCAPES.sub("", str(text)))
    return shown if limit is None or len(shown) <= limit else shown[:limit] + "…"


_environment = Environment(
    loader=PackageLoader("mcp_server", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_environment.filters["plain"] = plain
_environment.filters["pathpart"] = lambda text: quote(str(text), safe="")
# A session's dates, as `librarian search` prints them ("2026-11-01", or "a to b").
_environment.filters["dates"] = lambda s: dates(s.started_at, s.ended_at)
# An agent as people name it ("Codex").
_environment.filters["agent"] = label
_templates = Jinja2Templates(env=_environment)


@dataclass(frozen=True)
class PageSource:
    """What the page reads, as the tools read it: the served store, the answer's threshold and
    boosts, and the tokens (None: an open server)."""

    served: "Callable[[], Served]"
    min_relevance: float
    boosts: Boosts
    verifier: TokenVerifier | None
    forget: "Callable[[Sequence[str]], Forgotten] | None" = None
    """`librarian forget` of these sessions (None: the page offers no forgetting)."""
    dagster_url: str | None = None
    """The Dagster UI the session page links to (None: no links)."""
    own_person: str = ""
    """Whose the server's own sessions are, and a token's of no person."""
    waiting: "Callable[[], list[Waiting]] | None" = None
    """The library proposals waiting for a person (`library_notes`), a project's each."""
    _csrf_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def csrf(self, session_id: str, viewer: "Viewer") -> str:
        """The forget form's token: made only here, for this session and this viewer."""
        said = f"{session_id}\0{viewer.who}".encode()
        return hmac.new(self._csrf_key, said, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Viewer:
    scopes: frozenset[str]
    who: str
    """Whose request: the token's name, or "" on an open server."""
    open: bool
    person: str | None = None
    """The token's person (None on an open server): the private sessions it reads are theirs
    alone."""

    @property
    def private(self) -> bool:
        return PRIVATE in self.scopes

    def may_forget(self, memory: "SessionDigest") -> bool:
        """Whether this viewer may forget the session: their own, or anyone's with the `forget`
        scope (or on an open server)."""
        own = self.person is not None and memory.person == self.person
        return self.open or FORGET in self.scopes or own


async def _viewer(http: Request, source: PageSource) -> Viewer | None:
    """Who asks: a bearer token the SDK's backend accepted, the login cookie's token, or anyone
    on this machine when no token is configured; None when a token is needed and missing."""
    if source.verifier is None:
        return Viewer(frozenset(), "", open=True)
    access = get_access_token()
    if access is None:
        cookie = http.cookies.get(COOKIE)
        access = await source.verifier.verify_token(cookie) if cookie else None
        if access is None:
            return None
    person = person_of(access, source.own_person)
    return Viewer(frozenset(access.scopes), access.client_id, open=False, person=person)


def _html(http: Request, template: str, status: int = 200, /, **values: object) -> Response:
    return _templates.TemplateResponse(http, template, values, status_code=status)


View = Callable[[PageSource, Request, Viewer], Awaitable[Response]]


def _page(source: PageSource, view: View):
    """An endpoint of the page: the viewer, then the view (the loopback guard and the headers are
    its route's middleware, `page_routes`)."""

    async def endpoint(http: Request) -> Response:
        viewer = await _viewer(http, source)
        if viewer is None:
            back = http.url.path + (f"?{http.url.query}" if http.url.query else "")
            return _html(http, "login.html", 401, wrong=False, next=back)
        return await view(source, http, viewer)

    return endpoint


def _same_origin(http: Request) -> bool:
    """Whether a form's POST comes from a page of this server: its Origin (or, without one, its
    Referer; browsers send one of them with every POST) names this server's host."""
    source = http.headers.get("origin") or http.headers.get("referer")
    return source is not None and urlsplit(source).netloc == http.headers.get("host")


def _day(text: str | None) -> datetime | None:
    try:
        return datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=UTC) if text else None
    except ValueError:
        return None


def _end_of(day: datetime | None) -> datetime | None:
    """The date box's `until` takes in its whole day: sessions that began on it too."""
    return day + timedelta(days=1, microseconds=-1) if day else None


async def _search(source: PageSource, http: Request, viewer: Viewer) -> Response:
    """`/?q=...&project=&agent=&branch=&since=&until=`: the answer as session cards, or "nothing
    relevant" when recall abstains; the box alone without `q`. The agent select offers the
    agents the store holds sessions of (an agent not known is no filter: no one typed it)."""
    fields = ("q", "project", "branch", "agent", "person")
    asked = {k: http.query_params.get(k, "").strip() for k in fields}
    days = {k: http.query_params.get(k, "").strip() for k in ("since", "until")}
    served = source.served()
    held = await run_in_threadpool(
        served.memories.agents_held, AGENTS, viewer.private, viewer.person
    )
    if asked["agent"] not in AGENTS:
        asked["agent"] = ""
    if asked["agent"] and asked["agent"] not in held:
        held.append(asked["agent"])
    # One agent held: nothing to choose between, no select.
    agents = [(a, label(a)) for a in held] if len(held) > 1 else []
    people = await run_in_threadpool(served.memories.people, viewer.private, viewer.person)
    people = [p.person for p in people] if len(people) > 1 else []
    values: dict[str, object] = {
        **asked, **days, "agents": agents, "people": people, "cards": None, "note": None,
    }  # fmt: skip
    if asked["q"]:
        filters = SearchFilters(
            project=asked["project"] or None, agent=asked["agent"] or None,
            person=asked["person"] or None, git_branch=asked["branch"] or None,
            since=_day(days["since"]), until=_end_of(_day(days["until"])),
            include_private=viewer.private, viewer=viewer.person,
        )  # fmt: skip
        result = await run_in_threadpool(
            recall, served.search, served.embedder, asked["q"][:QUERY_CHARS], filters, RESULTS,
            min_relevance=source.min_relevance, boosts=source.boosts,
        )  # fmt: skip
        values["cards"] = session_cards(result.results)
        values["note"] = result.note
    return _html(http, "search.html", **values)


async def _remembered(
    source: PageSource, session_id: str, viewer: Viewer
) -> "SessionDigest | None":
    if not valid_session_id(session_id):
        return None
    memories = source.served().memories
    return await run_in_threadpool(memories.get_memory, session_id, viewer.private, viewer.person)


def _missing(http: Request, session_id: str) -> Response:
    return _html(http, "missing.html", 404, what=f"no session {session_id} in memory")


async def _session(source: PageSource, http: Request, viewer: Viewer) -> Response:
    """`/session/<id>`: the digest in full, its files and whether each changed since, its
    indexed chunks, its Dagster partition and runs; `?whole=1` shows no field cut."""
    session_id = http.path_params["session_id"]
    memory = await _remembered(source, session_id, viewer)
    if memory is None:
        return _missing(http, session_id)
    chunks = await run_in_threadpool(source.served().memories.indexed_chunks, session_id)
    files = await run_in_threadpool(changed_since, memory.cwd, memory.files, memory.ended_at)
    texts = [memory.title or "", memory.summary, memory.cwd or "", *memory.files]
    texts += [line for key, _ in SECTIONS for line in getattr(memory.digest, key)]
    texts += [c.text for c in chunks]
    return _html(
        http, "session.html", memory=memory, chunks=chunks, files=files, sections=SECTIONS,
        whole=bool(http.query_params.get("whole")),
        cut=any(len(t) > FIELD_CHARS for t in texts), dagster=_dagster_links(source, memory),
        may_forget=source.forget is not None and viewer.may_forget(memory),
    )  # fmt: skip


def _dagster_links(source: PageSource, memory: "SessionDigest") -> dict[str, str] | None:
    """The session's partition of its last stage, and the runs of that partition, in the UI."""
    if source.dagster_url is None:
        return None
    ui = source.dagster_url.rstrip("/")
    key = partition_key(memory.session_id, memory.project, memory.started_at, memory.agent)
    return {
        "partition": f"{ui}/assets/memory?view=partitions&partition={quote(key, safe='')}",
        "runs": f"{ui}/runs?q%5B%5D={quote(f'tag:dagster/partition={key}', safe='')}",
    }


async def _forget(source: PageSource, http: Request, viewer: Viewer) -> Response:
    """GET: the confirmation, with the form's token. POST (from this server's page, with that
    token): `librarian forget` of the session, and what it removed."""
    session_id = http.path_params["session_id"]
    memory = await _remembered(source, session_id, viewer)
    if source.forget is None or (memory is not None and not viewer.may_forget(memory)):
        refused = "forgetting another person's session needs a token with the forget scope"
        return _html(http, "missing.html", 403, what=refused)
    if memory is None:
        return _missing(http, session_id)
    if http.method == "GET":
        return _html(http, "forget.html", memory=memory, csrf=source.csrf(session_id, viewer))
    form = await http.form()
    sent = str(form.get("csrf", ""))
    if not _same_origin(http) or not hmac.compare_digest(sent, source.csrf(session_id, viewer)):
        refused = "that form was not this server's: nothing was forgotten"
        return _html(http, "missing.html", 403, what=refused)
    done = await run_in_threadpool(source.forget, [session_id])
    return _html(http, "forgotten.html", said=done.said())


async def _projects(source: PageSource, http: Request, viewer: Viewer) -> Response:
    memories = source.served().memories
    found = await run_in_threadpool(memories.projects, viewer.private, 500, viewer.person)
    proposals = await run_in_threadpool(source.waiting) if source.waiting else []
    waiting = {w.project for w in proposals}
    return _html(http, "projects.html", projects=found, waiting=waiting)


async def _project(source: PageSource, http: Request, viewer: Viewer) -> Response:
    """A project's sessions, newest first, SESSIONS_PER_PAGE at a time (a cursor, not offsets:
    a page costs the same however deep)."""
    name = http.path_params["project"]
    filters = SearchFilters(project=name, include_private=viewer.private, viewer=viewer.person)
    memories = source.served().memories
    try:
        listed = await run_in_threadpool(
            memories.list_sessions, filters, SESSIONS_PER_PAGE, http.query_params.get("cursor")
        )
    except InvalidCursor:
        return _html(http, "missing.html", 400, what="that page link is not one this server made")
    proposals = await run_in_threadpool(source.waiting) if source.waiting else []
    waiting = next((w for w in proposals if w.project == name), None)
    return _html(http, "project.html", project=name, listed=listed, waiting=waiting)


def _login(source: PageSource):
    async def login(http: Request) -> Response:
        if http.method == "GET":
            return _html(http, "login.html", wrong=False, next=_back(http.query_params.get("next")))
        form = await http.form()
        token, back = str(form.get("token", "")), _back(str(form.get("next", "/")))
        access = await source.verifier.verify_token(token) if source.verifier and token else None
        if access is None:
            return _html(http, "login.html", 401, wrong=True, next=back)
        done = RedirectResponse(back, status_code=303)
        done.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return done

    return login


def _back(path: str | None) -> str:
    """Where the login goes back to: a path of this server only (never `//elsewhere`)."""
    return path if path and path.startswith("/") and not path.startswith("//") else "/"


def page_routes(source: PageSource) -> list[BaseRoute]:
    """The page's routes and its style sheet, for the recall server's app: each behind the
    security headers and, on an open server, the loopback guard (with tokens, the name does not
    matter: a page of another name has neither the token nor the cookie)."""
    guards = [Middleware(SecurityHeaders)]  # outermost: a refusal carries the headers too
    if source.verifier is None:
        guards.append(Middleware(LoopbackOnly))
    pages: dict[str, tuple[Callable[[Request], Awaitable[Response]], list[str]]] = {
        "/": (_page(source, _search), ["GET"]),
        "/session/{session_id}": (_page(source, _session), ["GET"]),
        "/session/{session_id}/forget": (_page(source, _forget), ["GET", "POST"]),
        "/projects": (_page(source, _projects), ["GET"]),
        "/projects/{project:path}": (_page(source, _project), ["GET"]),
        "/login": (_login(source), ["GET", "POST"]),
    }
    return [
        *(Route(path, view, methods=methods, middleware=guards)
          for path, (view, methods) in pages.items()),
        Mount("/static", StaticFiles(packages=[("mcp_server", "static")]), middleware=guards),
    ]  # fmt: skip
