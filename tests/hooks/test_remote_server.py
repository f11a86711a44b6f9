"""The hooks as `librarian connect AGENT --server URL` writes them (`sh run-hook.sh --server=URL
...`), run for real against a server elsewhere that fails: one that accepts a connection and
never answers costs the agent its hook's deadline and no more, a port nobody listens on costs
nothing, and either way the hook exits 0 with nothing on stderr (the prompt goes through as it
was). The URL the configuration names is the one asked, over TLS for https."""

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from hookutil import FakeServer, HookRunner, send, user_prompt_event

from librarian_dagster.core.connect.agent import Where, run_hook
from tests.helpers import free_port

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "how did we fix the verbose flag parser last week"
RECALL_DEADLINE_S = 0.8  # the hooks' defaults (LIBRARIAN_RECALL_TIMEOUT_MS, _HISTORY_)
HISTORY_DEADLINE_S = 0.3
SLACK_S = 1.5
"""A process to start and a loaded test machine: a hang would cost the server's whole wait."""
TOKEN = "team-token-from-the-environment"


class Silent:
    """A server that accepts every connection and never answers: it reads what is sent (the
    first bytes of each connection are kept) and holds the connection open."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.first_bytes: list[bytes] = []
        self.held: list[socket.socket] = []

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.listener.accept()
                self.held.append(conn)
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    self.first_bytes.append(conn.recv(64))

    def __enter__(self) -> "Silent":
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.listener.close()
        for conn in self.held:
            conn.close()


def connected(hooks: HookRunner, url: str, script: str, agent: str, event: dict, **env: str):
    """Run `script` as the agent runs it once connected to `url`: the command `connect` writes,
    through a shell, with a LIBRARIAN_MCP_URL in the environment that the configuration
    overrides. (elapsed seconds, the finished process)."""
    where = Where(hooks.home, None, ROOT, url, {}, remote=True)
    command = run_hook(where, script, agent)
    environment = dict(hooks.env, LIBRARIAN_RECALL="on", LIBRARIAN_MCP_TOKEN=TOKEN,
                       LIBRARIAN_MCP_URL=f"http://127.0.0.1:{free_port()}/mcp",
                       XDG_CACHE_HOME=str(hooks.home / "cache"), **env)  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(["sh", "-c", command], input=json.dumps(event).encode(),
                          capture_output=True, env=environment, timeout=60)  # fmt: skip
    return time.monotonic() - start, proc


def _prompt(tmp_path: Path) -> dict:
    return user_prompt_event(str(tmp_path), prompt=PROMPT)


def _shell(tmp_path: Path) -> dict:
    """Codex's PreToolUse of a command that reads a file: its hook asks /touches first."""
    return {"session_id": "s-1", "cwd": str(tmp_path), "hook_event_name": "PreToolUse",
            "tool_name": "Bash", "tool_input": {"command": "cat cmd/main.go"}}  # fmt: skip


def _failed_open(proc: subprocess.CompletedProcess) -> None:
    """Exit 0, nothing on stderr, and no context: what the agent sees with no hook at all,
    or the hook's own reminder."""
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    assert b"Librarian remembers" not in proc.stdout
    if proc.stdout:
        json.loads(proc.stdout)


@pytest.mark.parametrize("agent", ["codex", "gemini", "copilot"])
def test_a_server_that_never_answers_costs_the_prompt_its_deadline_and_no_more(
    hooks, tmp_path, agent
):
    with Silent() as server:
        url = f"http://127.0.0.1:{server.port}/mcp"
        elapsed, proc = connected(hooks, url, "user_prompt_submit.py", agent, _prompt(tmp_path))
        _failed_open(proc)
        assert RECALL_DEADLINE_S - 0.05 < elapsed < RECALL_DEADLINE_S + SLACK_S, elapsed
        assert server.first_bytes and server.first_bytes[0].startswith(b"POST /recall ")
        # Left alone after the miss: the next prompt does not wait for it again.
        elapsed, proc = connected(hooks, url, "user_prompt_submit.py", agent, _prompt(tmp_path))
        _failed_open(proc)
        assert elapsed < RECALL_DEADLINE_S, elapsed
    lines = hooks.log_lines()
    assert "recall failed (timeout)" in lines[-2] and "server hung lately" in lines[-1], lines


def test_a_tool_s_hook_to_a_server_that_never_answers_costs_its_deadline(hooks, tmp_path):
    with Silent() as server:
        url = f"http://127.0.0.1:{server.port}/mcp"
        elapsed, proc = connected(hooks, url, "pre_tool_use.py", "codex", _shell(tmp_path))
    _failed_open(proc)
    assert elapsed < HISTORY_DEADLINE_S + SLACK_S, elapsed
    assert "touches failed (timeout)" in hooks.log_lines()[-1], hooks.log_lines()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_server_that_is_gone_costs_nothing_and_is_asked_again_next_time(hooks, tmp_path, scheme):
    url = f"{scheme}://127.0.0.1:{free_port()}/mcp"  # nobody listens there
    for _ in range(2):
        elapsed, proc = connected(hooks, url, "user_prompt_submit.py", "codex", _prompt(tmp_path))
        _failed_open(proc)
        assert elapsed < RECALL_DEADLINE_S, elapsed
    lines = hooks.log_lines()
    assert all("recall failed (ConnectionRefusedError)" in line for line in lines[-2:]), lines


def test_an_https_server_is_asked_over_tls_within_the_deadline(hooks, tmp_path):
    with Silent() as server:
        url = f"https://127.0.0.1:{server.port}/mcp"
        elapsed, proc = connected(hooks, url, "user_prompt_submit.py", "codex", _prompt(tmp_path))
    _failed_open(proc)
    assert elapsed < RECALL_DEADLINE_S + SLACK_S, elapsed
    # A TLS handshake record (0x16), never the prompt in clear.
    assert server.first_bytes and server.first_bytes[0][:1] == b"\x16", server.first_bytes
    assert PROMPT.encode() not in b"".join(server.first_bytes)


def test_the_server_the_configuration_names_is_asked_with_the_environment_s_token(hooks, tmp_path):
    answer = json.dumps({"context": None, "sessions": 0, "note": "nothing relevant"}).encode()
    with FakeServer(lambda handler: send(handler, 200, answer)) as server:
        _, proc = connected(hooks, server.url + "/mcp", "user_prompt_submit.py", "gemini",
                            _prompt(tmp_path))  # fmt: skip
    _failed_open(proc)
    [(method, path, headers, body)] = server.requests
    assert (method, path) == ("POST", "/recall")
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert json.loads(body)["prompt"] == PROMPT
    assert "recall none (nothing relevant)" in hooks.log_lines()[-1]
    assert os.environ.get("LIBRARIAN_MCP_TOKEN") != TOKEN  # the test's own, not the machine's
