"""The page for people at the recall server's root: search, a session, the projects, forgetting,
who may see what, and hostile transcript content kept as text. Through the real app (the SDK's
own bearer backend in front), with Starlette's test client speaking HTTP to it in-process."""

import re
import subprocess
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest
from starlette.testclient import TestClient

from librarian_dagster.core.assembly.forgetting import forget_sessions
from librarian_dagster.core.store.memories import ChunkRecord
from librarian_dagster.core.store.rows import MemoryRecord
from mcp_server.app import Served, build_server, http_app
from mcp_server.auth import TokenFileVerifier
from mcp_server.page import FIELD_CHARS, SESSIONS_PER_PAGE
from tests.core.test_store import memory_record
from tests.helpers import make_settings
from tests.mcp_server.test_tools import FakeEmbedder

ORIGIN = "http://127.0.0.1:3201"
SESSION = "7d1c0d2e-5a8b-4c1e-9f00-000000000001"


def _remember(store, session_id: str, text: str, **fields) -> None:
    record = memory_record(session_id, embedding_model=FakeEmbedder.model_name)
    record = MemoryRecord.model_validate({**record.model_dump(), **fields})
    store.memories.replace_memory(record, [ChunkRecord("solution", 0, text, [1.0, 0.0, 0.0])])


def _client(store, verifier=None, **options) -> TestClient:
    server = build_server(Served.of(store, FakeEmbedder()), verifier=verifier, **options)
    return TestClient(http_app(server, "127.0.0.1"), base_url=ORIGIN, follow_redirects=False)


def _verifier(tmp_path) -> tuple[TokenFileVerifier, dict[str, str]]:
    from librarian_dagster.core.service import tokens

    path = tmp_path / "tokens.json"
    made = {scope: tokens.add(path, f"t-{scope}", scope)[0] for scope in tokens.SCOPES}
    return TokenFileVerifier(path), made


def _text(html: str) -> str:
    """What a person reads: the page without its tags."""
    return unescape(re.sub(r"<[^>]+>", " ", html))


def test_a_search_shows_session_cards_and_says_nothing_relevant(store):
    _remember(store, SESSION, "retry the sqlite lock with a busy timeout", title="Fix the lock")
    page = _client(store)
    found = page.get("/", params={"q": "sqlite lock", "project": "alpha"})
    assert found.status_code == 200
    assert f'href="/session/{SESSION}"' in found.text
    read = _text(found.text)
    assert "Fix the lock" in read and "retry the sqlite lock" in read and "alpha" in read
    assert "relevance" in read
    # The dates take in their whole day: the session ran from 2026-10-31 23:00 to midnight.
    for since, until, found in (
        ("2026-10-31", "2026-10-31", True), ("2026-11-02", "", False), ("", "2026-10-30", False),
    ):  # fmt: skip
        dated = page.get("/", params={"q": "sqlite lock", "since": since, "until": until})
        assert (f'href="/session/{SESSION}"' in dated.text) is found, (since, until)
    missed = page.get("/", params={"q": "sqlite lock", "project": "elsewhere"})
    assert "Nothing relevant" in missed.text and SESSION not in missed.text
    empty = page.get("/")
    assert empty.status_code == 200 and 'name="q"' in empty.text and "card" not in empty.text


CODEX_SESSION = "019a0c5e-0000-7000-8000-00000000000c"


def test_cards_and_pages_name_the_agent_and_the_search_filters_by_it(store):
    page = _client(store)
    _remember(store, SESSION, "retry the sqlite lock with a busy timeout", title="Fix the lock")
    # One agent held: nothing to choose between, no select.
    assert 'name="agent"' not in page.get("/").text
    _remember(store, CODEX_SESSION, "retry the sqlite lock in Go", title="Go lock", agent="codex")
    form = page.get("/").text
    assert '<select name="agent"' in form
    options = re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', form)
    assert options == [("", "any agent"), ("claude-code", "Claude Code"), ("codex", "Codex")]

    def cards(**params) -> dict[str, str]:
        html = page.get("/", params={"q": "sqlite lock", **params}).text
        found = re.findall(r'class="agent">([^<]*)</span>.*?href="/session/([^"]+)"', html, re.S)
        return {session: agent for agent, session in found}

    assert cards() == {SESSION: "Claude Code", CODEX_SESSION: "Codex"}
    assert cards(agent="codex") == {CODEX_SESSION: "Codex"}
    assert cards(agent="claude-code") == {SESSION: "Claude Code"}
    # The choice is kept in the form; a name no agent has filters nothing.
    assert '<option value="codex" selected>' in page.get("/", params={"agent": "codex"}).text
    assert cards(agent="<b>nobody</b>") == {SESSION: "Claude Code", CODEX_SESSION: "Codex"}
    session = _text(page.get(f"/session/{CODEX_SESSION}").text)
    assert re.search(r"alpha\s+·\s+Codex\s+·", session)
    listing = _text(page.get("/projects/alpha").text)
    assert re.search(r"Go lock\s+Codex\s+·", listing)
    assert re.search(r"Fix the lock\s+Claude Code\s+·", listing)


def test_every_page_sends_the_strict_headers(store):
    _remember(store, SESSION, "lock")
    page = _client(store)
    for path in ("/", "/?q=lock", f"/session/{SESSION}", "/projects", "/projects/alpha", "/login"):
        response = page.get(path)
        assert response.status_code == 200, path
        csp = response.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp, path
        assert "script-src" not in csp  # no script at all, inline or not
        assert response.headers["x-content-type-options"] == "nosniff", path
        assert "<script" not in response.text, path
    css = page.get("/static/page.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")


def test_an_open_server_serves_this_machine_only(store):
    _remember(store, SESSION, "lock")
    page = _client(store)
    rebound = page.get("/?q=lock", headers={"host": "evil.example:3201"})
    assert rebound.status_code == 421 and SESSION not in rebound.text
    assert page.get("/?q=lock", headers={"host": "localhost:3201"}).status_code == 200


def test_with_tokens_the_page_asks_for_one_and_keeps_it_in_a_strict_cookie(store, tmp_path):
    _remember(store, SESSION, "retry the sqlite lock", title="Fix the lock")
    verifier, made = _verifier(tmp_path)
    page = _client(store, verifier)
    refused = page.get("/", params={"q": "lock"})
    assert refused.status_code == 401
    assert 'name="token"' in refused.text  # the login form, and no memory
    for path in ("/?q=lock", f"/session/{SESSION}", "/projects", "/projects/alpha"):
        asked = page.get(path)
        assert asked.status_code == 401, path
        assert "Fix the lock" not in asked.text and "retry the sqlite" not in asked.text, path
        assert 'href="/session/' not in asked.text and "alpha" not in _text(asked.text), path

    bearer = page.get("/?q=lock", headers={"authorization": f"Bearer {made['read']}"})
    assert bearer.status_code == 200 and f"/session/{SESSION}" in bearer.text

    wrong = page.post("/login", data={"token": "lbr_wrong", "next": "/?q=lock"})
    assert wrong.status_code == 401 and "not one this server knows" in wrong.text
    login = page.post("/login", data={"token": made["read"], "next": "/?q=lock"})
    assert login.status_code == 303 and login.headers["location"] == "/?q=lock"
    cookie = login.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert f"/session/{SESSION}" in page.get("/?q=lock").text  # the client keeps the cookie
    away = page.post("/login", data={"token": made["read"], "next": "//evil.example/"})
    assert away.headers["location"] == "/"


def test_the_private_domain_shows_only_to_a_private_token(store, tmp_path):
    _remember(store, SESSION, "the lock of my diary", domain="private", title="Diary lock")
    verifier, made = _verifier(tmp_path)
    page = _client(store, verifier)
    for scope, seen in (("read", False), ("private", True), ("forget", True)):
        bearer = {"authorization": f"Bearer {made[scope]}"}
        search = page.get("/?q=lock", headers=bearer)
        session = page.get(f"/session/{SESSION}", headers=bearer)
        listed = page.get("/projects/alpha", headers=bearer)
        projects = page.get("/projects", headers=bearer)
        assert ("Diary lock" in search.text) is seen, scope
        assert session.status_code == (200 if seen else 404), scope
        assert ("Diary lock" in listed.text) is seen, scope
        assert ("alpha" in _text(projects.text)) is seen, scope
    # An open server serves no private memory, as it serves none on /mcp.
    assert "Diary lock" not in _client(store).get("/?q=lock").text


HOSTILE = [
    "<script>alert('title')</script>",
    '<img src=x onerror="alert(1)">',
    '"><svg onload=alert(2)>',
    "javascript:alert(3)",
    '<a href="javascript:alert(4)">click</a>',
    "</textarea></code><iframe src=//evil.example></iframe>",
    "{{ 7*7 }} {% raw %}",
    "\x1b[31mred\x1b[0m \x1b]8;;http://evil.example\x07link\x1b]8;;\x07",
    "<style>body{display:none}</style>",
    "&lt;script&gt;already escaped&lt;/script&gt;",
    "\u202eevil.exe\x08back\x07bell",
    "<meta http-equiv=refresh content='0;url=http://evil.example'>",
]


def test_hostile_content_is_shown_as_text(store):
    body = " | ".join(HOSTILE)
    _remember(
        store, SESSION, "lock " + body, title=HOSTILE[0], summary=HOSTILE[1],
        files=[HOSTILE[3], HOSTILE[5]], project="<b>proj</b>", git_branch=HOSTILE[2],
        digest={**memory_record(SESSION).digest.model_dump(), "solution": HOSTILE},
    )  # fmt: skip
    page = _client(store)
    for path in ("/?q=lock", f"/session/{SESSION}", "/projects", "/projects/%3Cb%3Eproj%3C%2Fb%3E"):
        html = page.get(path).text
        for tag in ("<script", "<img", "<svg", "<iframe", "<style>", "<meta http", "<b>proj"):
            assert tag not in html, (path, tag)
        assert not re.search(r"""href=["']?javascript:""", html), path
        assert not re.search(r"\son(error|load)=", html.replace("&#34;", '"').split("<main>")[0])
        assert "\x1b" not in html and "\x08" not in html and "\x07" not in html, path
    session = _text(page.get(f"/session/{SESSION}").text)
    assert "<script>alert('title')</script>" in session  # the words are there, as text
    assert "{{ 7*7 }}" in session and "49" not in session  # no template ran on content
    assert "red" in session and "[31m" not in session
    assert "&lt;script&gt;already escaped" in session


def test_a_long_field_is_cut_with_a_link_to_the_whole(store):
    line = "x" * (5 * 1024 * 1024)  # a 5 MB transcript line
    _remember(store, SESSION, "lock " + line, summary="lock " + line)
    page = _client(store)
    cut = page.get(f"/session/{SESSION}")
    assert cut.status_code == 200 and len(cut.text) < 20 * FIELD_CHARS
    assert 'href="?whole=1"' in cut.text
    assert len(page.get("/?q=lock").text) < 20 * FIELD_CHARS
    whole = page.get(f"/session/{SESSION}?whole=1")
    assert line in whole.text


def test_a_session_page_shows_the_digest_files_since_chunks_and_dagster_links(store, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    ended = datetime(2026, 11, 1, tzinfo=UTC)
    (repo / "a.py").write_text("1\n")
    (repo / "b.py").write_text("1\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    at = (ended - timedelta(days=1)).isoformat()
    env = {"GIT_AUTHOR_DATE": at, "GIT_COMMITTER_DATE": at, "PATH": "/usr/bin:/bin"}
    subprocess.run([*git, "commit", "-qm", "one"], check=True, env=env)
    (repo / "a.py").write_text("2\n")
    later = (ended + timedelta(days=2)).isoformat()
    env = {"GIT_AUTHOR_DATE": later, "GIT_COMMITTER_DATE": later, "PATH": "/usr/bin:/bin"}
    subprocess.run([*git, "commit", "-qam", "two"], check=True, env=env)
    _remember(
        store, SESSION, "retry the lock", cwd=str(repo), files=["a.py", "b.py"], ended_at=ended
    )
    page = _client(store, dagster_url="http://127.0.0.1:3000")
    html = page.get(f"/session/{SESSION}").text
    read = _text(html)
    assert "worked on " + SESSION in read and "retry the lock" in read
    assert re.search(r"a\.py\s+1 commit since", read) and re.search(
        r"b\.py\s+unchanged since", read
    )
    assert "Indexed chunks (1)" in read
    key = f"alpha%2F2026-10%2Fclaude-code%2F{SESSION}"
    assert f"http://127.0.0.1:3000/assets/memory?view=partitions&amp;partition={key}" in html
    assert "/runs?q%5B%5D=tag%3Adagster%2Fpartition%3D" in html
    assert page.get("/session/not-a-session").status_code == 404


def test_a_project_pages_through_its_sessions_newest_first(store):
    count = SESSIONS_PER_PAGE + 5
    for i in range(count):
        record = memory_record(f"s{i:02d}", days_ago=i, embedding_model=FakeEmbedder.model_name)
        store.memories.replace_memory(record, [ChunkRecord("solution", 0, "lock", [1.0, 0, 0])])
    page = _client(store)
    first = page.get("/projects/alpha").text
    shown = re.findall(r'href="/session/(s\d\d)"', first)
    assert shown == [f"s{i:02d}" for i in range(SESSIONS_PER_PAGE)]
    more = re.search(r'rel="next" href="\?cursor=([^"]+)"', first)
    assert more is not None
    second = page.get(f"/projects/alpha?cursor={unescape(more.group(1))}").text
    assert re.findall(r'href="/session/(s\d\d)"', second) == [
        f"s{i:02d}" for i in range(SESSIONS_PER_PAGE, count)
    ]
    assert 'rel="next"' not in second
    assert page.get("/projects/alpha?cursor=forged").status_code == 400
    projects = _text(page.get("/projects").text)
    assert re.search(rf"alpha\s+{count}\s+2026-11-01", projects)


def _forget_form(page: TestClient, **headers) -> str:
    form = page.get(f"/session/{SESSION}/forget", headers=headers)
    assert form.status_code == 200 and "cannot be undone" in form.text
    found = re.search(r'name="csrf" value="([0-9a-f]{64})"', form.text)
    assert found is not None
    return found.group(1)


def test_forget_from_the_page_asks_first_refuses_other_sites_and_leaves_nothing(
    store, database_url, tmp_path
):
    settings = make_settings(tmp_path, database_url)
    _remember(store, SESSION, "retry the sqlite lock", title="Fix the lock")
    forgot: list[list[str]] = []

    def forget(ids):
        forgot.append(list(ids))
        return forget_sessions(ids, settings, store, history=None)

    page = _client(store, forget=forget)
    assert f'href="/session/{SESSION}/forget"' in page.get(f"/session/{SESSION}").text
    csrf = _forget_form(page)
    path = f"/session/{SESSION}/forget"
    # Another site's form: no token, a forged one, or the right one from another origin.
    assert page.post(path, data={}, headers={"origin": ORIGIN}).status_code == 403
    assert page.post(path, data={"csrf": "0" * 64}, headers={"origin": ORIGIN}).status_code == 403
    evil = {"origin": "http://evil.example"}
    assert page.post(path, data={"csrf": csrf}, headers=evil).status_code == 403
    assert page.post(path, data={"csrf": csrf}).status_code == 403  # no origin, no referer
    assert forgot == [] and "Fix the lock" in page.get("/?q=lock").text

    done = page.post(path, data={"csrf": csrf, "confirm": "yes"}, headers={"origin": ORIGIN})
    assert done.status_code == 200, done.text
    assert "forgot 1 session(s): 1 memories with their chunks" in done.text
    assert forgot == [[SESSION]]
    assert SESSION not in page.get("/?q=lock").text
    assert page.get(f"/session/{SESSION}").status_code == 404
    assert SESSION not in page.get("/projects/alpha").text
    assert store.memories.get_memory(SESSION, include_private=True) is None
    assert store.ledger.skip_list().reason(SESSION, None)  # never ingested again


def test_forgetting_needs_the_forget_scope(store, database_url, tmp_path):
    settings = make_settings(tmp_path, database_url)
    _remember(store, SESSION, "retry the sqlite lock")
    verifier, made = _verifier(tmp_path)
    page = _client(
        store, verifier, forget=lambda ids: forget_sessions(ids, settings, store, history=None)
    )
    path = f"/session/{SESSION}/forget"
    for scope in ("read", "private"):
        bearer = {"authorization": f"Bearer {made[scope]}"}
        assert path not in page.get(f"/session/{SESSION}", headers=bearer).text
        assert page.get(path, headers=bearer).status_code == 403
        refused = page.post(path, data={"csrf": "x"}, headers={**bearer, "origin": ORIGIN})
        assert refused.status_code == 403
    bearer = {"authorization": f"Bearer {made['forget']}"}
    csrf = _forget_form(page, **bearer)
    # The form's token is the viewer's own: another token's form does not pass.
    other = {"authorization": f"Bearer {made['read']}"}
    assert (
        page.post(path, data={"csrf": csrf}, headers={**other, "origin": ORIGIN}).status_code == 403
    )
    done = page.post(path, data={"csrf": csrf}, headers={**bearer, "origin": ORIGIN})
    assert done.status_code == 200 and "forgot 1 session(s)" in done.text
    assert store.memories.get_memory(SESSION, include_private=True) is None


@pytest.mark.parametrize("path", ["/session/x/forget", "/login"])
def test_an_open_server_refuses_other_names_on_forms_too(store, path):
    page = _client(store, forget=lambda ids: None)
    assert page.post(path, data={}, headers={"host": "evil.example"}).status_code == 421


def test_a_project_shows_its_library_proposal_with_each_lines_sessions_a_click_away(
    store, tmp_path
):
    from librarian_dagster.core.consolidation.pending import Pending

    _remember(store, SESSION, "lock", project="alpha")
    pending = Pending(tmp_path / "pending")
    line = "`npm test` failed with `<script>alert(1)</script>`"
    diff = f"--- /dev/null\n+++ b/_memory_library/src/recurring.md\n+- Gotcha: {line}\n"
    pending.save("alpha", diff, "/work/alpha", {line: [SESSION]})
    listed = _client(store, waiting=pending.all).get("/projects").text
    assert "a library proposal waits" in listed
    page = _client(store, waiting=pending.all).get("/projects/alpha").text
    assert "A library proposal waits for you" in page
    assert f'href="/session/{SESSION}"' in page and "<script>alert" not in page
    assert "librarian library consolidate alpha --apply" in _text(page)
    pending.save("alpha", "", None, {})  # applied, or nothing left to propose
    page = _client(store, waiting=pending.all)
    assert "A library proposal" not in page.get("/projects/alpha").text
    assert "proposal waits" not in page.get("/projects").text
