"""Each agent's hook contract (hooks/librarian_agents.py): the event it writes on stdin, as the
Claude-shaped event the handlers take, and what it reads on stdout. Claude Code, Codex and
Gemini CLI keep Claude Code's shapes; Copilot CLI's command hooks give camelCase payloads and
read a flat `{"additionalContext"}`. The hooks run as their own processes, as the agents run
them (`sh run-hook.sh SCRIPT AGENT`: the agent is the script's argument)."""

import json
import sys
from pathlib import Path

import pytest
from hookutil import HOOKS, FakeServer, send

sys.path.insert(0, str(HOOKS))
import librarian_agents as agents  # the hooks' folder, as the scripts find it

SESSION = "0de5fbdf-1898-4b26-940a-cd53a3d36fd5"
RECALL = "Librarian remembers past sessions"
HISTORY = "Librarian remembers earlier sessions that worked on"


def _copilot_tool(cwd: Path, tool: str, args: dict) -> dict:
    """preToolUse's stdin, as @github/copilot 1.0.102 writes it (tests/hooks/test_copilot_cli.py
    logs the real one)."""
    return {"sessionId": SESSION, "timestamp": 1796336780633, "cwd": str(cwd),
            "toolName": tool, "toolArgs": args}  # fmt: skip


def _copilot_prompt(cwd: Path, prompt: str) -> dict:
    return {"sessionId": SESSION, "timestamp": 1796336780450, "cwd": str(cwd), "prompt": prompt}


@pytest.mark.parametrize("agent", ["claude-code", "codex", "gemini"])
def test_claude_shaped_agents_keep_their_event_and_output(agent):
    event = {"session_id": "s", "hook_event_name": "BeforeAgent", "prompt": "p", "cwd": "/a"}
    assert agents.event_of(agent, event) is event
    assert agents.answer(agent, event, "UserPromptSubmit", ("a", None, "b")) == {
        "hookSpecificOutput": {"hookEventName": "BeforeAgent", "additionalContext": "a\n\nb"}
    }
    assert agents.answer(agent, event, "UserPromptSubmit", (None, "")) is None
    # An event that does not name itself is answered under the hook's own name.
    assert agents.answer(agent, {}, "PreToolUse", ("t",)) == {
        "hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "t"}
    }


def test_a_copilot_payload_becomes_claude_s_shape(tmp_path):
    env = {"COPILOT_HOME": str(tmp_path / "copilot-home")}
    raw = _copilot_tool(tmp_path, "view", {"path": "/a/notes.txt"})
    assert agents.event_of("copilot", raw, env) == {
        "session_id": SESSION,
        "timestamp": 1796336780633,
        "cwd": str(tmp_path),
        "tool_name": "view",
        "tool_input": {"path": "/a/notes.txt"},
        "transcript_path": str(
            tmp_path / "copilot-home" / "session-state" / SESSION / "events.jsonl"
        ),
    }
    # Without COPILOT_HOME, ~/.copilot; arguments given as their JSON (older versions) are read.
    raw = dict(raw, toolArgs='{"path": "/a/b.py", "old_str": "x"}')
    event = agents.event_of("copilot", raw, {})
    assert event["tool_input"] == {"path": "/a/b.py", "old_str": "x"}
    assert event["transcript_path"].endswith(f"/.copilot/session-state/{SESSION}/events.jsonl")
    assert (
        agents.event_of("copilot", _copilot_prompt(tmp_path, "fix it"), env)["prompt"] == "fix it"
    )
    # A session id that is not a plain name names no file; agentStop's own transcript is kept.
    assert "transcript_path" not in agents.event_of("copilot", {"sessionId": "../../x"}, env)
    stop = {"sessionId": SESSION, "transcriptPath": "/t/events.jsonl"}
    assert agents.event_of("copilot", stop, env)["transcript_path"] == "/t/events.jsonl"
    # Its Claude-style (PascalCase) hooks give Claude's shape already.
    claude = {"hook_event_name": "PreToolUse", "session_id": SESSION, "tool_name": "Read"}
    assert agents.event_of("copilot", claude, env) is claude
    # It reads a flat answer, whichever shape its event came in.
    assert agents.answer("copilot", claude, "PreToolUse", ("t",)) == {"additionalContext": "t"}


def _server(tmp_path: Path, touched: list[str]):
    """A recall server: /touches says the call reads `touched`, /history remembers a session
    that changed it, /recall one that bears on the prompt."""
    history = {"context": f"{HISTORY} notes.txt:\n- session s-older", "sessions": 1}
    recall = {"context": f"{RECALL}:\n- session s-recalled", "sessions": 1}

    def respond(handler) -> None:
        if handler.path == "/touches":
            answer = {"action": "read" if touched else "run", "paths": touched}
        else:
            answer = history if handler.path == "/history" else recall
        send(handler, 200, json.dumps(answer).encode("utf-8"))

    return FakeServer(respond)


def _on(url: str, tmp_path: Path) -> dict[str, str]:
    return {"LIBRARIAN_RECALL": "on", "LIBRARIAN_MCP_URL": url + "/mcp",
            "COPILOT_HOME": str(tmp_path / "copilot-home")}  # fmt: skip


def _flat(proc) -> str | None:
    assert proc.returncode == 0, proc.stderr
    if not proc.stdout:
        return None
    output = json.loads(proc.stdout)
    assert set(output) == {"additionalContext"}  # no decision, no changed arguments
    return output["additionalContext"]


@pytest.mark.process
def test_a_copilot_view_gets_the_file_s_history_flat_once(hooks, tmp_path):
    notes = tmp_path / "notes.txt"
    with _server(tmp_path, [str(notes)]) as server:
        env = _on(server.url, tmp_path)
        view = _copilot_tool(tmp_path, "view", {"path": str(notes)})
        text = _flat(hooks.run("pre_tool_use", view, env, args=["copilot"]))
        assert _flat(hooks.run("pre_tool_use", view, env, args=["copilot"])) is None
    assert text is not None and text.startswith(HISTORY) and "s-older" in text
    touches, history = [json.loads(r[3]) for r in server.requests[:2]]
    assert touches == {"agent": "copilot", "tool_name": "view",
                       "tool_input": {"path": str(notes)}, "cwd": str(tmp_path)}  # fmt: skip
    events = tmp_path / "copilot-home" / "session-state" / SESSION / "events.jsonl"
    assert history["transcript_path"] == str(events)
    assert history["session_id"] == SESSION and history["path"] == str(notes)
    # The second view of the file asked what it touches, and no more.
    assert [r[1] for r in server.requests] == ["/touches", "/history", "/touches"]


@pytest.mark.process
def test_a_copilot_shell_call_asks_no_history(hooks, tmp_path):
    with _server(tmp_path, []) as server:
        bash = _copilot_tool(tmp_path, "bash", {"command": "make test", "description": "test"})
        assert _flat(hooks.run("pre_tool_use", bash, _on(server.url, tmp_path),
                               args=["copilot"])) is None  # fmt: skip
    assert [r[1] for r in server.requests] == ["/touches"]


@pytest.mark.process
def test_a_copilot_prompt_gets_recall_flat(hooks, tmp_path):
    prompt = _copilot_prompt(tmp_path, "How did we release the cache lock last time?")
    with _server(tmp_path, []) as server:
        proc = hooks.run("user_prompt_submit", prompt, _on(server.url, tmp_path), args=["copilot"])
    text = _flat(proc)
    assert text is not None and text.startswith(RECALL) and "s-recalled" in text
    [(_, path, _, body)] = server.requests
    assert path == "/recall"
    assert json.loads(body)["prompt"] == "How did we release the cache lock last time?"


@pytest.mark.process
def test_claude_code_s_prompt_hook_answers_as_before(hooks, tmp_path):
    """No argument: Claude Code's hook, its output nested under hookSpecificOutput."""
    event = {"session_id": "s", "hook_event_name": "UserPromptSubmit", "cwd": str(tmp_path),
             "prompt": "How did we release the cache lock last time?"}  # fmt: skip
    with _server(tmp_path, []) as server:
        proc = hooks.run("user_prompt_submit", event, _on(server.url, tmp_path))
    output = json.loads(proc.stdout)
    assert output["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    assert output["hookSpecificOutput"]["additionalContext"].startswith(RECALL)
