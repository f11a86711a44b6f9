"""GitHub Copilot CLI's real binary (npm `@github/copilot`, pinned) run with no GitHub sign-in,
offline, against a stand-in OpenAI Chat Completions API (its BYOK mode:
COPILOT_PROVIDER_BASE_URL, COPILOT_OFFLINE), with command hooks in ~/.copilot/hooks/: the
`additionalContext` each prints reaches the model, at the prompt (`userPromptSubmitted`: the
prompt gets a `<system_reminder>`), before a tool (`preToolUse`: a user message after the
tool's result) and after it (`postToolUse`: appended to the tool's result); and the session it
writes (~/.copilot/session-state/<id>/events.jsonl) is read by our reader. Then the whole of it:
`librarian connect copilot`, the real recall server and the real CLI, Librarian's own hooks
handing the model recall and a file's history, and its MCP tools.

The binary unpacks its JavaScript and native runtime (235 MB) into COPILOT_PKG_CACHE_HOME/pkg/
once per version: the test keeps that beside the install, not in each test's HOME.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from librarian_dagster.core.capture import readers
from tests.fake_openai_chat import FakeOpenAIChat, text, tool_call

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

ROOT = Path(__file__).resolve().parents[2]
VERSION = "1.0.102"
INSTALL = ROOT / ".tools" / "agents" / "copilot"
INSTALLED = INSTALL / "node_modules" / ".bin" / "copilot"
PROMPT_CONTEXT = "LIBRARIAN-PROMPT-CONTEXT: the cache lock is released in teardown"

HOOK = r"""
import json, os, sys


event = sys.argv[1]
given = json.loads(sys.stdin.read() or "{}")
with open(os.environ["PROBE_LOG"], "a") as log:
    log.write(json.dumps({"event": event, "input": given}) + "\n")
if event == "userPromptSubmitted":
    print(json.dumps({"additionalContext": os.environ["PROBE_PROMPT_CONTEXT"]}))
elif event in ("preToolUse", "postToolUse") and given.get("toolName") in ("view", "edit"):
    where = given["toolArgs"].get("path", "")
    print(json.dumps({"additionalContext": f"LIBRARIAN-{event} {given['toolName']} {where}"}))
else:
    print("{}")
"""


@pytest.fixture
def copilot() -> str:
    named = os.environ.get("LIBRARIAN_TEST_COPILOT")
    cli = Path(named) if named else INSTALLED
    if not cli.exists():
        pytest.skip(
            f"the Copilot CLI is absent ({cli}): npm install --prefix .tools/agents/copilot "
            f"@github/copilot@{VERSION}"
        )
    return str(cli)


def write_hooks(home: Path, script: Path) -> None:
    """User-level hooks (no folder trust needed): ~/.copilot/hooks/*.json, camelCase events."""
    events = ["userPromptSubmitted", "preToolUse", "postToolUse"]
    hooks = {
        event: [
            {"type": "command", "bash": f"'{sys.executable}' '{script}' {event}", "timeoutSec": 30}
        ]
        for event in events
    }
    folder = home / ".copilot" / "hooks"
    folder.mkdir(parents=True)
    (folder / "librarian.json").write_text(json.dumps({"version": 1, "hooks": hooks}))


def copilot_env(base_url: str, home: Path) -> dict[str, str]:
    """Copilot with no sign-in, offline, its model the stand-in at `base_url` (BYOK)."""
    drop = ("COPILOT_", "GH_", "GITHUB_", "LIBRARIAN_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        HOME=str(home),
        COPILOT_OFFLINE="true",
        COPILOT_PROVIDER_BASE_URL=f"{base_url}/v1",
        COPILOT_PROVIDER_API_KEY="sk-stand-in",
        COPILOT_MODEL="stand-in-model",
        COPILOT_AUTO_UPDATE="false",
        COPILOT_PKG_CACHE_HOME=str(INSTALL / "cache"),
    )
    return env


def run_copilot(cli: str, base_url: str, home: Path, project: Path, log: Path, prompt: str):
    env = copilot_env(base_url, home)
    env.update(PROBE_LOG=str(log), PROBE_PROMPT_CONTEXT=PROMPT_CONTEXT)
    command = [cli, "-p", prompt, "--allow-all-tools", "--no-auto-update", "-s"]
    return subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=180
    )


def test_hook_context_reaches_the_model_at_the_prompt_and_around_a_read_and_an_edit(
    copilot, tmp_path
):
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    home.mkdir()
    notes = project / "notes.txt"
    notes.write_text("the cache lock is held\n")
    script = tmp_path / "hook.py"
    script.write_text(HOOK)
    write_hooks(home, script)
    log = tmp_path / "hooks.jsonl"
    with FakeOpenAIChat() as fake:
        fake.script += [
            tool_call("view", {"path": str(notes)}, "call_view"),
            tool_call(
                "edit",
                {"path": str(notes), "old_str": "is held", "new_str": "is released"},
                "call_edit",
            ),
            text("Released the lock."),
        ]
        done = run_copilot(copilot, fake.url, home, project, log, "Release the cache lock")
        turns = fake.agent_turns()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Released the lock." in done.stdout
    assert notes.read_text() == "the cache lock is released\n"
    assert len(turns) == 3

    prompt = [m for m in turns[0]["messages"] if m["role"] == "user"][-1]["content"]
    assert "Release the cache lock" in prompt
    assert prompt.endswith(f"<system_reminder>\n{PROMPT_CONTEXT}\n</system_reminder>")

    after_view = turns[1]["messages"]
    result = next(m for m in after_view if m.get("tool_call_id") == "call_view")
    assert result["content"].startswith("the cache lock is held")
    assert result["content"].endswith(
        'Tool "view" succeeded. Additional guidance from postToolUse hooks:\n'
        f"LIBRARIAN-postToolUse view {notes}"
    )
    assert after_view[-1] == {
        "role": "user",
        "content": f"Additional context from preToolUse hook:\nLIBRARIAN-preToolUse view {notes}",
    }
    edited = next(m for m in turns[2]["messages"] if m.get("tool_call_id") == "call_edit")
    assert edited["content"].endswith(f"LIBRARIAN-postToolUse edit {notes}")

    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["event"] for c in calls] == [
        "userPromptSubmitted",
        "preToolUse",
        "postToolUse",
        "preToolUse",
        "postToolUse",
    ]
    submitted = calls[0]["input"]
    assert submitted["prompt"] == "Release the cache lock"
    assert submitted["cwd"] == str(project) and submitted["sessionId"]
    edit = calls[3]["input"]
    assert (edit["toolName"], edit["toolArgs"]["old_str"]) == ("edit", "is held")
    assert calls[4]["input"]["toolResult"]["resultType"] == "success"

    # The session Copilot wrote, as our reader reads it: the prompt as typed.
    events = home / ".copilot" / "session-state" / submitted["sessionId"] / "events.jsonl"
    sessions = readers.session_files_for([events])
    assert [s.agent for s in sessions] == ["copilot"]
    session = readers.parse_session(sessions[0])
    assert session.skip_reason is None
    assert [t.text for t in session.turns if t.kind == "prompt"] == ["Release the cache lock"]
    assert session.stats.tool_uses == 2


def test_the_cli_is_the_pinned_version(copilot, tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "COPILOT_PKG_CACHE_HOME": str(INSTALL / "cache")}
    out = subprocess.run(
        [copilot, "--version"], capture_output=True, text=True, timeout=120, env=env
    )
    assert f"GitHub Copilot CLI {VERSION}" in out.stdout


REMEMBERED = "019e0000-aaaa-7000-8000-0000000000cc"
EARLIER = (
    "Fixed the flag parser in cmd/main.go: a repeated --verbose flag now counts up instead of "
    "failing with 'flag redefined'."
)
RECALL = "Librarian remembers past sessions that may bear on this prompt"
HISTORY = "Librarian remembers earlier sessions that worked on cmd/main.go"


@pytest.fixture(scope="module")
def embedder():
    from librarian_dagster.core.models.minilm import local_embedder

    model = local_embedder()
    model.embed_query("warm up")  # the first query pays for loading the weights
    return model


def test_librarian_connect_hands_copilot_recall_and_file_history(
    copilot, tmp_path, store, embedder
):
    """`librarian connect copilot --server URL` into a Copilot home that has the user's own MCP
    servers: the real CLI then runs Librarian's hooks, the model is told of an earlier session
    for a prompt about earlier work and, after it views the file that session changed, that
    session again; the MCP server is Copilot's too. The server is the configuration's alone (the
    hooks' own tests ask the one LIBRARIAN_MCP_URL names; tests/core/test_connect_copilot.py
    writes this machine's). Undone, the user's files are the bytes they were."""
    from librarian_dagster.core.capture.touches import FileTouch
    from librarian_dagster.core.store.memories import ChunkRecord
    from mcp_server.app import Served, build_server, http_app
    from tests.core.test_store import memory_record
    from tests.helpers import free_port, serve_http

    home, workspace = tmp_path / "home", tmp_path / "workspace"
    (workspace / "cmd").mkdir(parents=True)
    main_go = workspace / "cmd" / "main.go"
    main_go.write_text("package main\n")
    memory = memory_record(REMEMBERED, project="workspace", embedding_model=embedder.model_name)
    memory = memory.model_copy(update={"cwd": "/elsewhere/workspace", "agent": "claude-code"})
    [vector] = embedder.embed_documents([EARLIER])
    store.memories.replace_memory(
        memory,
        [ChunkRecord("solution", 0, EARLIER, vector)],
        [FileTouch("/elsewhere/workspace/cmd/main.go", 2, 0)],
    )
    users_mcp = home / ".copilot" / "mcp-config.json"
    users_mcp.parent.mkdir(parents=True)
    users_mcp.write_text(
        '{"mcpServers": {"mine": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}}\n'
    )
    before = users_mcp.read_bytes()
    log = tmp_path / "librarian.log"
    connect = [sys.executable, "-m", "librarian_dagster.cli.main", "connect", "copilot"]
    app = http_app(build_server(Served.of(store, embedder)), "127.0.0.1")
    port = free_port()
    with serve_http(app, port) as url, FakeOpenAIChat() as fake:
        env = copilot_env(fake.url, home)
        env.update(LIBRARIAN_HOME=str(home / "librarian"), LIBRARIAN_LOG=str(log),
                   LIBRARIAN_RECALL_TIMEOUT_MS="5000",
                   LIBRARIAN_HISTORY_TIMEOUT_MS="5000")  # fmt: skip
        done = subprocess.run([*connect, "--server", url], env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        check = subprocess.run([*connect[:-1], "--check", "copilot"], env=env,
                               capture_output=True, text=True, timeout=120)  # fmt: skip
        assert check.returncode == 0, check.stdout
        assert f"via {url}/mcp" in check.stdout, check.stdout
        fake.script += [tool_call("view", {"path": str(main_go)}, "call_view"),
                        text("It is the entry point.")]  # fmt: skip
        prompt = "How did we fix the repeated verbose flag in the flag parser before?"
        run = subprocess.run(
            [copilot, "-p", prompt, "--allow-all-tools", "--no-auto-update", "-s"],
            cwd=workspace, env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        turns = fake.agent_turns()
    said = log.read_text(encoding="utf-8") if log.exists() else ""
    assert run.returncode == 0, (run.stderr[-3000:], said)
    assert len(turns) == 2, said
    # Recall ends the prompt's own message, in a <system_reminder>.
    typed = [m for m in turns[0]["messages"] if m["role"] == "user"][-1]["content"]
    assert f"{prompt}\n\n<system_reminder>\n{RECALL}" in typed, (typed, said)
    assert REMEMBERED in typed and "flag parser" in typed
    # The file's history comes as a message of its own, right after the view's result.
    after_view = turns[1]["messages"]
    assert after_view[-2]["tool_call_id"] == "call_view"
    assert after_view[-1]["role"] == "user", after_view[-1]
    context = after_view[-1]["content"]
    assert context.startswith(f"Additional context from preToolUse hook:\n{HISTORY}"), said
    assert f"- session {REMEMBERED} (" in context
    assert "history added 1 sessions" in said
    # Librarian's MCP tools are offered to the model beside Copilot's own, as SERVER-TOOL.
    offered = {t["function"]["name"] for t in turns[0]["tools"]}
    librarians = {"librarian-search_chunks", "librarian-get_digest", "librarian-file_history"}
    assert librarians <= offered, sorted(offered)
    # Undone, the user's files are the very bytes they were.
    undone = subprocess.run([*connect, "--undo"], env=env, capture_output=True, timeout=120)
    assert undone.returncode == 0, undone.stderr
    assert users_mcp.read_bytes() == before
    assert not (home / ".copilot" / "hooks" / "librarian.json").exists()
