"""The Pi reader: a hand-made session tree in Pi's real entry format, and the corpus."""

import json
from collections import Counter
from pathlib import Path

import pytest

from librarian_dagster.core.capture import pi, readers
from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.session import CHANGE, READ, RUN, SEARCH, UNREADABLE
from librarian_dagster.core.capture.touches import file_touches
from librarian_dagster.core.redaction.scan import find_secrets, redact_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
SESSIONS = FIXTURES / "pi" / "sessions"
SID = "019e0a11-c801-71e1-96ba-8bf69044a10c"
FILE = SESSIONS / "--Users-dana-src-harbor--" / f"2026-04-25T15-04-34-050Z_{SID}.jsonl"
READER = pi.READER
LIVE = "01a23dfb-a04e-7275-b1a4-677a54eaf620"


def _files() -> SessionFiles:
    (files,) = READER.discover(SESSIONS)
    return files


def test_discovers_and_claims_only_pi_files():
    assert _files() == SessionFiles(SID, FILE, agent="pi")
    assert READER.files_for([FILE]) == [_files()]
    assert READER.claims(FILE) and readers.agent_of(FILE) == "pi"
    copilot_file = next((FIXTURES / "copilot").rglob("events.jsonl"))
    claude = next((FIXTURES.parent / "transcripts" / "daaain__claude-code-log").glob("*.jsonl"))
    assert not READER.claims(copilot_file) and not READER.claims(claude)
    assert [(s.agent, s.session_id) for s in readers.find([FIXTURES / "pi"]).sessions] == [
        ("pi", SID),
        ("pi", LIVE),
    ]


def test_session_fields_from_the_header_and_the_kept_branch():
    files = _files()
    session = READER.parse(files)
    head = READER.head(files)
    assert (session.agent, session.session_id, session.cwd) == ("pi", SID, "/Users/dana/src/harbor")
    assert session.project == head.project == "harbor"
    assert session.started_at == head.started_at
    assert session.started_at is not None and session.started_at.tzinfo is not None
    assert session.ended_at is not None and session.ended_at > session.started_at
    assert session.title == "Health endpoint"
    assert session.models == ("gpt-5.4",)
    # Only the kept branch's usage: the abandoned replies' 1300 and 1400 are not in it.
    assert (session.input_tokens, session.output_tokens) == (1200 + 1500 + 1600 + 900, 185)
    assert session.cache_read_tokens == 1400
    assert session.fingerprint == files.fingerprint() and session.skip_reason is None


def test_the_abandoned_branch_becomes_no_turns():
    session = READER.parse(_files())
    texts = "\n".join(t.text for t in session.turns)
    assert "abandoned" not in texts and "websocket." not in texts
    assert "ws.go" not in {p for t in session.turns for u in t.tool_uses for p in u.file_paths}
    assert session.stats.skipped_by_kind == {"abandoned branch": 4, "bookmark_v9": 1}
    assert session.stats.records_by_type["message"] == 15


def test_turns_in_branch_order_with_summaries_and_shell():
    session = READER.parse(_files())
    assert [t.kind for t in session.turns] == [
        "prompt", "text", "tool_result", "compact_summary", "prompt", "text", "tool_result",
        "text", "tool_result", "compact_summary", "prompt", "tool_result", "prompt", "text",
    ]  # fmt: skip
    prompts = [t.text for t in session.turns if t.kind == "prompt"]
    assert prompts == [
        "add a health endpoint to the server",
        "use a plain HTTP handler at /healthz instead",
        "! go test ./...",
        "tests pass, thanks\n[image: image/png]",
    ]
    assert not any("iVBORw0KGgo" in t.text for t in session.turns)
    assert session.stats.compactions == 1
    assert all(t.agent_id is None for t in session.turns)


def test_tool_uses_and_the_failed_edit():
    session = READER.parse(_files())
    uses = [u for t in session.turns for u in t.tool_uses]
    assert [(u.name, u.action, u.is_error) for u in uses] == [
        ("read", READ, False),
        ("edit", CHANGE, True),
        ("edit", CHANGE, False),
    ]
    assert uses[0].summary == "read server.go" and uses[0].id == "call_aDQax1Jf9L|fc_06f78c56e5"
    touches = [(t.path, t.edits, t.reads) for t in file_touches(session)]
    assert touches == [("/Users/dana/src/harbor/server.go", 2, 1)]


def test_thinking_only_when_asked_and_signatures_never():
    assert not any(t.kind == "thinking" for t in READER.parse(_files()).turns)
    session = READER.parse(_files(), include_thinking=True)
    assert [t.text for t in session.turns if t.kind == "thinking"] == ["Look at server.go first."]
    assert not any("encrypted_content" in t.text for t in session.turns)


def test_bad_lines_version_one_and_unreadable(tmp_path: Path):
    lines = FILE.read_text(encoding="utf-8").splitlines()
    broken = tmp_path / f"{SID}.jsonl"
    broken.write_text("\n".join([*lines[:5], '{"type":"message","id":"x', *lines[5:]]) + "\n")
    session = READER.parse(SessionFiles(SID, broken, agent="pi"))
    assert session.stats.malformed_lines == 1
    assert session.stats.malformed_examples == [f"{broken.name}:6: invalid JSON at column 23"]
    assert len(session.turns) == 14
    # Version 1 had no ids: its entries are one line, all kept.
    v1 = tmp_path / "v1.jsonl"
    entries = [
        {"type": "session", "id": SID, "timestamp": "2025-12-03T14:00:00.000Z", "cwd": "/srv/app"},
        {"type": "message", "timestamp": "2025-12-03T14:00:01.000Z",
         "message": {"role": "user", "content": "hello", "timestamp": 1}},
        {"type": "message", "timestamp": "2025-12-03T14:00:02.000Z",
         "message": {"role": "assistant", "content": [{"type": "text", "text": "Hi!"}]}},
    ]  # fmt: skip
    v1.write_text("".join(json.dumps(e) + "\n" for e in entries))
    old = READER.parse(SessionFiles(SID, v1, agent="pi"))
    assert [t.text for t in old.turns] == ["hello", "Hi!"] and old.project == "app"
    gone = READER.parse(SessionFiles(SID, tmp_path / "gone.jsonl", agent="pi"))
    assert gone.skip_reason is not None and gone.skip_reason.startswith(UNREADABLE)
    header_only = tmp_path / "header.jsonl"
    header_only.write_text(json.dumps(entries[0]) + "\n")
    skip = READER.parse(SessionFiles(SID, header_only, agent="pi")).skip_reason
    assert skip == "no conversation (no user or assistant messages)"


@pytest.mark.slow
def test_every_corpus_session_parses_and_redacts(agents_corpus: Path):
    manifest = [json.loads(line) for line in (agents_corpus / "manifest.jsonl").open()]
    expected = {m["session_id"] for m in manifest if m["agent"] == "pi"}
    sessions = READER.discover(agents_corpus / "pi")
    assert {s.session_id for s in sessions} == expected and len(expected) == 13
    actions: Counter[str] = Counter()
    for files in sessions:
        assert files.main is not None and READER.claims(files.main)
        session = READER.parse(files)
        assert session.skip_reason is None, (files.session_id, session.skip_reason)
        assert session.stats.malformed_lines == 0 and session.stats.skipped_by_kind == {}
        assert session.project == READER.head(files).project == "pi.dev"
        assert any(t.kind == "prompt" for t in session.turns) and session.models
        actions.update(u.action for t in session.turns for u in t.tool_uses)
        redacted, _ = redact_session(session)
        for turn in redacted.turns:
            assert ";base64," not in turn.text
            assert find_secrets(turn.text) == []
            for use in turn.tool_uses:
                assert find_secrets(use.summary) == []
    assert actions[CHANGE] and actions[READ] and actions[RUN] and actions[SEARCH]


def test_a_real_session_of_pi_0_73():
    """Written by the real CLI (tests/hooks/test_pi_cli.py's run: an extension's custom message
    at the prompt, a read and an edit whose results the extension added a text block to)."""
    (files,) = READER.files_for([FIXTURES / "pi" / "pi-0.73.1-live.jsonl"])
    session = READER.parse(files)
    assert (session.session_id, session.skip_reason) == (LIVE, None)
    assert (session.cwd, session.project, session.models) == (
        "/tmp/pi-live/project",
        "project",
        ("stand-in-model",),
    )
    assert [(t.kind, t.text[:22]) for t in session.turns if t.role == "user"][:2] == [
        ("prompt", "Release the cache lock"),
        ("meta", "LIBRARIAN-PROMPT-CONTE"),
    ]
    uses = [u for t in session.turns for u in t.tool_uses]
    assert [(u.name, u.action, u.file_paths) for u in uses] == [
        ("read", READ, ("/tmp/pi-live/project/notes.txt",)),
        ("edit", CHANGE, ("/tmp/pi-live/project/notes.txt",)),
    ]
    assert (session.input_tokens, session.output_tokens) == (3600, 75)
