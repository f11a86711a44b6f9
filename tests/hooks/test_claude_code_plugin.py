"""The real Claude Code CLI (from npm, installed by scripts/test) loading this plugin
(`--plugin-dir`), with a stand-in Messages API on 127.0.0.1 that asks it to Read a file: the
PreToolUse hook runs under hooks.json's matcher, and the file's history reaches the model next
to the tool's result. Skipped, saying so, without the CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from librarian_dagster.core.capture.touches import FileTouch
from mcp_server.app import Served, build_server, http_app
from tests.core.test_claude_code_digest import INSTALLED
from tests.core.test_store import memory_record
from tests.fake_anthropic import FakeAnthropic, message, tool_use
from tests.helpers import free_port, serve_http
from tests.mcp_server.test_tools import FakeEmbedder

ROOT = Path(__file__).resolve().parents[2]
REMEMBERED = "3c1d2e4f-0000-4000-8000-0000000000aa"


class ReadsOnce(FakeAnthropic):
    """Asks for a Read of `target` once, then answers in words."""

    target = ""

    def default(self, raw: bytes):
        body = json.loads(raw or b"{}")
        sent = json.dumps(body.get("messages", []))
        if "tool_result" in sent:
            return message("done")
        if any(t.get("name") == "Read" for t in body.get("tools") or []):
            return tool_use("Read", {"file_path": self.target})
        return message("ok")


@pytest.fixture
def claude() -> str:
    cli = Path(os.environ.get("LIBRARIAN_TEST_CLAUDE_CODE") or INSTALLED)
    if not cli.exists():
        pytest.skip(f"the Claude Code CLI is absent ({cli}): `bash scripts/test` installs it")
    return str(cli)


@pytest.mark.parametrize("how", ["plugin-dir", "librarian connect --server"])
def test_the_cli_loads_the_plugin_and_a_read_gets_the_files_history(claude, store, tmp_path, how):
    repo = tmp_path / "alpha"
    (repo / "cmd").mkdir(parents=True)
    target = repo / "cmd" / "main.go"
    target.write_text("package main\n")
    memory = memory_record(REMEMBERED, embedding_model=FakeEmbedder.model_name)
    memory = memory.model_copy(update={"cwd": "/elsewhere/alpha"})
    store.memories.replace_memory(memory, [], [FileTouch("/elsewhere/alpha/cmd/main.go", 2, 0)])
    home = tmp_path / "home"
    home.mkdir()
    plugin = ["--plugin-dir", str(ROOT)]
    port = free_port()
    if how.startswith("librarian connect"):  # the user's own settings turn the plugin on
        # With --server they name the server too (env.LIBRARIAN_MCP_URL): the shell does not.
        given = ["--server", f"http://127.0.0.1:{port}"] if how.endswith("--server") else []
        connected = subprocess.run(
            [sys.executable, "-m", "librarian_dagster.cli.main", "connect", "claude-code",
             *given],
            env={**os.environ, "HOME": str(home), "LIBRARIAN_HOME": str(tmp_path / "lib")},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert connected.returncode == 0, connected.stderr
        plugin = []
    app = http_app(build_server(Served.of(store, FakeEmbedder())), "127.0.0.1")
    with serve_http(app, port) as url, ReadsOnce() as api:
        api.target = str(target)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("ANTHROPIC_", "CLAUDE", "LIBRARIAN_"))}  # fmt: skip
        env.update({
            "HOME": str(home), "ANTHROPIC_BASE_URL": api.url, "DISABLE_TELEMETRY": "1",
            "ANTHROPIC_API_KEY": "sk-ant-stand-in-for-the-login",
            "LIBRARIAN_LOG": str(tmp_path / "hooks.log"),
            # Slack for a busy test machine: the server's first answer here is a cold one.
            "LIBRARIAN_RECALL_TIMEOUT_MS": "5000", "LIBRARIAN_HISTORY_TIMEOUT_MS": "5000",
        })  # fmt: skip
        if not how.endswith("--server"):
            env["LIBRARIAN_MCP_URL"] = url + "/mcp"
        done = subprocess.run(
            [claude, "-p", "look at cmd/main.go and tell me what it does", *plugin,
             "--model", "claude-haiku-4-5"],
            cwd=repo, env=env, capture_output=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        calls = [c.json for c in api.calls() if c.path.startswith("/v1/messages")]
    log = (tmp_path / "hooks.log").read_text(encoding="utf-8")
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:], log)
    assert "pre_tool_use" in log and "history added 1 sessions" in log, log
    after_read = [c for c in calls if "tool_result" in json.dumps(c.get("messages", []))]
    assert after_read, calls
    assert REMEMBERED in json.dumps(after_read[0]["messages"])
