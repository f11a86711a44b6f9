"""OpenCode's reader: its database (read-only, while OpenCode writes), the older storage/ layout
and `opencode export` JSON, all three read into the same session; and the real corpus."""

import json
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from librarian_dagster.core.capture import readers
from librarian_dagster.core.capture.opencode import READER
from librarian_dagster.core.capture.session import CHANGE, READ, RUN, SEARCH, UNREADABLE, Session
from librarian_dagster.core.redaction.scan import find_secrets, redact_session

FIXTURES = Path(__file__).parents[1] / "fixtures" / "agents" / "opencode"
EXPORTS = FIXTURES / "export"
PARENT, CHILD, SECOND = "ses_parent0001", "ses_child00001", "ses_second0001"
CLAUDE_FILE = (
    Path(__file__).parents[1]
    / "fixtures/transcripts/daaain__claude-code-log/4e27c414-a885-46a0-b5c8-d58e1417377d.jsonl"
)


def _export(sid: str) -> dict[str, Any]:
    return json.loads((EXPORTS / f"{sid}.json").read_text())


def _without(data: dict[str, Any], *keys: str) -> str:
    return json.dumps({k: v for k, v in data.items() if k not in keys})


def build_db(path: Path, sids=(PARENT, CHILD, SECOND), wal: bool = True) -> Path:
    """OpenCode's database with these exports' sessions, stored as OpenCode stores them: the
    schema as its source defines it (schema.sql), `data` = the JSON less the row's ids."""
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript((FIXTURES / "schema.sql").read_text())
    conn.execute(
        "INSERT INTO project (id, worktree, vcs, time_created, time_updated, sandboxes)"
        " VALUES ('4b0e1f2a9c3d', '/home/dev/work/demo', 'git', 1, 1, '[]')"
    )
    for sid in sids:
        data = _export(sid)
        i = data["info"]
        conn.execute(
            "INSERT INTO session (id, project_id, parent_id, slug, directory, title, version,"
            " time_created, time_updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (i["id"], i["projectID"], i.get("parentID"), i["slug"], i["directory"], i["title"],
             i["version"], i["time"]["created"], i["time"]["updated"]),
        )  # fmt: skip
        for m in data["messages"]:
            info, created = m["info"], m["info"]["time"]["created"]
            conn.execute(
                "INSERT INTO message VALUES (?, ?, ?, ?, ?)",
                (info["id"], sid, created, created, _without(info, "id", "sessionID")),
            )
            for p in m["parts"]:
                conn.execute(
                    "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
                    (p["id"], info["id"], sid, created, created,
                     _without(p, "id", "sessionID", "messageID")),
                )  # fmt: skip
    conn.commit()
    conn.close()
    return path


def _shape(session: Session) -> list[tuple[Any, ...]]:
    """What a session says, without where it was read from."""
    return [
        (t.role, t.kind, t.text, t.timestamp, t.agent_id,
         [(u.name, u.action, u.file_paths, u.command, u.summary, u.is_error) for u in t.tool_uses])
        for t in session.turns
    ]  # fmt: skip


def _by_id(found) -> dict[str, Any]:
    return {f.session_id: f for f in found}


@pytest.fixture
def export_sessions() -> dict[str, Session]:
    return {f.session_id: READER.parse(f) for f in READER.discover(EXPORTS)}


def test_export_fills_the_model(export_sessions):
    s = export_sessions[PARENT]
    assert set(export_sessions) == {PARENT, SECOND}  # the child is read with its parent
    assert (s.agent, s.project, s.cwd, s.title) == (
        "opencode", "demo", "/home/dev/work/demo", "Fix the failing parser test",
    )  # fmt: skip
    assert s.started_at is not None and s.started_at.tzinfo is not None
    assert s.started_at.timestamp() == 1777000000.0
    assert s.ended_at is not None and s.ended_at.timestamp() == 1777000090.0
    assert s.versions == ("1.18.16",)
    assert s.models == ("claude-sonnet-4-5", "claude-haiku-4-5")
    assert (s.input_tokens, s.output_tokens) == (1800, 320)
    assert (s.cache_read_tokens, s.cache_creation_tokens) == (300, 100)
    assert s.skip_reason is None and s.fingerprint == READER.discover(EXPORTS)[0].fingerprint()
    assert s.stats.skipped_by_kind == {"hologram": 1}
    assert s.stats.records_by_type == {"session": 2, "user": 3, "assistant": 3}
    assert (s.stats.subagents, s.stats.compactions, s.stats.thinking_blocks) == (1, 1, 1)
    assert s.stats.turns == len(s.turns) and s.stats.tool_uses == 6
    assert s.files == (str(EXPORTS / f"{PARENT}.json"), str(EXPORTS / f"{CHILD}.json"))
    assert export_sessions[SECOND].title is None  # OpenCode's placeholder is no title


def test_export_turns_and_tool_uses(export_sessions):
    turns = export_sessions[PARENT].turns
    assert [(t.kind, t.agent_id) for t in turns] == [
        ("prompt", None), ("meta", None), ("text", None),
        ("tool_result", None), ("tool_result", None), ("tool_result", None), ("tool_result", None),
        ("compact_summary", None),
        ("prompt", CHILD), ("text", CHILD), ("tool_result", CHILD),
    ]  # fmt: skip
    prompt = turns[0].text
    assert "fix it @src/parse.ts" in prompt and "[file: image/png screenshot.png]" in prompt
    assert not any("base64" in t.text for t in turns)
    assert turns[1].text.startswith("Called the Read tool")
    assert turns[4].text.startswith("Error: 1 test failed")
    uses = {u.name: u for u in turns[2].tool_uses}
    assert [(u.name, u.action) for u in turns[2].tool_uses] == [
        ("read", READ), ("bash", RUN), ("edit", CHANGE), ("task", ""), ("patch", CHANGE),
    ]  # fmt: skip
    assert uses["bash"].is_error and uses["bash"].command == "npm test -- parse"
    assert uses["bash"].summary == "bash: npm test -- parse" and not uses["read"].is_error
    assert uses["read"].file_paths == ("/home/dev/work/demo/src/parse.ts",)
    assert uses["edit"].file_paths == ("src/parse.ts",) and uses["edit"].id == "call_edit1"
    # The step's patch names what no tool said it changed (format.ts: a formatter, say).
    assert uses["patch"].file_paths == ("/home/dev/work/demo/src/format.ts",)
    grep = turns[9].tool_uses[0]
    assert (grep.action, grep.file_paths, grep.summary) == (
        SEARCH, ("/home/dev/work/demo/tests",), "grep: parse\\(",
    )  # fmt: skip
    second = export_sessions[SECOND].turns[1].tool_uses[0]
    assert (second.action, second.file_paths) == (CHANGE, ("/home/dev/work/demo/README.md",))


def test_thinking_only_when_asked():
    files = _by_id(READER.discover(EXPORTS))[PARENT]
    assert not any(t.kind == "thinking" for t in READER.parse(files).turns)
    thinking = [t for t in READER.parse(files, include_thinking=True).turns if t.kind == "thinking"]
    assert [t.text for t in thinking] == ["The empty string reaches the tokenizer unchecked."]


def test_storage_layout_reads_as_the_export(tmp_path, export_sessions):
    found = READER.discover(FIXTURES)
    storage = [f for f in found if f.main and "storage" in f.main.parts]
    assert [(f.session_id, len(f.subagents), bool(f.version)) for f in storage] == [
        (PARENT, 1, True)
    ]
    session = READER.parse(storage[0])
    assert session.skip_reason is None and session.stats.subagents == 1
    assert _shape(session) == _shape(export_sessions[PARENT])
    assert READER.head(storage[0]).project == "demo"


def test_database_reads_as_the_export(tmp_path, export_sessions):
    db = build_db(tmp_path / "opencode.db")
    found = _by_id(READER.discover(tmp_path))
    assert set(found) == {PARENT, SECOND}  # the child session is read with its parent
    assert all(f.main == db and f.version for f in found.values())
    for sid, files in found.items():
        session = READER.parse(files)
        assert session.skip_reason is None and session.files == (str(db),)
        assert _shape(session) == _shape(export_sessions[sid])
        assert session.title == export_sessions[sid].title
        assert session.stats.skipped_by_kind == export_sessions[sid].stats.skipped_by_kind
    head = READER.head(found[PARENT])
    assert head.project == "demo" and head.started_at == export_sessions[PARENT].started_at


def _add_part(db: Path, sid: str, mid: str, pid: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute(
        "INSERT INTO part VALUES (?, ?, ?, 1777000200000, 1777000200000, ?)",
        (pid, mid, sid, json.dumps({"type": "text", "text": "one more"})),
    )
    conn.commit()
    conn.close()


def test_version_changes_only_for_the_session_that_changed(tmp_path):
    db = build_db(tmp_path / "opencode.db")
    before = {f.session_id: f.fingerprint() for f in READER.discover(tmp_path)}
    _add_part(db, SECOND, "msg_sa001", "prt_zz1")
    after = {f.session_id: f.fingerprint() for f in READER.discover(tmp_path)}
    assert after[SECOND] != before[SECOND] and after[PARENT] == before[PARENT]
    # A child session's change is its parent's.
    _add_part(db, CHILD, "msg_ca001", "prt_zz2")
    again = {f.session_id: f.fingerprint() for f in READER.discover(tmp_path)}
    assert again[PARENT] != after[PARENT] and again[SECOND] == after[SECOND]


def test_reading_while_opencode_writes(tmp_path):
    db = build_db(tmp_path / "opencode.db")
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(
        "INSERT INTO part VALUES ('prt_w', 'msg_sa001', ?, 1, 1, ?)",
        (SECOND, json.dumps({"type": "text", "text": "not yet committed"})),
    )
    try:
        start = time.monotonic()
        found = _by_id(READER.discover(tmp_path))
        session = READER.parse(found[SECOND])
        assert time.monotonic() - start < 2
        assert session.skip_reason is None
        assert not any("not yet committed" in t.text for t in session.turns)
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_locked_database_is_unreadable_for_now(tmp_path):
    db = build_db(tmp_path / "opencode.db", wal=False)
    files = _by_id(READER.discover(tmp_path))[SECOND]
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN EXCLUSIVE")
    try:
        start = time.monotonic()
        session = READER.parse(files)
        assert READER.discover(tmp_path) == []  # listed again later, never raised
        assert time.monotonic() - start < 5
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert session.skip_reason is not None and session.skip_reason.startswith(UNREADABLE)
    assert session.fingerprint == files.fingerprint()
    assert READER.parse(files).skip_reason is None  # and read once the lock is gone


def test_bad_rows_are_counted_not_raised(tmp_path):
    db = build_db(tmp_path / "opencode.db")
    conn = sqlite3.connect(db)
    conn.execute('UPDATE part SET data = \'{"type": "text", "te\' WHERE id = \'prt_sa001b\'')
    conn.commit()
    conn.close()
    session = READER.parse(_by_id(READER.discover(tmp_path))[SECOND])
    assert session.stats.malformed_lines == 1 and session.skip_reason is None
    assert session.stats.malformed_examples == ["opencode.db: part prt_sa001b: invalid JSON"]


def test_what_is_not_there_or_not_whole(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "ses_x.json").write_bytes(b"")
    cut = tmp_path / "cut.json"
    cut.write_text((EXPORTS / f"{SECOND}.json").read_text()[:900])
    gone = tmp_path / "gone.json"
    shutil.copy(EXPORTS / f"{PARENT}.json", gone)
    files = readers.find([cut, gone]).sessions
    gone.unlink()
    by_main = {f.main: READER.parse(f) for f in files}
    assert str(by_main[cut].skip_reason).startswith("invalid JSON at line ")
    assert by_main[gone].skip_reason is not None
    assert by_main[gone].skip_reason.startswith(UNREADABLE)
    (tmp_path / "data").mkdir()
    db = build_db(tmp_path / "data" / "opencode.db")
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM message WHERE session_id = ?", (SECOND,))
    conn.commit()
    conn.close()
    quiet = READER.parse(_by_id(READER.discover(db.parent))[SECOND])
    assert quiet.skip_reason == "no conversation (no messages)"


def test_find_tells_each_form_apart(tmp_path):
    db = build_db(tmp_path / "opencode.db")
    info = next((FIXTURES / "storage" / "session").glob(f"*/{PARENT}.json"))
    export = EXPORTS / f"{SECOND}.json"
    plain = tmp_path / "notes.json"
    plain.write_text('{"info": {"name": "not a session"}}')
    found = readers.find([db, CLAUDE_FILE, plain])
    assert found.unknown == [plain]
    got = sorted((s.agent, s.session_id, s.main.name if s.main else None) for s in found.sessions)
    assert got == [
        ("claude-code", CLAUDE_FILE.stem, CLAUDE_FILE.name),
        ("opencode", PARENT, "opencode.db"),
        ("opencode", SECOND, "opencode.db"),
    ]
    # One session in two forms is one session; each form is told by its content.
    found = readers.find([info, export])
    got = sorted((s.agent, s.session_id, s.main.name if s.main else None) for s in found.sessions)
    assert got == [("opencode", PARENT, f"{PARENT}.json"), ("opencode", SECOND, f"{SECOND}.json")]
    assert next(s for s in found.sessions if s.session_id == PARENT).version  # storage's
    assert [readers.agent_of(p) for p in (db, info, export, CLAUDE_FILE, plain)] == [
        "opencode", "opencode", "opencode", "claude-code", None,
    ]  # fmt: skip


@pytest.mark.slow
def test_every_corpus_export_parses_and_redacts(agents_corpus: Path):
    root = agents_corpus / "opencode"
    files = sorted(root.glob("*/*.json"))
    assert len(files) == 58
    sessions = READER.discover(root)
    assert sorted(p for s in sessions for p in s.paths) == files  # each file in one session
    for f in sessions:
        session = READER.parse(f)
        assert session.skip_reason is None, (f.session_id, session.skip_reason)
        assert session.stats.malformed_lines == 0 and session.turns and session.started_at
        assert session.project == f.main.parent.name if f.main else False
        assert any(t.kind == "prompt" for t in session.turns)
        assert not any(";base64," in t.text for t in session.turns)
        redacted, _ = redact_session(session)
        for turn in redacted.turns:
            assert find_secrets(turn.text) == []
            for tu in turn.tool_uses:
                assert find_secrets(tu.summary) == []
    claude = next((agents_corpus / "claude-code").rglob("*.jsonl"))
    assert readers.agent_of(claude) == "claude-code" and readers.agent_of(files[0]) == "opencode"


@pytest.mark.parametrize("name", ["opencode-1.18.33-live.db", "export-1.18.33-live.json"])
def test_a_real_session_of_opencode_1_18_reads_from_its_database_and_its_export(name):
    """Written by the real CLI (tests/hooks/test_opencode_cli.py's run: a plugin's synthetic
    text part at the prompt, a read and an edit whose outputs the plugin added to)."""
    found = readers.find([FIXTURES / name])
    assert [(f.agent, f.session_id) for f in found.sessions] == [
        ("opencode", "ses_dc20ca649ffe6MKrXbQZ3QV0Q4")
    ]
    session = READER.parse(found.sessions[0])
    assert session.skip_reason is None
    assert (session.cwd, session.versions, session.models) == (
        "/tmp/oc-live/project",
        ("1.18.33",),
        ("stand-in-model",),
    )
    assert [(t.kind, t.text[:22]) for t in session.turns if t.role == "user"][:2] == [
        ("prompt", "Release the cache lock"),
        ("meta", "LIBRARIAN-PROMPT-CONTE"),
    ]
    uses = [u for t in session.turns for u in t.tool_uses]
    assert [(u.name, u.action, u.file_paths) for u in uses] == [
        ("read", READ, ("/tmp/oc-live/project/notes.txt",)),
        ("edit", CHANGE, ("/tmp/oc-live/project/notes.txt",)),
    ]
    assert (session.input_tokens, session.output_tokens) == (3600, 75)
