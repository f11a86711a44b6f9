"""Parser tests over the real fixtures in tests/fixtures and small hand-made edge cases."""

import json
from pathlib import Path

import pytest

from librarian_dagster.core.capture.claude_code.files import discover_sessions, session_files_for
from librarian_dagster.core.capture.files import SessionFiles, project_from
from librarian_dagster.core.capture.readers import parse_session
from tests.conftest import SHARED, TRANSCRIPTS

DAAAIN = TRANSCRIPTS / "daaain__claude-code-log"
ENTIRE = TRANSCRIPTS / "entireio__cli"


def _one(path: Path) -> SessionFiles:
    (files,) = [s for s in session_files_for([path]) if s.main == path]
    return files


def _parses_without_exception(folder: Path) -> int:
    sessions = discover_sessions(folder)
    for files in sessions:
        session = parse_session(files)
        assert session.session_id == files.session_id
        assert session.stats.turns == len(session.turns)
    return len(sessions)


def test_every_fixture_transcript_parses_without_exception():
    assert _parses_without_exception(TRANSCRIPTS) == 13


def test_every_shared_transcript_parses_without_exception():
    """The larger collection the fixtures were taken from, when this workspace has it."""
    folder = SHARED / "data" / "transcripts"
    if not folder.is_dir():
        pytest.skip(f"{folder} absent: the fixtures in tests/fixtures cover the parser")
    assert _parses_without_exception(folder) >= 15


def test_message_id_merge_and_usage_counted_once():
    session = parse_session(_one(DAAAIN / "cb2e607c-c758-415a-8b45-c49e4631906a.jsonl"))
    assistant_main = [t for t in session.turns if t.role == "assistant" and t.agent_id is None]
    ids = set()
    with (DAAAIN / "cb2e607c-c758-415a-8b45-c49e4631906a.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            if rec.get("type") == "assistant":
                ids.add(rec["message"]["id"])
    # 200 assistant records for 80 distinct message ids (FORMATS.md 1.4): one turn per id.
    assert len(assistant_main) == len(ids) == 80


def test_old_layout_subagent_attached_to_parent():
    sessions = {s.session_id: s for s in discover_sessions(DAAAIN)}
    parent = sessions["cb2e607c-c758-415a-8b45-c49e4631906a"]
    assert [p.name for p in parent.subagents] == ["agent-ea02459f.jsonl"]
    session = parse_session(parent)
    assert session.stats.subagents == 1
    assert any(t.agent_id == "ea02459f" for t in session.turns)


def test_new_layout_subagents_attached_to_parent():
    files = _one(DAAAIN / "ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl")
    assert len(files.subagents) == 2
    session = parse_session(files)
    agent_ids = {t.agent_id for t in session.turns if t.agent_id}
    assert {"a52886dc180afb356", "aef063ba534d73153"} <= agent_ids


def test_glued_records_recovered_and_summary_title_by_leaf_uuid():
    session = parse_session(_one(ENTIRE / "37/995ebed6e4/2/full.jsonl"))
    assert session.stats.malformed_lines == 0
    # One summary on its own line plus the one glued onto line 128.
    assert session.stats.records_by_type["summary"] == 2
    # Both summaries point into this file; the later one wins.
    assert session.title is not None
    assert session.title.startswith("Add agent name to logging context")


def test_truncated_last_line_is_counted_not_fatal():
    path = TRANSCRIPTS / "derived/03eb5929-52b3-4b13-ada3-b93ae35806b8.truncated.jsonl"
    session = parse_session(_one(path))
    assert session.stats.malformed_lines == 1
    assert ":41:" in session.stats.malformed_examples[0]
    assert session.skip_reason is None


def test_compaction_counted_and_summary_marked():
    session = parse_session(_one(ENTIRE / "a6/e4c2a0fbd1/0/full.jsonl"))
    assert session.stats.compactions == 1
    kinds = [t.kind for t in session.turns]
    assert kinds.count("compact_summary") == 1


def test_skip_reasons(tmp_path: Path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(b"not json at all\n\x00\x00\n")
    summary = DAAAIN / "4e27c414-a885-46a0-b5c8-d58e1417377d.jsonl"
    assert parse_session(_one(empty)).skip_reason == "empty file"
    assert parse_session(_one(junk)).skip_reason == "not a transcript (no JSON records)"
    assert parse_session(_one(summary)).skip_reason == "no conversation (summary-only)"


def test_typed_prompt_told_apart_from_meta_and_tool_results():
    session = parse_session(_one(DAAAIN / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"))
    prompts = [t for t in session.turns if t.kind == "prompt"]
    assert prompts
    assert not any(t.text.startswith("<local-command-caveat>") for t in prompts)
    assert any(t.kind == "tool_result" for t in session.turns)
    assert any(t.kind == "meta" for t in session.turns)
    assert not any(t.kind == "thinking" for t in session.turns)
    with_thinking = parse_session(
        _one(DAAAIN / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl"), include_thinking=True
    )
    assert any(t.kind == "thinking" for t in with_thinking.turns)


def test_tool_uses_are_structured():
    session = parse_session(_one(DAAAIN / "fe869ecb-c176-478f-9734-7e4b8ef12cff.jsonl"))
    tools = [tu for t in session.turns for tu in t.tool_uses]
    assert any(tu.name == "MultiEdit" and tu.file_paths for tu in tools)
    bash = [tu for tu in tools if tu.name == "Bash"]
    assert bash and all(tu.command and tu.summary.startswith("Bash: ") for tu in bash)


def test_images_become_placeholders():
    session = parse_session(_one(DAAAIN / "4379d1bf-ccb1-414e-a856-9791b73f3af2.jsonl"))
    texts = "\n".join(t.text for t in session.turns)
    assert "[image: image/png]" in texts or "[image: image/jpeg]" in texts
    assert ";base64," not in texts and "iVBORw0KGgo" not in texts


def test_project_from_cwd():
    session = parse_session(_one(DAAAIN / "4379d1bf-ccb1-414e-a856-9791b73f3af2.jsonl"))
    assert session.project == "danieldemmel.me-next"


@pytest.mark.parametrize(
    "cwd",
    [
        "/u/me/agentv",
        "/u/me/agentv/.claude/worktrees/agent-1",
        "/u/me/agentv/.worktrees/fix",
        "/u/me/agentv.worktrees/fix-suite",
        "/u/me/agentv__worktrees/av-1/apps/cli",
        "C:\\Users\\me\\agentv-worktrees\\x",
    ],
)
def test_a_repository_is_one_project_from_its_worktrees_wherever_they_are(cwd: str):
    # Every agent's sessions are named by this rule: the same repository, the same project.
    assert project_from(cwd, None) == "agentv"


def test_fingerprint_changes_with_size(tmp_path: Path):
    path = tmp_path / "11111111-2222-3333-4444-555555555555.jsonl"
    path.write_text('{"type":"user"}\n', encoding="utf-8")
    (files,) = discover_sessions(tmp_path)
    before = files.fingerprint()
    assert files.fingerprint() == before
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"type":"assistant"}\n')
    assert files.fingerprint() != before


def test_a_summary_in_another_file_titles_nothing_and_is_counted(tmp_path: Path):
    a, b = "aaaaaaaa-0000-0000-0000-000000000001", "bbbbbbbb-0000-0000-0000-000000000002"
    rec = {
        "type": "user",
        "uuid": "leaf-1",
        "sessionId": a,
        "timestamp": "2026-01-01T00:00:00Z",
        "message": {"role": "user", "content": "fix the login bug"},
    }
    (tmp_path / f"{a}.jsonl").write_text(json.dumps(rec) + "\n", encoding="utf-8")
    summary = {"type": "summary", "summary": "Login bug fixed", "leafUuid": "leaf-1"}
    (tmp_path / f"{b}.jsonl").write_text(json.dumps(summary) + "\n", encoding="utf-8")
    sessions = {s.session_id: s for s in discover_sessions(tmp_path)}
    assert parse_session(sessions[a]).title is None
    other = parse_session(sessions[b])
    assert other.skip_reason == "no conversation (summary-only)"
    assert other.stats.summaries_unmatched == 1
