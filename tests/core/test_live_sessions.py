"""What the hooks ask of a session still going on (readers.live_task, readers.live_tool): the
task in its live transcript, and what a tool call is about to touch, by the agent's reader."""

import json
from pathlib import Path

import pytest

from librarian_dagster.core.capture import readers
from librarian_dagster.core.capture.session import CHANGE, READ, RUN

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLAUDE = FIXTURES / "transcripts" / "daaain__claude-code-log"
WITH_SUBAGENTS = CLAUDE / "ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl"
CODEX = FIXTURES / "agents" / "codex" / "sessions" / "2026" / "05" / "01"


def _claude(tmp_path: Path, records: list[dict]) -> Path:
    path = tmp_path / "0b5e0000-0000-4000-8000-000000000001.jsonl"
    lines = [json.dumps({"sessionId": path.stem, "cwd": "/src/alpha", **r}) for r in records]
    path.write_text("\n".join(lines) + "\n{broken\n", encoding="utf-8")
    return path


def test_the_task_is_the_latest_prompt_typed(tmp_path):
    path = _claude(
        tmp_path,
        [
            {"type": "user", "message": {"role": "user", "content": "read the old parser"}},
            {"type": "user", "message": {"role": "user", "content": "make the parser strict"}},
            {"type": "assistant", "message": {"content": [{"type": "text", "text": "ok"}]}},
            {"type": "user", "message": {"content": [{"type": "tool_result", "content": "x"}]}},
            {"type": "user", "isMeta": True, "message": {"content": "<system-reminder>"}},
            {"type": "user", "message": {"content": "<command-name>/exit</command-name>"}},
        ],
    )
    assert readers.live_task(path) == "make the parser strict"


def test_a_subagent_s_task_is_what_its_parent_asked_of_it():
    task = readers.live_task(WITH_SUBAGENTS, "a52886dc180afb356")
    assert task is not None and task.startswith("You are **bob**, a teammate")
    # The hook may name it as its file does; an unknown one falls back to the session's task.
    assert readers.live_task(WITH_SUBAGENTS, "agent-a52886dc180afb356") == task
    assert readers.live_task(WITH_SUBAGENTS, "nobody") == readers.live_task(WITH_SUBAGENTS)
    assert readers.live_task(WITH_SUBAGENTS) != task


def test_a_codex_rollout_s_task_is_its_latest_prompt():
    [rollout] = CODEX.glob("rollout-*-019e0000-3333-*.jsonl")
    assert readers.live_task(rollout) == "Check the tests"


def test_no_task_from_what_cannot_be_read_in_time(tmp_path, monkeypatch):
    other = tmp_path / "notes.txt"
    other.write_text("make the parser strict\n")
    assert readers.live_task(other) is None
    assert readers.live_task(tmp_path / "gone.jsonl") is None
    path = _claude(tmp_path, [{"type": "user", "message": {"content": "make it strict"}}])
    assert readers.live_task(path) == "make it strict"
    monkeypatch.setattr(readers, "LIVE_TASK_MAX_BYTES", path.stat().st_size - 1)
    assert readers.live_task(path) is None


@pytest.mark.parametrize(
    ("name", "command", "action", "paths"),
    [
        ("Bash", "sed -n 1,80p src/parser.py", READ, ("src/parser.py",)),
        ("Bash", "cat /src/alpha/README.md", READ, ("/src/alpha/README.md",)),
        ("Bash", "npm test", RUN, ()),
        (
            "apply_patch",
            "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y\n"
            "*** Add File: docs/b.md\n+hello\n*** End Patch\n",
            CHANGE,
            ("src/a.py", "docs/b.md"),
        ),
    ],
)
def test_a_codex_tool_call_touches_what_its_transcript_would_say(name, command, action, paths):
    use = readers.live_tool("codex", name, {"command": command}, "/src/alpha")
    assert use is not None
    assert (use.action, use.file_paths) == (action, paths)


def test_a_claude_code_tool_call_names_its_file():
    use = readers.live_tool("claude-code", "Edit", {"file_path": "/a/b.py", "old_string": "x"})
    assert use is not None and (use.action, use.file_paths) == (CHANGE, ("/a/b.py",))
    use = readers.live_tool("gemini", "read_file", {"file_path": "src/a.py"})
    assert use is not None and (use.action, use.file_paths) == (READ, ("src/a.py",))


@pytest.mark.parametrize(
    ("name", "arguments", "action", "paths"),
    [
        (
            "view",
            {"path": "/src/alpha/notes.txt", "view_range": [1, 20]},
            READ,
            ("/src/alpha/notes.txt",),
        ),
        (
            "edit",
            {"path": "/src/alpha/a.py", "old_str": "x", "new_str": "y"},
            CHANGE,
            ("/src/alpha/a.py",),
        ),
        (
            "create",
            {"path": "/src/alpha/new.md", "file_text": "hello"},
            CHANGE,
            ("/src/alpha/new.md",),
        ),
        ("bash", {"command": "cat notes.txt", "description": "read"}, RUN, ()),
    ],
)
def test_a_copilot_tool_call_touches_what_its_events_would_say(name, arguments, action, paths):
    """Copilot CLI's hooks show a call as its events.jsonl has it (`toolName`, `toolArgs`)."""
    use = readers.live_tool("copilot", name, arguments, "/src/alpha")
    assert use is not None
    assert (use.action, use.file_paths) == (action, paths)


@pytest.mark.parametrize(
    ("name", "args", "action", "paths"),
    [
        ("read", {"filePath": "/r/notes.txt", "offset": 10}, READ, ("/r/notes.txt",)),
        ("edit", {"filePath": "/r/a.py", "oldString": "x", "newString": "y"}, CHANGE, ("/r/a.py",)),
        ("write", {"filePath": "src/b.py", "content": "z"}, CHANGE, ("src/b.py",)),
        (
            "apply_patch",
            {"patchText": "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y\n*** End Patch"},
            CHANGE,
            ("src/a.py",),
        ),
        ("bash", {"command": "cat /r/notes.txt", "description": "show"}, RUN, ()),
    ],
)
def test_an_opencode_tool_call_touches_what_its_part_would_say(name, args, action, paths):
    """As a plugin sees it (`tool.execute.after`: `tool`, `args`), the part's own input."""
    use = readers.live_tool("opencode", name, args, "/r")
    assert use is not None
    assert (use.action, use.file_paths) == (action, paths)


@pytest.mark.parametrize(
    ("name", "args", "action", "paths"),
    [
        ("read", {"path": "/r/notes.txt", "offset": 10}, READ, ("/r/notes.txt",)),
        ("edit", {"path": "src/a.py", "edits": [{"oldText": "x", "newText": "y"}]}, CHANGE,
         ("src/a.py",)),
        ("write", {"path": "/r/b.py", "content": "z"}, CHANGE, ("/r/b.py",)),
        ("bash", {"command": "cat /r/notes.txt"}, RUN, ()),
    ],
)  # fmt: skip
def test_a_pi_tool_call_touches_what_its_tool_call_would_say(name, args, action, paths):
    """As an extension sees it (`tool_result`: `toolName`, `input`), the toolCall's arguments."""
    use = readers.live_tool("pi", name, args, "/r")
    assert use is not None
    assert (use.action, use.file_paths) == (action, paths)
