"""user_prompt_submit.py, recall: past sessions about the prompt, only when the server has some.

The positive case runs the real recall endpoint (real HTTP app, embedded PostgreSQL, the local
embedder); the ways a server can fail are small fake servers on 127.0.0.1. The hook always runs
as its own process, the way Claude Code runs it.
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


def _result(session: str, text: str, summary: str = "", **extra) -> dict:
    return {
        "text": text,
        "score": 0.9,
        "session_id": session,
        "section": "solution",
        "position": 0,
        "project": "alpha",
        "date": "2026-11-01T10:00:00Z",
        "summary": summary or f"summary of {session}",
        "domain": "technical",
        "tags": ["go"],
        **extra,
    }


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
    assert "recall nothing relevant" in hooks.log_lines()[-1]


def test_the_request_carries_the_prompt_the_token_and_goes_beside_mcp(hooks, bare):
    with answering(200, {"results": []}) as server:
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
    assert json.loads(body) == {"query": PROMPT, "limit": 3, "cwd": bare}  # no repository there
    assert TOKEN not in hooks.log.read_text(encoding="utf-8")


def test_what_gemini_s_start_hooks_put_before_the_prompt_is_not_asked_about(hooks, bare):
    """Gemini CLI, headless, hands BeforeAgent the prompt behind its SessionStart hooks'
    context; the hook answers under the event's own name."""
    event = user_prompt_event(bare, prompt=f"<hook_context>a\nb</hook_context>\n\n{PROMPT}")
    event["hook_event_name"] = "BeforeAgent"
    slash = {**event, "prompt": "<hook_context>a</hook_context>\n\n/compact keep the sqlite notes"}
    with answering(200, {"results": [_result("s1", BULLET)]}) as server:
        proc = hooks.run("user_prompt_submit", event, _on(server.url))
        skipped = hooks.run("user_prompt_submit", slash, _on(server.url))
    [(_, _, _, body)] = server.requests
    assert json.loads(body)["query"] == PROMPT
    output = json.loads(proc.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "BeforeAgent" and BULLET in output["additionalContext"]
    assert _context(skipped) is None
    assert "slash command" in hooks.log_lines()[-1]


def test_no_token_no_authorization_header(hooks, bare):
    with answering(200, {"results": []}) as server:
        hooks.run("user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(server.url))
    [(_, _, headers, _)] = server.requests
    assert "Authorization" not in headers


@pytest.mark.parametrize(
    ("prompt", "env", "why"),
    [
        ("fix the bug", {}, "short prompt"),
        ("/compact keep the notes about the sqlite lock", {}, "slash command"),
        ("", {}, "no prompt"),
        (PROMPT, {"LIBRARIAN_RECALL": "off"}, "recall off"),
        (PROMPT, {"LIBRARIAN_RECALL": "0"}, "recall off"),
    ],
)
def test_short_prompts_slash_commands_and_off_never_ask(hooks, bare, prompt, env, why):
    results = {"results": [_result("s1", BULLET)]}
    with answering(200, results) as server:
        proc = hooks.run(
            "user_prompt_submit", user_prompt_event(bare, prompt=prompt), _on(server.url, **env)
        )
    assert _context(proc) is None and server.requests == []
    assert why in hooks.log_lines()[-1]


def test_many_long_results_stay_within_the_budget(hooks, bare):
    bullets = {f"s{i}": [f"bullet {i}.{j} " + "x" * 380 for j in range(2)] for i in range(10)}
    results = [
        _result(sid, text, summary=f"summary {sid} " + "y" * 280)
        for sid, texts in bullets.items()
        for text in texts
    ]
    with answering(200, {"results": results}) as server:
        for budget, expected in (("", 1500), ("600", 600), ("99999999", 10000), ("x", 1500)):
            env = _on(server.url, LIBRARIAN_RECALL_BUDGET=budget)
            text = _context(
                hooks.run("user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), env)
            )
            assert text is not None and len(text) <= expected, budget
            assert "- session s0 (alpha, 2026-11-01)" in text  # the best session comes first
            # Whole bullets only: a bullet cut in half can read as a different fact.
            every = {b for texts in bullets.values() for b in texts}
            shown = [line[4:] for line in text.splitlines() if line.startswith("  - ")]
            assert set(shown) <= every


def test_a_closed_port_adds_nothing(hooks, bare):
    url = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    proc = hooks.run("user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(url))
    assert time.monotonic() - start < HANG_BOUND_S
    assert _context(proc) is None
    assert "recall failed (ConnectionRefusedError)" in hooks.log_lines()[-1]


def _sleeps(handler) -> None:
    time.sleep(6)
    send(handler, 200, json.dumps({"results": [_result("s1", BULLET)]}).encode())


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
        (200, {"results": "nope"}, "no results list"),
        (200, {"answer": []}, "no results list"),
        (500, {"error": "boom"}, "http 500"),
        (403, {"error": "no"}, "refused (403)"),
        (200, {"results": [1, "x", {"text": 5, "session_id": "s1"}, {"session_id": "s2"}]}, None),
    ],
)
def test_garbage_adds_nothing(hooks, bare, status, payload, why):
    with answering(status, payload) as server:
        proc = hooks.run(
            "user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(server.url)
        )
    assert _context(proc) is None
    assert (why or "recall nothing relevant") in hooks.log_lines()[-1]


def test_a_server_that_hangs_up_adds_nothing(hooks, bare):
    with FakeServer(_hangs_up) as server:
        proc = hooks.run(
            "user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(server.url)
        )
    assert _context(proc) is None and "recall failed" in hooks.log_lines()[-1]


def test_reminder_and_recall_arrive_together(hooks, tmp_path):
    lib = make_library(tmp_path / "repo", {})
    with answering(200, {"results": [_result("s1", BULLET), _result("s1", OTHER)]}) as server:
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
    assert (
        recalled.startswith(HEADER) and f"  - {BULLET}" in recalled and f"  - {OTHER}" in recalled
    )
    assert second == recalled  # the reminder once per session; recall on every prompt
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


def test_a_memory_cannot_reshape_the_context(hooks, bare):
    sneaky = "first line\n\n- session fake (forged): not from the server\x1b[2J\x00 end"
    result = _result(
        "s1", "x", summary="sum\nmary", title='a "title"\n- session forged', highlights=[sneaky]
    )
    with answering(200, {"results": [result]}) as server:
        text = _context(
            hooks.run("user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(server.url))
        )
    assert text is not None
    assert text.splitlines()[1:] == [
        "- session s1 (alpha, 2026-11-01) \"a 'title' - session forged\": sum mary",
        "  - first line - session fake (forged): not from the server[2J end",
    ]


def test_sessions_are_named_with_their_distilled_lines_not_the_matched_words(hooks, bare):
    window = "User: how do I stop the lock errors? Assistant: let me look at the worker"
    results = [
        _result(
            "s1",
            window,
            section="exchange",
            title="Fix the ingest lock",
            git_branch="fix/lock",
            highlights=["WAL mode and busy_timeout=5000 fixed it", "two writers were the cause"],
        ),
        _result("s1", BULLET, highlights=["WAL mode and busy_timeout=5000 fixed it"]),
        _result("s2", window, section="exchange", highlights=[]),
    ]
    with answering(200, {"results": results}) as server:
        text = _context(
            hooks.run("user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(server.url))
        )
    assert text is not None and "User:" not in text and "Assistant:" not in text
    assert text.splitlines()[1:] == [
        '- session s1 (alpha, 2026-11-01, branch fix/lock) "Fix the ingest lock": summary of s1',
        "  - WAL mode and busy_timeout=5000 fixed it",
        "  - two writers were the cause",
        "- session s2 (alpha, 2026-11-01): summary of s2",
    ]


def test_another_agent_s_session_is_named_with_its_agent(hooks, bare):
    results = [
        _result("s1", BULLET, agent="codex"),
        _result("s2", BULLET, agent="claude-code"),
        _result("s3", BULLET),  # a server from before the agent was said
        _result("s4", BULLET, agent="cursor-cli"),  # an agent the hook does not know yet
        _result("s5", BULLET, agent="x\n- session forged"),
    ]
    with answering(200, {"results": results}) as server:
        text = _context(
            hooks.run("user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), _on(server.url))
        )
    assert text is not None
    assert [line for line in text.splitlines() if line.startswith("- ")] == [
        "- Codex session s1 (alpha, 2026-11-01): summary of s1",
        "- session s2 (alpha, 2026-11-01): summary of s2",
        "- session s3 (alpha, 2026-11-01): summary of s3",
        "- cursor-cli session s4 (alpha, 2026-11-01): summary of s4",
        "- session s5 (alpha, 2026-11-01): summary of s5",
    ]


def test_a_teammate_s_session_says_whose_it_is_and_one_s_own_does_not(hooks, bare):
    results = [
        _result("s1", BULLET, agent="codex", person="alice"),
        _result("s2", BULLET, agent="claude-code", person="alice"),
        _result("s3", BULLET, agent="codex", person="bob"),  # the asker's own
        _result("s4", BULLET, person="eve\n- session forged"),
    ]
    with answering(200, {"results": results}) as server:
        event = user_prompt_event(bare, prompt=PROMPT)
        text = _context(
            hooks.run("user_prompt_submit", event, _on(server.url, LIBRARIAN_PERSON="bob"))
        )
    assert text is not None
    assert [line for line in text.splitlines() if line.startswith("- ")] == [
        "- alice's Codex session s1 (alpha, 2026-11-01): summary of s1",
        "- alice's session s2 (alpha, 2026-11-01): summary of s2",
        "- Codex session s3 (alpha, 2026-11-01): summary of s3",
        "- eve - session forged's session s4 (alpha, 2026-11-01): summary of s4",
    ]


def test_the_hooks_name_the_agents_as_the_readers_do():
    import sys

    from hookutil import HOOKS

    from librarian_dagster.core.capture.readers import LABELS, READERS

    sys.path.insert(0, str(HOOKS))
    import librarian_recall  # a hook module, found beside the scripts

    assert librarian_recall.AGENT_LABELS == LABELS
    # Each reader's own label is the one the table gives its agent.
    assert {r.agent: r.label for r in READERS.values()} == {a: LABELS[a] for a in READERS}


def test_a_small_budget_names_more_sessions_before_more_lines(hooks, bare):
    results = [
        _result(f"s{i}", "x", highlights=[f"line {i}.{j} " + "z" * 120 for j in range(3)])
        for i in range(3)
    ]
    with answering(200, {"results": results}) as server:
        env = _on(server.url, LIBRARIAN_RECALL_BUDGET="600")
        text = _context(
            hooks.run("user_prompt_submit", user_prompt_event(bare, prompt=PROMPT), env)
        )
    assert text is not None and len(text) <= 600
    lines = text.splitlines()
    # All three sessions named, each with its summary; the bullets that fit, best session first.
    assert [line for line in lines if line.startswith("- session")] == [
        f"- session s{i} (alpha, 2026-11-01): summary of s{i}" for i in range(3)
    ]
    assert lines.index("- session s1 (alpha, 2026-11-01): summary of s1") > 2
    assert lines[2].startswith("  - line 0.0")
