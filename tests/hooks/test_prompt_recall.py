"""user_prompt_submit.py, recall: past sessions about the prompt, only when the server has some.

The positive case runs the real recall endpoint (real HTTP app, embedded PostgreSQL, the local
embedder); the ways a server can fail are small fake servers on 127.0.0.1. The hook always runs
as its own process, the way Claude Code runs it. The text itself is the server's
(tests/core/test_hook_text.py): the hook asks, and prints it or nothing.
"""

import json
import time

import pytest
from hookutil import FakeServer, answering, make_library, send, user_prompt_event

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.store.memories import ChunkRecord
from mcp_server.app import Served, build_server, http_app
from mcp_server.auth import TokenFileVerifier
from tests.core.test_store import memory_record
from tests.helpers import free_port, serve_http

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

PROMPT = "How did we fix the SQLite database is locked error in the ingest worker?"
BULLET = (
    "Fixed the SQLite 'database is locked' error in the ingest worker by turning on WAL mode "
    "and a five second busy_timeout."
)

OTHER = "Kept one writer connection per worker process; readers never block it."
TOKEN = "tok-3f9a-never-logged"
HEADER = "Librarian remembers past sessions"
# A hang, not a performance number: the hook must give up near its 0.8 s deadline.
HANG_BOUND_S = 3.0


def _context(proc) -> str | None:
    assert proc.returncode == 0, proc.stderr
    if not proc.stdout:
        return None
    output = json.loads(proc.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "UserPromptSubmit"
    return output["additionalContext"]


def _told(text: str | None, sessions: int = 1, note: str | None = None) -> dict:
    """What `POST /recall` answers."""
    return {"context": text, "sessions": sessions, "note": note}


RECALLED = f"{HEADER} (from memory):\n- session s1 (alpha, 2026-11-01): summary\n  - {BULLET}"


def _on(url: str, **extra) -> dict:
    return {"LIBRARIAN_RECALL": "on", "LIBRARIAN_RECALL_URL": url + "/recall", **extra}


@pytest.fixture
def bare(tmp_path):
    """A project folder without `_memory_library/`: only recall can add anything there."""
    folder = tmp_path / "bare"
    folder.mkdir()
    return str(folder)


@pytest.fixture(scope="module")
def embedder():
    model = local_embedder()
    model.embed_query("warm up")  # the first query pays for loading the weights
    return model


def _remember(store: Store, embedder) -> None:
    record = memory_record("sess-sqlite-1", project="ingest", embedding_model=embedder.model_name)
    vectors = embedder.embed_documents([BULLET, OTHER])
    store.memories.replace_memory(
        record,
        [
            ChunkRecord("solution", 0, BULLET, vectors[0]),
            ChunkRecord("solution", 1, OTHER, vectors[1]),
        ],
    )


def test_a_relevant_memory_from_the_real_endpoint_is_added(hooks, store, embedder, bare):
    _remember(store, embedder)
    verifier = TokenFileVerifier(shared_token=TOKEN)  # the server's LIBRARIAN_MCP_TOKEN
    app = http_app(build_server(Served.of(store, embedder), verifier=verifier), "127.0.0.1")
    # A generous deadline here: this test is about the answer; deadlines are tested below.
    slack = {"LIBRARIAN_RECALL_TIMEOUT_MS": "5000"}
    with serve_http(app, free_port()) as url:
        proc = hooks.run(
            "user_prompt_submit",
            user_prompt_event(bare, prompt=PROMPT),
            _on(url, LIBRARIAN_MCP_TOKEN=TOKEN, **slack),
        )
        refused = hooks.run(
            "user_prompt_submit",
            user_prompt_event(bare, prompt=PROMPT),
            _on(url, LIBRARIAN_MCP_TOKEN="wrong-token", **slack),
        )
    text = _context(proc)
    assert text is not None and text.startswith(HEADER)
    head = (
        "- session sess-sqlite-1 (ingest, 2026-10-31 to 2026-11-01, branch main): "
        "summary of sess-sqlite-1"
    )
    assert head in text
    assert f"  - {BULLET}" in text
    assert "get_digest" in text and len(text) <= 1500
    assert _context(refused) is None
    added, denied = hooks.log_lines()
    assert "recall added 1 sessions" in added and "recall failed (refused (401))" in denied
    for line in (added, denied):
        assert "SQLite" not in line and TOKEN not in line and "wrong-token" not in line


def test_nothing_is_added_when_nothing_is_remembered(hooks, store, embedder, bare):
    with serve_http(
        http_app(build_server(Served.of(store, embedder)), "127.0.0.1"), free_port()
    ) as url:
        proc = hooks.run(
            "user_prompt_submit",
            user_prompt_event(bare, prompt=PROMPT),
            _on(url, LIBRARIAN_RECALL_TIMEOUT_MS="5000"),
        )
    assert _context(proc) is None
    assert "recall none (" in hooks.log_lines()[-1]


def test_the_request_carries_the_prompt_the_token_and_goes_beside_mcp(hooks, bare):
    with answering(200, _told(None, 0)) as server:
        env = {
            "LIBRARIAN_RECALL": "on",
            "LIBRARIAN_MCP_URL": server.url + "/mcp",
            "LIBRARIAN_MCP_TOKEN": TOKEN,
        }
        proc = hooks.run("user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), env)
    assert _context(proc) is None
    [(method, path, headers, body)] = server.requests
    assert (method, path) == ("POST", "/recall")
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["Content-Type"] == "application/json"
    # No repository there: the cwd alone says where the prompt comes from.
    assert json.loads(body) == {"prompt": PROMPT, "limit": 3, "deadline_ms": 800, "cwd": bare}
    assert TOKEN not in hooks.log.read_text(encoding="utf-8")


def test_a_prompt_goes_as_the_agent_gave_it_and_is_answered_under_its_event_s_name(hooks, bare):
    """Gemini CLI, headless, hands BeforeAgent the prompt behind its SessionStart hooks'
    context: the server finds what the user typed (tests/core/test_hook_text.py)."""
    prompt = f"<hook_context>a\nb</hook_context>\n\n{PROMPT}"
    event = user_prompt_event(bare, prompt=prompt)
    event["hook_event_name"] = "BeforeAgent"
    with answering(200, _told(RECALLED)) as server:
        proc = hooks.run("user_prompt_submit", event, _on(server.url))
    [(_, _, _, body)] = server.requests
    assert json.loads(body)["prompt"] == prompt
    output = json.loads(proc.stdout)["hookSpecificOutput"]
    assert output == {"hookEventName": "BeforeAgent", "additionalContext": RECALLED}


def test_no_token_no_authorization_header(hooks, bare):
    with answering(200, _told(None, 0)) as server:
        hooks.run("user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(server.url))
    [(_, _, headers, _)] = server.requests
    assert "Authorization" not in headers


@pytest.mark.parametrize(
    ("prompt", "env", "why"),
    [
        ("", {}, "no prompt"),
        ("  \n ", {}, "no prompt"),
        (PROMPT, {"LIBRARIAN_RECALL": "off"}, "recall off"),
        (PROMPT, {"LIBRARIAN_RECALL": "0"}, "recall off"),
    ],
)
def test_no_prompt_and_off_never_ask(hooks, bare, prompt, env, why):
    with answering(200, _told(RECALLED)) as server:
        proc = hooks.run(
            "user_prompt_submit", user_prompt_event(bare, prompt=prompt), _on(server.url, **env)
        )
    assert _context(proc) is None and server.requests == []
    assert why in hooks.log_lines()[-1]


def test_what_the_server_says_of_a_prompt_it_does_not_look_up_is_logged(hooks, bare):
    with answering(200, _told(None, 0, "slash command")) as server:
        event = user_prompt_event(bare, prompt="/compact keep the notes about the sqlite lock")
        assert _context(hooks.run("user_prompt_submit", event, _on(server.url))) is None
    assert "recall none (slash command)" in hooks.log_lines()[-1]


def test_the_user_s_budget_goes_to_the_server_as_it_is(hooks, bare):
    with answering(200, _told(None, 0)) as server:
        for budget in ("", "600", "99999999", "x", "-5"):
            env = _on(server.url, LIBRARIAN_RECALL_BUDGET=budget)
            hooks.run("user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), env)
    sent = [json.loads(body).get("budget") for _, _, _, body in server.requests]
    assert sent == [None, 600, 99999999, None, -5]


def test_a_closed_port_adds_nothing(hooks, bare):
    url = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    proc = hooks.run("user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(url))
    assert time.monotonic() - start < HANG_BOUND_S
    assert _context(proc) is None
    assert "recall failed (ConnectionRefusedError)" in hooks.log_lines()[-1]


def _sleeps(handler) -> None:
    time.sleep(6)
    send(handler, 200, json.dumps(_told(RECALLED)).encode())


def _trickles(handler) -> None:
    # A byte every 0.2 s: no single read waits long enough for a socket timeout to fire.
    for byte in b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: " + b"z" * 40:
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()
        time.sleep(0.2)


@pytest.mark.parametrize("respond", [_sleeps, _trickles], ids=["sleeps", "trickles"])
def test_a_slow_server_is_abandoned_at_the_deadline(hooks, bare, respond):
    with FakeServer(respond) as server:
        start = time.monotonic()
        proc = hooks.run(
            "user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(server.url)
        )
        elapsed = time.monotonic() - start
    assert elapsed < HANG_BOUND_S, elapsed
    assert _context(proc) is None and len(server.requests) == 1
    assert "recall failed (timeout)" in hooks.log_lines()[-1]


def _hangs_up(handler) -> None:
    handler.close_connection = True  # no status line at all


@pytest.mark.parametrize(
    ("status", "payload", "why"),
    [
        (200, b"<html>not json</html>", "not JSON"),
        (200, b"\xff\xfe\x00", "not JSON"),
        (200, [1, 2, 3], "not an object"),
        (200, {"context": ["a list"]}, "not a context"),
        (200, {"context": "x" * 10_001, "sessions": 1}, "not a context"),
        (200, {"answer": []}, "recall none"),
        (500, {"error": "boom"}, "http 500"),
        (403, {"error": "no"}, "refused (403)"),
    ],
)
def test_garbage_adds_nothing(hooks, bare, status, payload, why):
    with answering(status, payload) as server:
        proc = hooks.run(
            "user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(server.url)
        )
    assert _context(proc) is None
    assert why in hooks.log_lines()[-1]


def test_a_server_that_hangs_up_adds_nothing(hooks, bare):
    with FakeServer(_hangs_up) as server:
        proc = hooks.run(
            "user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(server.url)
        )
    assert _context(proc) is None and "recall failed" in hooks.log_lines()[-1]


def test_reminder_and_recall_arrive_together(hooks, tmp_path):
    lib = make_library(tmp_path / "repo", {})
    with answering(200, _told(RECALLED)) as server:
        env = _on(server.url)
        first = _context(
            hooks.run("user_prompt_submit", user_prompt_event(str(lib.parent), prompt=PROMPT), env)
        )
        second = _context(
            hooks.run("user_prompt_submit", user_prompt_event(str(lib.parent), prompt=PROMPT), env)
        )
    assert first is not None and second is not None
    reminder, recalled = first.split("\n\n")
    assert "## [TAG: " in reminder and str(lib / ".scratch.md") in reminder
    assert recalled == second == RECALLED  # the reminder once per session; recall every prompt
    assert "reminded; recall added 1 sessions" in hooks.log_lines()[0]


def test_the_reminder_survives_a_recall_failure(hooks, tmp_path):
    lib = make_library(tmp_path / "repo", {})
    url = f"http://127.0.0.1:{free_port()}"
    proc = hooks.run(
        "user_prompt_submit", user_prompt_event(str(lib.parent), prompt=PROMPT), _on(url)
    )
    text = _context(proc)
    assert text is not None and "## [TAG: " in text and HEADER not in text
    assert "reminded; recall failed" in hooks.log_lines()[-1]
