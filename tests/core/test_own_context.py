"""Librarian never remembers what it handed an agent: the context its hooks added is cut from a
session read back (core/capture/own_context.py), whatever the agent wrapped it in."""

import json
import re
import sys
from pathlib import Path

import pytest

from librarian_dagster.core.capture import readers
from librarian_dagster.core.capture.own_context import HEADERS, without_own_context
from librarian_dagster.core.recall.hook_text import HISTORY_HEADER, RECALL_HEADER

HOOKS = Path(__file__).resolve().parents[2] / "hooks"
RECALL = (
    "Librarian remembers past sessions that may bear on this prompt (from memory, possibly out "
    "of date; the MCP tool get_digest with a session_id returns the whole session):\n"
    "- session 3c1d (alpha, 2026-10-31): Fixed the flag parser"
)
HISTORY = (
    "Librarian remembers earlier sessions that worked on cmd/main.go (from memory, possibly out "
    "of date; ...):\n- Codex session 019e (2026-11-02; changed it (2 edits))"
)


def test_the_headers_are_the_ones_librarian_writes():
    sys.path.insert(0, str(HOOKS))
    try:
        import librarian_inject
    finally:
        sys.path.remove(str(HOOKS))
    said = [
        RECALL_HEADER,
        HISTORY_HEADER.format(path="x.go"),
        librarian_inject.NOTES_HEADER.format(path="cmd/main.go"),
        librarian_inject.reminder("/r/_memory_library", "/r"),
    ]
    for header, text in zip(HEADERS, said, strict=True):
        assert text.startswith(header), (header, text)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (RECALL, ""),
        ("what does cmd/main.go do?", "what does cmd/main.go do?"),
        # Gemini CLI: the context as a part of the prompt's message.
        (f"fix the parser<hook_context>{RECALL}</hook_context>", "fix the parser"),
        # Copilot CLI: appended to the prompt, and to a tool's output.
        (f"fix the parser\n\n<system_reminder>\n{RECALL}\n</system_reminder>", "fix the parser"),
        (
            f'package main\n\n\nTool "view" succeeded. Additional guidance from postToolUse '
            f"hooks:\n{HISTORY}",
            "package main",
        ),
        # OpenCode and Pi: appended to a tool's output.
        (f"1: package main\n\n{HISTORY}", "1: package main"),
        ("Librarian is the name of our service", "Librarian is the name of our service"),
    ],
)
def test_the_context_is_cut_with_its_wrapper(text, kept):
    assert without_own_context(text) == kept


def test_a_session_read_back_holds_none_of_it(tmp_path):
    path = tmp_path / "0b5e0000-0000-4000-8000-0000000000c1.jsonl"
    records = [
        {"type": "user", "message": {"role": "user", "content": "fix the flag parser please"}},
        {"type": "user", "isMeta": True, "message": {"role": "user", "content": RECALL}},
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "Read",
                        "input": {"file_path": "/r/a.go"},
                    }
                ],
            },
        },
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": f"package main\n\n{HISTORY}",
                    }
                ],
            },
        },
    ]
    lines = [json.dumps({"sessionId": path.stem, "cwd": "/r", **r}) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    [files] = readers.session_files_for([path])
    session = readers.parse_session(files)
    texts = "\n".join(t.text for t in session.turns)
    assert "Librarian remembers" not in texts
    assert "fix the flag parser please" in texts and "package main" in texts
    assert not re.search(r"Codex session 019e", texts)
