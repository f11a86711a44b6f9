"""The Copilot CLI reader: a hand-made session in Copilot's real event format, and the corpus."""

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from librarian_dagster.core.capture import copilot, readers
from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.session import CHANGE, READ, RUN, UNREADABLE, Session
from librarian_dagster.core.capture.touches import file_touches
from librarian_dagster.core.redaction.scan import find_secrets, redact_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
STATE = FIXTURES / "copilot" / "session-state"
SID = "5f0c2a51-7d3e-4b8e-9a41-2c6d8e9f1a07"
SUBAGENT = "toolu_01Sub7gQm2xKpL4dVnA9cE3w"
LEGACY = "9b1d7e22-4a3c-4f5e-8d6b-0c1a2b3c4d5e"
LIVE = "dfa598a3-b0fd-4540-8577-5d8f661d1404"
READER = copilot.READER


def _files(sid: str = SID) -> SessionFiles:
    (files,) = [f for f in READER.discover(STATE) if f.session_id == sid]
    return files


def test_discovers_both_layouts_and_claims_only_copilot_files():
    found = {f.session_id: f.main for f in READER.discover(STATE)}
    assert found == {SID: STATE / SID / "events.jsonl", LEGACY: STATE / f"{LEGACY}.jsonl"}
    assert READER.claims(STATE / SID / "events.jsonl")
    assert readers.agent_of(STATE / SID / "events.jsonl") == "copilot"
    pi_file = next((FIXTURES / "pi").rglob("*.jsonl"))
    claude = next((FIXTURES.parent / "transcripts" / "daaain__claude-code-log").glob("*.jsonl"))
    assert not READER.claims(pi_file) and not READER.claims(claude)
    assert readers.agent_of(claude) == "claude-code"


def test_files_for_a_file_and_find_over_a_folder():
    assert READER.files_for([STATE / SID / "events.jsonl"]) == [_files()]
    found = readers.find([FIXTURES / "copilot"])
    assert {(s.agent, s.session_id) for s in found.sessions} == {
        ("copilot", SID),
        ("copilot", LEGACY),
        ("copilot", LIVE),
    }


def test_session_fields_from_start_context_workspace_and_shutdown():
    files = _files()
    session = READER.parse(files)
    head = READER.head(files)
    assert session.agent == "copilot" and session.session_id == SID
    # A Windows cwd stays as Copilot wrote it; the project is its last folder.
    assert session.cwd == "C:\\Users\\Dana\\git\\harbor"
    assert session.project == head.project == "harbor"
    assert session.started_at == head.started_at
    assert session.started_at is not None and session.started_at.tzinfo is not None
    assert session.ended_at is not None and session.ended_at > session.started_at
    assert session.git_branch == "dev"
    assert session.title == "Fix the port check: accept 443"
    assert session.versions == ("1.0.74",)
    assert session.models == ("claude-sonnet-4.6", "claude-opus-4.8")
    # inputTokens include the cached ones: 5000 - 3000 - 1000, plus the subagent's 900.
    assert (session.input_tokens, session.cache_read_tokens) == (1900, 3000)
    assert session.cache_creation_tokens == 1000
    assert session.output_tokens == 120 + 80 + 60 + 40
    assert session.fingerprint == files.fingerprint()
    assert session.skip_reason is None


def test_turns_main_dialogue_then_the_subagent():
    session = READER.parse(_files())
    kinds = [(t.kind, t.agent_id) for t in session.turns]
    main = [k for k, a in kinds if a is None]
    assert main == [
        "prompt", "meta", "text", "tool_result", "tool_result", "text", "tool_result",
        "tool_result", "meta", "compact_summary", "text",
    ]  # fmt: skip
    sub = [k for k, a in kinds if a == SUBAGENT]
    assert sub == ["prompt", "text", "tool_result", "text"]
    # The subagent's turns all come after the main dialogue's.
    assert [a for _, a in kinds] == [None] * len(main) + [SUBAGENT] * len(sub)
    assert session.turns[0].text == "fix the failing port check"
    assert session.turns[len(main)].text.startswith("Review the port check change")
    assert session.stats.subagents == 1 and session.stats.compactions == 1
    assert session.stats.turns == len(session.turns)


def test_tool_uses_actions_paths_and_the_failed_one():
    session = READER.parse(_files())
    uses = {u.id: u for t in session.turns for u in t.tool_uses}
    assert session.stats.tool_uses == len(uses) == 5
    view, shell, edit = uses["toolu_01View"], uses["toolu_01Pwsh"], uses["toolu_01Edit"]
    assert (view.action, view.file_paths) == (READ, ("C:\\Users\\Dana\\git\\harbor\\src\\port.go",))
    assert (shell.action, shell.command, shell.summary) == (
        RUN,
        "go test ./...",
        "powershell: go test ./...",
    )
    assert shell.is_error and not view.is_error and not edit.is_error
    assert (edit.action, edit.summary) == (CHANGE, "edit src\\port.go")
    assert uses[SUBAGENT].action == "" and uses[SUBAGENT].summary == "task: Review the change"
    patch = uses["toolu_01SubPatch"]
    assert (patch.action, patch.file_paths) == (
        CHANGE,
        ("C:\\Users\\Dana\\git\\harbor\\src\\port_test.go",),
    )
    denied = [t.text for t in session.turns if t.kind == "tool_result"][1]
    assert denied.startswith("Denied by preToolUse hook")
    touches = {t.path: (t.edits, t.reads) for t in file_touches(session)}
    assert touches == {
        "c:/Users/Dana/git/harbor/src/port.go": (1, 1),
        "c:/Users/Dana/git/harbor/src/port_test.go": (1, 0),
    }


def test_thinking_only_when_asked_and_opaque_reasoning_never():
    plain = READER.parse(_files())
    assert not any(t.kind == "thinking" for t in plain.turns)
    assert plain.stats.thinking_blocks == 1
    thinking = READER.parse(_files(), include_thinking=True)
    assert [t.text for t in thinking.turns if t.kind == "thinking"] == [
        "The port check probably compares strings."
    ]
    assert not any("REDACTED/opaque" in t.text for t in thinking.turns)


def test_bad_and_unknown_lines_are_counted_not_fatal():
    session = READER.parse(_files())
    stats = session.stats
    assert stats.malformed_lines == 1
    assert stats.malformed_examples == ["events.jsonl:33: invalid JSON at column 70"]
    assert stats.skipped_by_kind == {"session.hologram_projected": 1}
    lines = (STATE / SID / "events.jsonl").read_text(encoding="utf-8").splitlines()
    assert sum(stats.records_by_type.values()) == len(lines) - 1
    assert stats.records_by_type["hook.start"] == 1


def test_a_session_without_conversation_and_an_unreadable_one(tmp_path: Path):
    legacy = READER.parse(_files(LEGACY))
    assert legacy.skip_reason == "no conversation (no user or assistant messages)"
    assert (legacy.project, legacy.git_branch, legacy.versions) == ("harbor", "main", ("0.0.354",))
    gone = READER.parse(SessionFiles(SID, tmp_path / "nowhere" / "events.jsonl", agent="copilot"))
    assert gone.skip_reason is not None and gone.skip_reason.startswith(UNREADABLE)
    empty = tmp_path / SID / "events.jsonl"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    assert READER.parse(SessionFiles(SID, empty, agent="copilot")).skip_reason == "empty file"


def test_a_session_folder_copied_elsewhere_keeps_its_id(tmp_path: Path):
    shutil.copytree(STATE / SID, tmp_path / SID)
    (found,) = READER.discover(tmp_path)
    assert found.session_id == SID and READER.parse(found).title is not None


def _corpus(agents_corpus: Path) -> list[SessionFiles]:
    return READER.discover(agents_corpus / "copilot-cli")


@pytest.mark.slow
def test_every_corpus_session_parses_and_redacts(agents_corpus: Path):
    manifest = [json.loads(line) for line in (agents_corpus / "manifest.jsonl").open()]
    expected = {m["session_id"] for m in manifest if m["agent"] == "copilot-cli"}
    sessions = _corpus(agents_corpus)
    assert {s.session_id for s in sessions} == expected and len(expected) == 15
    actions: Counter[str] = Counter()
    for files in sessions:
        assert files.main is not None and READER.claims(files.main)
        session = READER.parse(files)
        assert session.skip_reason is None, (files.session_id, session.skip_reason)
        assert session.stats.malformed_lines == 0 and session.stats.skipped_by_kind == {}
        assert session.project == READER.head(files).project and session.started_at
        assert any(t.kind == "prompt" for t in session.turns) and session.git_branch
        actions.update(u.action for t in session.turns for u in t.tool_uses)
        redacted, _ = redact_session(session)
        for turn in redacted.turns:
            assert ";base64," not in turn.text
            assert find_secrets(turn.text) == []
            for use in turn.tool_uses:
                assert find_secrets(use.summary) == []
    assert actions[CHANGE] and actions[READ] and actions[RUN]


def test_a_real_session_of_copilot_1_0_102_in_byok_mode():
    """Written by the real CLI (tests/hooks/test_copilot_cli.py's run: hooks adding context at
    the prompt and around a `view` and an `edit`). What the model was sent for the prompt
    (`transformedContent`, with the hook's `<system_reminder>`) is not the prompt."""
    events = FIXTURES / "copilot" / "live" / LIVE / "events.jsonl"
    (files,) = READER.files_for([events])
    session = READER.parse(files)
    assert session.skip_reason is None
    assert (session.cwd, session.versions, session.models, session.title) == (
        "/tmp/cp-live/project",
        ("1.0.102",),
        ("stand-in-model",),
        "Release the cache lock",
    )
    assert [t.text for t in session.turns if t.kind == "prompt"] == ["Release the cache lock"]
    uses = [u for t in session.turns for u in t.tool_uses]
    assert [(u.name, u.action, u.file_paths) for u in uses] == [
        ("view", READ, ("/tmp/cp-live/project/notes.txt",)),
        ("edit", CHANGE, ("/tmp/cp-live/project/notes.txt",)),
    ]
    # Three model calls of 1200 in and 25 out: 1.0.102 keeps output in its usage records and
    # the shutdown's metrics, no longer in the assistant messages.
    assert (session.input_tokens, session.output_tokens) == (3600, 75)
    assert session.stats.skipped_by_kind == {}
    assert session.stats.records_by_type["session.usage_record"] == 3
    # The hook's context sent with the prompt is in no turn; the typed prompt is.
    assert not [t for t in session.turns if "<system_reminder>" in t.text]
    assert not [t for t in session.turns if "LIBRARIAN-PROMPT-CONTEXT" in t.text]


def _usage(sequence: int, tokens_in: int, tokens_out: int, model: str = "m") -> dict:
    accounting = {"sourceSessionId": SID, "sequence": sequence, "usageId": "u"}
    usage = {"model": model, "inputTokens": tokens_in, "outputTokens": tokens_out,
             "cacheReadTokens": 100, "cacheWriteTokens": 0, "accounting": accounting}  # fmt: skip
    return {"type": "session.usage_record", "data": {"usage": usage}}


def _session_of(tmp_path: Path, records: list[dict]) -> Session:
    events = tmp_path / SID / "events.jsonl"
    events.parent.mkdir()
    started = {"sessionId": SID, "copilotVersion": "1.0.102", "context": {"cwd": "/src/alpha"}}
    start = {"type": "session.start", "data": started, "timestamp": "2026-12-01T10:00:00.000Z"}
    prompt = {"type": "user.message", "data": {"content": "Release the lock"}}
    answer = {"type": "assistant.message", "data": {"content": "Done.", "model": "m"}}
    lines = [start, prompt, answer, *records]
    events.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    return READER.parse(SessionFiles(SID, events, agent="copilot"))


def test_tokens_of_a_session_that_ended_without_a_shutdown_come_from_its_usage_records(
    tmp_path: Path,
):
    # The second call's record written twice (one accounting identity): counted once.
    session = _session_of(tmp_path, [_usage(1, 1200, 25), _usage(2, 1500, 40), _usage(2, 1500, 40)])
    assert (session.input_tokens, session.cache_read_tokens) == (1100 + 1400, 200)
    assert session.output_tokens == 65
    assert session.stats.skipped_by_kind == {}


def test_the_shutdown_s_metrics_count_when_they_count_more(tmp_path: Path):
    """A resumed session's records may be fewer than the totals its shutdown carries."""
    metrics = {"m": {"usage": {"inputTokens": 5000, "outputTokens": 300, "cacheReadTokens": 1000,
                               "cacheWriteTokens": 0}}}  # fmt: skip
    shutdown = {"type": "session.shutdown", "data": {"modelMetrics": metrics}}
    session = _session_of(tmp_path, [_usage(1, 1200, 25), shutdown])
    assert (session.input_tokens, session.cache_read_tokens, session.output_tokens) == (
        4000,
        1000,
        300,
    )


def _ask(call_id: str, tool: str, arguments: dict, result: str) -> list[dict]:
    """One tool call of the main agent as Copilot 1.0.x writes it: the assistant message that
    asks for it (no words of its own), its start, and its result."""
    request = {"toolCallId": call_id, "name": tool, "arguments": arguments}
    return [
        {"type": "assistant.message", "data": {"content": "", "toolRequests": [request]}},
        {"type": "tool.execution_start",
         "data": {"toolCallId": call_id, "toolName": tool, "arguments": arguments}},
        {"type": "tool.execution_complete",
         "data": {"toolCallId": call_id, "success": True,
                  "result": {"content": result, "detailedContent": result}}},
    ]  # fmt: skip


def test_the_agent_s_questions_and_the_user_s_answers_are_the_dialogue(tmp_path: Path):
    """`ask_user` is how Copilot's agent talks with the user mid-task: its question (and
    choices) are the agent's words, the user's answer, typed or chosen, is theirs; in autopilot
    Copilot answers itself. The plan `exit_plan_mode` puts up for approval is the agent's too."""
    from librarian_dagster.core.digest.chunking import chunk_exchanges
    from librarian_dagster.core.digest.offline import exchanges

    question = {"question": "Where should the lock file live?",
                "choices": ["In the repo (Recommended)", "In the home folder"]}  # fmt: skip
    autopilot = {"type": "session.mode_changed",
                 "data": {"previousMode": "interactive", "newMode": "autopilot"}}  # fmt: skip
    session = _session_of(
        tmp_path,
        [
            *_ask("c1", "ask_user", question, "User responded: beside the socket, in /run"),
            {"type": "assistant.message", "data": {"content": "Moved it to /run/harbor.lock."}},
            *_ask(
                "c2",
                "exit_plan_mode",
                {"summary": "Phase 1: one lock per port."},
                "Plan approved! Exited plan mode.",
            ),
            *_ask(
                "c3",
                "ask_user",
                {"question": "Keep the old lock?", "choices": ["Yes", "No"]},
                "User selected: No",
            ),
            autopilot,
            *_ask(
                "c4",
                "ask_user",
                {"question": "Retry now?"},
                "User responded: The user is not available to respond and will review your "
                "work later. Work autonomously and make good decisions.",
            ),
        ],
    )
    said = [(t.kind, t.text) for t in session.turns if t.text and t.kind != "tool_result"]
    assert said == [
        ("prompt", "Release the lock"),
        ("text", "Done."),
        ("text", "Where should the lock file live?\n- In the repo (Recommended)\n"
                 "- In the home folder"),
        ("prompt", "beside the socket, in /run"),
        ("text", "Moved it to /run/harbor.lock."),
        ("text", "Phase 1: one lock per port."),
        ("text", "Keep the old lock?\n- Yes\n- No"),
        ("prompt", "No"),
        ("text", "Retry now?"),
        ("meta", "The user is not available to respond and will review your work later. Work "
                 "autonomously and make good decisions."),
    ]  # fmt: skip
    # The answers are no tool results as well; the plan's approval is one (Copilot's words).
    results = [t.text for t in session.turns if t.kind == "tool_result"]
    assert results == ["Plan approved! Exited plan mode."]
    assert session.stats.skipped_by_kind == {}
    # What the exchange layer remembers: the user's answer heads what followed it.
    assert [(x.prompt, x.replies[-1]) for x in exchanges(session.turns)] == [
        ("Release the lock", question["question"] + "\n- In the repo (Recommended)\n"
         "- In the home folder"),
        ("beside the socket, in /run", "Keep the old lock?\n- Yes\n- No"),
        ("No", "Retry now?"),
    ]  # fmt: skip
    assert any("beside the socket" in c.text for c in chunk_exchanges(session))
