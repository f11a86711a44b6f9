"""pre_tool_use.py, file history: at the first Read or edit of a file in a session, the earlier
sessions that changed it, from the recall server, or nothing.

The positive cases run the real `POST /history` (real HTTP app, embedded PostgreSQL); the ways a
server can fail are small fake servers on 127.0.0.1. The hook always runs as its own process
with the event on stdin, the way Claude Code runs it.
"""

import json
import os
import time
from pathlib import Path

import pytest
from hookutil import FakeServer, answering, make_library, pre_tool_use_event, send

from librarian_dagster.core.capture.touches import FileTouch
from mcp_server.app import Served, build_server, http_app
from tests.core.test_store import memory_record
from tests.helpers import free_port, serve_http
from tests.mcp_server.test_tools import FakeEmbedder

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


HEADER = "Librarian remembers earlier sessions that worked on"
HANG_BOUND_S = 3.0  # a hang, not a performance number: the deadline is 0.3 s
NEWEST = "7f8e9d10-0000-4000-8000-00000000000a"
OLDER = "7f8e9d10-0000-4000-8000-00000000000b"


def _context(proc) -> str | None:
    assert proc.returncode == 0, proc.stderr
    if not proc.stdout:
        return None
    output = json.loads(proc.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "PreToolUse"
    # Context only: never a permission decision, never a changed input.
    assert set(output) == {"hookEventName", "additionalContext"}
    return output["additionalContext"]


def _on(url: str, **extra) -> dict:
    return {
        "LIBRARIAN_RECALL": "on",
        "LIBRARIAN_MCP_URL": url + "/mcp",
        **extra,
    }


@pytest.fixture
def repo(tmp_path):
    """Where the asking session works: another machine's checkout of the remembered `alpha`."""
    folder = tmp_path / "alpha"
    (folder / "cmd").mkdir(parents=True)
    return folder


@pytest.fixture
def served(store):
    """The real recall server, remembering two sessions that changed alpha's cmd/main.go (from
    another machine, one in a worktree) and one that changed beta's."""
    rows = [
        (OLDER, "/src/alpha", "/src/alpha/cmd/main.go", 5, "alpha"),
        (NEWEST, "/src/alpha/.worktrees/2", "/src/alpha/.worktrees/2/cmd/main.go", 1, "alpha"),
        ("beta-session", "/src/beta", "/src/beta/cmd/main.go", 0, "beta"),
    ]
    for sid, cwd, path, days_ago, project in rows:
        memory = memory_record(
            sid,
            project=project,
            days_ago=days_ago,
            embedding_model=FakeEmbedder.model_name,
            agent="codex" if sid == OLDER else "claude-code",
        ).model_copy(update={"person": "alice" if sid == OLDER else "bob"})
        digest = memory.digest.model_copy(update={"solution": ["Made main.go read the flag once"]})
        memory = memory.model_copy(update={"cwd": cwd, "digest": digest, "git_branch": "feat/x"})
        store.memories.replace_memory(memory, [], [FileTouch(path, 2, 1)])
    # Bob's server: his sessions are named plainly, a teammate's as theirs.
    app = http_app(build_server(Served.of(store, FakeEmbedder()), own_person="bob"), "127.0.0.1")
    with serve_http(app, free_port()) as url:
        yield url


def _read(repo, name="cmd/main.go", **kwargs):
    return pre_tool_use_event(str(repo / name), str(repo), tool="Read", **kwargs)


def test_the_first_read_names_the_sessions_that_changed_the_file(hooks, served, repo):
    text = _context(hooks.run("pre_tool_use", _read(repo), _on(served)))
    assert text is not None and text.startswith(HEADER)
    # Full ids, the most recent first; the other project's cmd/main.go is another file.
    assert text.index(NEWEST) < text.index(OLDER)
    assert "beta-session" not in text
    assert "branch feat/x" in text and "changed it (2 edits)" in text
    assert "Made main.go read the flag once" in text
    # Alice's Codex changed it too: Bob, in Claude Code, is told whose session that was.
    assert f"\n- alice's Codex session {OLDER} (" in text and f"\n- session {NEWEST} (" in text
    assert "history added 2 sessions" in hooks.log_lines()[-1]


def test_once_per_file_per_agent_of_a_session(hooks, served, repo):
    env = _on(served)
    assert _context(hooks.run("pre_tool_use", _read(repo), env))
    assert _context(hooks.run("pre_tool_use", _read(repo), env)) is None
    assert "history seen" in hooks.log_lines()[-1]
    # The edit that follows the Read is no new touch; another session, or a subagent (whose
    # context is its own), is.
    edit = pre_tool_use_event(str(repo / "cmd/main.go"), str(repo), tool="Edit")
    assert _context(hooks.run("pre_tool_use", edit, env)) is None
    assert _context(hooks.run("pre_tool_use", _read(repo, session="other"), env))
    agent = dict(_read(repo), agent_id="agent-a52886dc180afb356", agent_type="Explore")
    assert _context(hooks.run("pre_tool_use", agent, env))


def test_a_file_no_session_touched_adds_nothing(hooks, served, repo):
    assert _context(hooks.run("pre_tool_use", _read(repo, "cmd/new.go"), _on(served))) is None
    assert "history none" in hooks.log_lines()[-1]


def test_an_edit_gets_its_library_notes_first_then_the_history(hooks, served, repo):
    make_library(repo, {"cmd/tech.md": "- flags are parsed once"})
    edit = pre_tool_use_event(str(repo / "cmd/main.go"), str(repo), tool="Edit")
    text = _context(hooks.run("pre_tool_use", edit, _on(served)))
    assert text is not None
    assert text.index("- flags are parsed once") < text.index(HEADER) < text.index(NEWEST)


def test_the_request_carries_the_transcript_the_root_and_the_token(hooks, repo, tmp_path):
    (repo / ".git").mkdir()
    transcript = tmp_path / "session.jsonl"
    event = dict(_read(repo), transcript_path=str(transcript), agent_id="a52886dc")
    with answering(200, {"context": None, "sessions": 0}) as server:
        hooks.run("pre_tool_use", event, _on(server.url, LIBRARIAN_MCP_TOKEN="tok-x"))
    [(method, path, headers, body)] = server.requests
    assert (method, path) == ("POST", "/history")
    assert headers["Authorization"] == "Bearer tok-x"
    assert json.loads(body) == {
        "path": str(repo / "cmd/main.go"),
        "limit": 3,
        "cwd": str(repo),
        "root": str(repo),
        "transcript_path": str(transcript),
        "subagent": "a52886dc",
        "session_id": "abc123",
    }


@pytest.mark.parametrize("env", [{"LIBRARIAN_HISTORY": "off"}, {"LIBRARIAN_RECALL": "off"}])
def test_its_own_setting_or_recall_off_never_asks(hooks, repo, env):
    with answering(200, {"results": []}) as server:
        hooks.run("pre_tool_use", _read(repo), {**_on(server.url), **env})
    assert server.requests == []
    assert "history off" in hooks.log_lines()[-1]


def test_a_closed_port_adds_nothing_and_is_asked_again_next_time(hooks, repo):
    env = _on(f"http://127.0.0.1:{free_port()}")
    proc = hooks.run("pre_tool_use", _read(repo), env)
    assert _context(proc) is None
    assert "history failed (ConnectionRefusedError)" in hooks.log_lines()[-1]
    # A refusal costs milliseconds: the same file (its touch given back) is asked about again.
    assert _context(hooks.run("pre_tool_use", _read(repo), env)) is None
    assert "history failed (ConnectionRefusedError)" in hooks.log_lines()[-1]


def _sleeps(handler) -> None:
    time.sleep(6)
    send(handler, 200, b'{"results": []}')


def test_a_hanging_server_is_abandoned_at_the_deadline_then_left_alone(hooks, repo):
    with FakeServer(_sleeps) as server:
        start = time.monotonic()
        proc = hooks.run("pre_tool_use", _read(repo), _on(server.url))
        elapsed = time.monotonic() - start
        assert _context(proc) is None and elapsed < HANG_BOUND_S, elapsed
        assert "history failed (timeout)" in hooks.log_lines()[-1]
        # A missed deadline leaves the server alone for a while: nothing asked again.
        for name in ("cmd/other.go", "cmd/third.go", "cmd/fourth.go"):
            hooks.run("pre_tool_use", _read(repo, name), _on(server.url))
        assert "server hung lately" in hooks.log_lines()[-1]
    assert len(server.requests) == 1


def _mark(hooks, misses: int, ago_s: float) -> Path:
    (hooks.home / "state").mkdir(exist_ok=True)
    hooks.env["LIBRARIAN_STATE_DIR"] = str(hooks.home / "state")
    mark = hooks.home / "state" / ".history-unreachable"
    mark.write_text(str(misses))
    when = time.time() - ago_s
    os.utime(mark, (when, when))
    return mark


@pytest.mark.parametrize(("misses", "ago_s", "asked"), [
    (1, 20, False), (1, 40, True),      # one miss: left alone 30 s
    (2, 40, False), (2, 70, True),      # two in a row: 60 s
    (5, 470, False), (5, 490, True),    # five: 8 min
    (9, 590, False), (9, 610, True),    # never longer than 10 min
])  # fmt: skip
def test_a_server_that_kept_missing_deadlines_is_left_alone_longer(
    hooks, served, repo, misses, ago_s, asked
):
    mark = _mark(hooks, misses, ago_s)
    proc = hooks.run("pre_tool_use", _read(repo), _on(served))
    assert bool(_context(proc)) is asked
    if asked:  # the answer clears the mark
        assert not mark.exists()
    else:
        assert "server hung lately" in hooks.log_lines()[-1] and mark.read_text() == str(misses)


@pytest.mark.parametrize(
    ("status", "payload", "why"),
    [
        (200, b"<html>not json</html>", "not JSON"),
        (200, [1, 2], "not an object"),
        (200, {"context": 5}, "not a context"),
        (200, {"context": "x" * 10_001, "sessions": 1}, "not a context"),
        (500, {"error": "boom"}, "http 500"),
        (401, {"error": "no"}, "refused (401)"),
        (200, {"results": [{"session_id": NEWEST}]}, "history none"),
    ],
)
def test_garbage_adds_nothing(hooks, repo, status, payload, why):
    with answering(status, payload) as server:
        proc = hooks.run("pre_tool_use", _read(repo), _on(server.url))
    assert _context(proc) is None
    assert why in hooks.log_lines()[-1]


def test_the_hook_asks_in_http_1_0_so_no_answer_comes_chunked(hooks, repo):
    versions = []
    answer = json.dumps({"context": f"{HEADER} cmd/main.go:\n- session {NEWEST}", "sessions": 1})

    def respond(handler) -> None:
        versions.append(handler.request_version)
        send(handler, 200, answer.encode())

    with FakeServer(respond) as server:
        text = _context(hooks.run("pre_tool_use", _read(repo), _on(server.url)))
    assert versions == ["HTTP/1.0"] and text is not None and NEWEST in text


def _cut_short(handler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "1000")
    handler.end_headers()
    handler.wfile.write(b'{"context": "Librarian')  # and hangs up


def test_an_answer_cut_short_adds_nothing(hooks, repo):
    with FakeServer(_cut_short) as server:
        assert _context(hooks.run("pre_tool_use", _read(repo), _on(server.url))) is None
    assert "history failed (answer cut short)" in hooks.log_lines()[-1]


def test_plain_http_does_not_load_the_http_client(hooks, repo, tmp_path):
    """Speed: `http.client` costs ~32 ms to import; loopback HTTP goes over a socket."""
    import subprocess
    import sys

    from hookutil import HOOKS

    probe = (
        "import sys, os; sys.path.insert(0, sys.argv[1]); import pre_tool_use; "
        "event = {'session_id': 's', 'tool_name': 'Read', 'cwd': sys.argv[2], "
        "'tool_input': {'file_path': sys.argv[2] + '/cmd/main.go'}}; "
        "env = dict(os.environ, LIBRARIAN_RECALL='on', LIBRARIAN_MCP_URL=sys.argv[3]); "
        "out, _ = pre_tool_use.handle(event, env); assert out, 'nothing added'; "
        "print('http.client' in sys.modules)"
    )
    with answering(200, {"context": f"{HEADER} x:\n- session {NEWEST}", "sessions": 1}) as s:
        proc = subprocess.run(
            [sys.executable, "-E", "-S", "-c", probe, str(HOOKS), str(repo), s.url + "/mcp"],
            capture_output=True, env=hooks.env, timeout=60,
        )  # fmt: skip
    assert proc.stdout.split() == [b"False"], proc.stderr


def _codex(repo, tool: str, command: str, session="codex-1") -> dict:
    """A PreToolUse event as Codex sends it: the shell as `Bash`, a patch as `apply_patch`."""
    return {
        "session_id": session,
        "turn_id": "t1",
        "transcript_path": None,
        "cwd": str(repo),
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {"command": command},
    }


def test_a_codex_shell_read_gets_the_files_history_once(hooks, served, repo):
    env = _on(served)
    read = _codex(repo, "Bash", "sed -n 1,40p cmd/main.go")
    text = _context(hooks.run("pre_tool_use", read, env, args=["codex"]))
    assert text is not None and NEWEST in text and HEADER in text
    assert _context(hooks.run("pre_tool_use", read, env, args=["codex"])) is None
    assert "history seen" in hooks.log_lines()[-1]
    # A command that reads no file asks nothing more than what it touches.
    assert _context(hooks.run("pre_tool_use", _codex(repo, "Bash", "go test ./..."), env,
                              args=["codex"])) is None  # fmt: skip
    assert "run of 0 files" in hooks.log_lines()[-1]


def test_a_codex_patch_gets_the_history_of_its_first_new_file(hooks, served, repo):
    patch = (
        "*** Begin Patch\n*** Add File: cmd/new.go\n+package main\n"
        "*** Update File: cmd/main.go\n@@\n-a\n+b\n*** End Patch\n"
    )
    env = _on(served)
    text = _context(hooks.run("pre_tool_use", _codex(repo, "apply_patch", patch), env,
                              args=["codex"]))  # fmt: skip
    assert text is None  # cmd/new.go: remembered by no session
    again = _context(hooks.run("pre_tool_use", _codex(repo, "apply_patch", patch), env,
                               args=["codex"]))  # fmt: skip
    assert again is not None and NEWEST in again and "cmd/main.go" in again


def test_a_codex_hook_with_the_server_down_adds_nothing(hooks, repo):
    env = _on(f"http://127.0.0.1:{free_port()}")
    proc = hooks.run("pre_tool_use", _codex(repo, "Bash", "cat cmd/main.go"), env, args=["codex"])
    assert _context(proc) is None
    assert "touches failed (ConnectionRefusedError)" in hooks.log_lines()[-1]


def test_a_checkout_named_otherwise_is_its_repository_by_the_remote_in_its_git_config(
    hooks, served, tmp_path
):
    """Bob's checkout of `alpha` is `20260205-alpha`: its name alone is another repository's;
    the remote its git config names (sent without the credential in it) is alpha's."""
    folder = tmp_path / "20260205-alpha"
    (folder / "cmd").mkdir(parents=True)
    assert _context(hooks.run("pre_tool_use", _read(folder), _on(served))) is None
    (folder / ".git").mkdir()
    (folder / ".git" / "config").write_text(
        '[core]\n\tbare = false\n[remote "origin"]\n'
        "\turl = https://bob:ghp_notsent@github.com/acme/alpha.git\n"
        "\tfetch = +refs/heads/*:refs/remotes/origin/*\n"
    )
    text = _context(hooks.run("pre_tool_use", _read(folder, session="s-2"), _on(served)))
    assert text is not None and f"\n- alice's Codex session {OLDER} (" in text


def test_the_remote_sent_is_the_origin_without_a_user_or_password(tmp_path):
    import sys

    from hookutil import HOOKS

    sys.path.insert(0, str(HOOKS))
    try:
        import librarian_memory as memory
    finally:
        sys.path.remove(str(HOOKS))
    main = tmp_path / "main"
    (main / ".git" / "worktrees" / "w").mkdir(parents=True)
    (main / ".git" / "config").write_text(
        '[remote "upstream"]\n url = git@github.com:other/alpha.git\n'
        '[remote "origin"]\n url = https://bob:tok@github.com/acme/alpha.git\n'
    )
    (main / ".git" / "worktrees" / "w" / "commondir").write_text("../..\n")
    worktree = tmp_path / "w"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {main / '.git' / 'worktrees' / 'w'}\n")
    assert memory.git_remote(memory.git(str(main))[1]) == "https://github.com/acme/alpha.git"
    assert memory.git_remote(memory.git(str(worktree))[1]) == "https://github.com/acme/alpha.git"
    assert memory.git(str(tmp_path)) == (None, None)
