"""GitHub Copilot CLI's real binary (npm `@github/copilot`, pinned) run with no GitHub sign-in,
offline, against a stand-in OpenAI Chat Completions API (its BYOK mode:
COPILOT_PROVIDER_BASE_URL, COPILOT_OFFLINE), with command hooks in ~/.copilot/hooks/: the
`additionalContext` each prints reaches the model, at the prompt (`userPromptSubmitted`: the
prompt gets a `<system_reminder>`), before a tool (`preToolUse`: a user message after the
tool's result) and after it (`postToolUse`: appended to the tool's result); and the session it
writes (~/.copilot/session-state/<id>/events.jsonl) is read by our reader.

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


def run_copilot(cli: str, base_url: str, home: Path, project: Path, log: Path, prompt: str):
    drop = ("COPILOT_", "GH_", "GITHUB_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(
        HOME=str(home),
        COPILOT_OFFLINE="true",
        COPILOT_PROVIDER_BASE_URL=f"{base_url}/v1",
        COPILOT_PROVIDER_API_KEY="sk-stand-in",
        COPILOT_MODEL="stand-in-model",
        COPILOT_AUTO_UPDATE="false",
        COPILOT_PKG_CACHE_HOME=str(INSTALL / "cache"),
        PROBE_LOG=str(log),
        PROBE_PROMPT_CONTEXT=PROMPT_CONTEXT,
    )
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
