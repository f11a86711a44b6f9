"""Helpers for the hook tests: run the hook scripts as Claude Code does, as a separate process
with the event JSON on stdin.

Every test gets its own HOME, log file and state folder, so nothing touches the real ~/.claude.
The interpreter runs with `-E -S`, as hooks.json does: no site-packages, so a hook that imported
anything outside the standard library would fail here. Prompt recall is off unless a test turns
it on: a recall server someone runs on the default port must not leak into other tests.
"""

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from tests.local_server import POLL_S

REPO = Path(__file__).resolve().parents[2]
HOOKS = REPO / "hooks"
TRANSCRIPT = "/Users/.../.claude/projects/.../00893aaf-19fa-41d2-8238-13269b9b3ca0.jsonl"


class HookRunner:
    def __init__(self, tmp_path: Path):
        self.home = tmp_path / "home"
        self.home.mkdir()
        self.log = tmp_path / "librarian.log"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("LIBRARIAN_", "CLAUDE_", "PYTHON"))
        }
        self.env.update({"HOME": str(self.home), "USERPROFILE": str(self.home)})
        self.env["LIBRARIAN_LOG"] = str(self.log)
        self.env["LIBRARIAN_RECALL"] = "off"

    def run(
        self, name: str, event, extra_env=None, cwd=None, args=()
    ) -> subprocess.CompletedProcess:
        env = dict(self.env, **(extra_env or {}))
        stdin = event if isinstance(event, bytes | str) else json.dumps(event)
        if isinstance(stdin, str):
            stdin = stdin.encode("utf-8")
        return subprocess.run(
            [sys.executable, "-E", "-S", str(HOOKS / f"{name}.py"), *args],
            input=stdin,
            capture_output=True,
            env=env,
            cwd=cwd or str(self.home),
            timeout=60,
        )

    def popen(self, name: str, stdin) -> subprocess.Popen:
        """Start a hook reading its event from an open file, without waiting for it."""
        proc = subprocess.Popen(
            [sys.executable, "-E", "-S", str(HOOKS / f"{name}.py")],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=str(self.home),
        )
        return proc

    def log_lines(self) -> list[str]:
        if not self.log.exists():
            return []
        return self.log.read_text(encoding="utf-8").splitlines()


# Event shapes verbatim from FORMATS.md section 2, with paths filled in by the tests.


def pre_tool_use_event(file_path: str, cwd: str, tool: str = "Edit", session="abc123") -> dict:
    if tool == "NotebookEdit":
        tool_input = {"notebook_path": file_path, "new_source": "x = 1", "cell_type": "code"}
    elif tool == "Write":
        tool_input = {"file_path": file_path, "content": "..."}
    elif tool == "MultiEdit":
        tool_input = {"file_path": file_path, "edits": [{"old_string": "a", "new_string": "b"}]}
    else:
        tool_input = {"file_path": file_path, "old_string": "a", "new_string": "b"}
    return {
        "session_id": session,
        "prompt_id": "550e8400-e29b-41d4-a716-446655440000",
        "transcript_path": "/home/user/.claude/projects/.../transcript.jsonl",
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": "toolu_01ABC123...",
    }


def user_prompt_event(
    cwd: str,
    session="abc123",
    prompt="Write a function to calculate the factorial of a number",
) -> dict:
    return {
        "session_id": session,
        "transcript_path": TRANSCRIPT,
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "UserPromptSubmit",
        "prompt": prompt,
    }


def stop_event(cwd: str, session="abc123", active=False) -> dict:
    return {
        "session_id": session,
        "transcript_path": "~/.claude/projects/.../00893aaf-19fa-41d2-8238-13269b9b3ca0.jsonl",
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": active,
        "last_assistant_message": "I've completed the refactoring. Here's a summary...",
        "background_tasks": [
            {
                "id": "task-001",
                "type": "shell",
                "status": "running",
                "description": "tail logs",
                "command": "tail -f /var/log/syslog",
            }
        ],
        "session_crons": [
            {
                "id": "cron-001",
                "schedule": "0 9 * * 1-5",
                "recurring": True,
                "prompt": "check the build",
            }
        ],
    }


def old_stop_event(session="abc123") -> dict:
    """The 2025-10 shape: no cwd, no last_assistant_message."""
    return {
        "session_id": session,
        "transcript_path": "~/.claude/projects/.../00893aaf-19fa-41d2-8238-13269b9b3ca0.jsonl",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
    }


def make_library(root: Path, notes: dict[str, str]) -> Path:
    """Create `root/_memory_library` with notes given as {library-relative path: text}."""
    lib = root / "_memory_library"
    lib.mkdir(parents=True, exist_ok=True)
    for rel, text in notes.items():
        path = lib / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return lib


class FakeServer:
    """A small HTTP server on 127.0.0.1 for the ways a recall server can fail.

    `respond(handler)` writes the whole answer; every request is recorded as (method, path,
    headers, body) first, so a test can check what the hook sent, or that it sent nothing.
    """

    def __init__(self, respond):
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                fake.requests.append((self.command, self.path, dict(self.headers), body))
                # The hook may give up and hang up first: expected in the deadline tests.
                with contextlib.suppress(OSError):
                    respond(self)

            def log_message(self, format, *args):  # keep pytest's output clean
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> "FakeServer":
        threading.Thread(target=self.httpd.serve_forever, args=(POLL_S,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def send(handler, status: int, body: bytes, content_type="application/json") -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


@contextlib.contextmanager
def answering(status: int, payload):
    """A fake server that gives every request the same answer (bytes as they are, else JSON)."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
    with FakeServer(lambda h: send(h, status, body)) as server:
        yield server
