"""Gemini CLI's reader (core/capture/gemini/): both chat forms, tool calls, where a session ran."""

import dataclasses
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.gemini.files import read_header
from librarian_dagster.core.capture.gemini.project import cwd_with_hash
from librarian_dagster.core.capture.gemini.tools import tool_use
from librarian_dagster.core.capture.readers import (
    READERS,
    agent_of,
    find,
    known_cwds,
    parse_session,
    session_files_for,
    session_head,
    session_heads,
)
from librarian_dagster.core.capture.session import CHANGE, READ, RUN, SEARCH, UNREADABLE, Session
from librarian_dagster.core.capture.touches import file_touches
from librarian_dagster.core.redaction.scan import redact_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents" / "gemini"
CHATS = FIXTURES / "tmp" / "myproj" / "chats"
JSONL = CHATS / "session-2026-05-01T10-00-5b7c2e1a.jsonl"
SUBAGENT = (
    CHATS / "5b7c2e1a-0d3f-4c8e-9a61-2f4e8d7c9b10" / "c2000000-0000-4000-8000-0000000000aa.jsonl"
)
JSON = FIXTURES / "json" / "a3f1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d.json"
OTHER = FIXTURES / "tmp" / "other" / "chats" / "session-2026-05-02T08-00-e4000000.jsonl"
# Written by the real Gemini CLI 0.61.0 (tests/hooks/test_gemini_cli_hooks.py's set-up,
# SessionStart, BeforeAgent and AfterTool hooks adding context), then resumed
# (`-r latest -p "fix it"`).
LIVE = FIXTURES / "tmp" / "webshop" / "chats" / "session-2026-12-03T22-08-6cc80d31-live.jsonl"
WEBAPP_HASH = "fd20db9cf4309815aebd3729173edf8a78abb152c57b1de8cb602a3c8b959627"


def _one(path: Path) -> SessionFiles:
    (files,) = session_files_for([path])
    return files


def _parse(path: Path, **kwargs) -> Session:
    return parse_session(_one(path), **kwargs)


def _uses(session: Session):
    return [use for turn in session.turns for use in turn.tool_uses]


# -- the newer form: JSONL with $set, $rewindTo and messages written again ---------------------


def test_jsonl_session_is_its_final_state():
    session = _parse(JSONL)
    assert session.agent == "gemini"
    assert session.session_id == "5b7c2e1a-0d3f-4c8e-9a61-2f4e8d7c9b10"
    assert session.title == "Fix add() so its test passes"  # from a $set
    assert session.models == ("gemini-3-pro-preview", "gemini-3-flash-preview")
    assert session.started_at is not None and session.started_at.isoformat().startswith(
        "2026-05-01T10:00:00"
    )
    assert session.ended_at is not None and session.ended_at.tzinfo is not None
    assert session.skip_reason is None
    prompts = [t.text for t in session.turns if t.kind == "prompt" and t.agent_id is None]
    # The rewound prompt and its answer are gone; the message written three times is one turn.
    assert prompts == ["Fix the failing test for @src/calc.py", "Use python -m pytest instead"]
    assert not any("delete the tests folder" in t.text.lower() for t in session.turns)
    assert [t.text for t in session.turns if t.kind == "text"].count(
        "I will read the test first."
    ) == 1
    assert session.stats.duplicate_records == 2
    assert session.stats.records_by_type["$rewindTo"] == 1
    assert session.stats.records_by_type["$set"] == 6


def test_jsonl_counts_a_cut_line_and_an_unknown_record_and_goes_on():
    session = _parse(JSONL)
    assert session.stats.malformed_lines == 1
    (example,) = session.stats.malformed_examples
    assert example.startswith(JSONL.name + ":") and "b1000000" not in example  # no content
    assert session.stats.skipped_by_kind == {"telemetry": 1}
    assert session.stats.records_by_type["telemetry"] == 1


def test_tokens_take_the_cached_out_of_the_input():
    session = _parse(JSONL)
    # main: (2000-500) + (2600-2000) + (3000-2500); subagent: 900
    assert session.input_tokens == 1500 + 600 + 500 + 900
    assert session.cache_read_tokens == 500 + 2000 + 2500
    assert session.output_tokens == 50 + 25 + 90 + 10 + 30


def test_referenced_files_are_meta_not_the_prompt():
    session = _parse(JSONL)
    first = session.turns.index(next(t for t in session.turns if t.kind == "prompt"))
    prompt, meta = session.turns[first], session.turns[first + 1]
    assert prompt.text == "Fix the failing test for @src/calc.py"
    assert meta.kind == "meta" and meta.text.startswith("--- Content from referenced files ---")
    assert "return a - b" in meta.text and "return a - b" not in prompt.text


def test_tool_calls_say_what_they_did():
    uses = {use.id: use for use in _uses(_parse(JSONL))}
    read = uses["read_file_1777629615000_0"]
    assert (read.action, read.file_paths, read.is_error) == (READ, ("tests/test_calc.py",), False)
    edit = uses["replace_1777629630000_0"]
    assert (edit.action, edit.file_paths) == (CHANGE, ("/home/dev/myproj/src/calc.py",))
    assert edit.summary == "replace /home/dev/myproj/src/calc.py"
    failed = uses["run_shell_command_1777629632000_0"]
    assert (failed.action, failed.command, failed.is_error) == (
        RUN,
        "pytest -q tests/test_calc.py",
        True,
    )
    assert failed.summary == "run_shell_command: pytest -q tests/test_calc.py"
    assert uses["run_shell_command_1777629736000_0"].is_error is False
    grep = uses["grep_search_1777629725000_0"]
    assert (grep.action, grep.file_paths) == (SEARCH, ("src",))
    assert uses["invoke_agent_1777629735000_0"].action == ""


def test_the_status_alone_marks_a_call_that_failed_or_did_not_run():
    def call(status: str) -> dict:
        return {"id": "c", "name": "write_file", "args": {"file_path": "a.py"}, "status": status}

    assert tool_use(call("error")).is_error
    assert tool_use(call("cancelled")).is_error
    assert not tool_use(call("success")).is_error


def test_a_result_written_twice_is_one_tool_result():
    session = _parse(JSONL)
    results = [t.text for t in session.turns if t.kind == "tool_result"]
    assert sum("def test_add" in text for text in results) == 1
    assert any(text.startswith("Command exited with code 1") for text in results)
    assert session.stats.tool_uses == 6


def test_subagent_turns_come_after_the_main_chat():
    session = _parse(JSONL)
    assert session.files == (str(JSONL), str(SUBAGENT))
    assert session.stats.subagents == 1
    agents = [t.agent_id for t in session.turns]
    first_sub = agents.index("c2000000-0000-4000-8000-0000000000aa")
    assert set(agents[:first_sub]) == {None}
    assert set(agents[first_sub:]) == {"c2000000-0000-4000-8000-0000000000aa"}
    assert session.turns[first_sub].kind == "prompt"


def test_thinking_only_when_asked():
    assert not any(t.kind == "thinking" for t in _parse(JSONL).turns)
    thinking = [t for t in _parse(JSONL, include_thinking=True).turns if t.kind == "thinking"]
    assert [t.text for t in thinking] == ["Reading the test: The test names the expected sum."]


def test_the_cwd_from_the_project_root_gemini_keeps():
    session = _parse(JSONL)
    assert (session.cwd, session.project) == ("/home/dev/myproj", "myproj")
    head = session_head(_one(JSONL))
    assert (head.project, head.cwd) == ("myproj", "/home/dev/myproj")
    # Relative paths become absolute against it: the file history has them.
    touched = {t.path: (t.edits, t.reads) for t in file_touches(session)}
    assert touched["/home/dev/myproj/tests/test_calc.py"] == (0, 1)
    assert touched["/home/dev/myproj/src/calc.py"] == (1, 0)


def test_the_cwd_from_the_projects_registry():
    session = _parse(OTHER)
    assert (session.cwd, session.project) == ("/home/dev/other", "other")


# -- the older form: one JSON object ------------------------------------------------------------


def test_json_session():
    session = _parse(JSON)
    assert session.session_id == "a3f1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
    assert session.title == "Stop the login page rendering twice"
    assert session.models == ("gemini-2.5-pro", "gemini-2.5-flash")
    kinds = Counter(t.kind for t in session.turns)
    assert kinds == {"prompt": 2, "meta": 1, "text": 3, "tool_result": 7, "other": 2}
    uses = {u.name: u for u in _uses(session)}
    assert uses["write_file"].is_error and uses["write_file"].action == CHANGE
    assert uses["run_shell_command"].is_error  # cancelled: it did not run
    assert not uses["replace"].is_error
    assert uses["search_file_content"].action == SEARCH
    assert uses["list_directory"].file_paths == ("src",)
    assert uses["google_web_search"].summary == "google_web_search: react strictmode double render"
    assert session.stats.records_by_type == {"session": 1, "info": 2, "user": 2, "gemini": 3}
    assert session.stats.malformed_lines == 0


def test_json_without_a_known_folder_is_named_by_its_hash():
    session = _parse(JSON)
    assert (session.cwd, session.project) == (None, "gemini-fd20db9c")
    assert session_head(_one(JSON)).project == "gemini-fd20db9c"


def test_json_placed_by_a_known_cwd_whose_hash_is_its_project_hash():
    known = ["/home/dev/elsewhere", "/home/dev/webapp/"]
    session = _parse(JSON, known_cwds=known)
    assert (session.cwd, session.project) == ("/home/dev/webapp", "webapp")
    head = session_head(_one(JSON), known_cwds=known)
    assert (head.project, head.cwd) == ("webapp", "/home/dev/webapp")


def test_heads_lend_their_cwds_to_a_session_that_names_none(tmp_path):
    claude = tmp_path / "9d5e8a1c-1111-4222-8333-444455556666.jsonl"
    record = {
        "type": "user",
        "sessionId": claude.stem,
        "uuid": "u1",
        "parentUuid": None,
        "cwd": "/home/dev/webapp",
        "timestamp": "2026-03-01T08:00:00.000Z",
        "message": {"role": "user", "content": "hello"},
    }
    claude.write_text(json.dumps(record) + "\n")
    gemini = tmp_path / JSON.name
    shutil.copy(JSON, gemini)
    found = find([tmp_path]).sessions
    assert sorted(s.agent for s in found) == ["claude-code", "gemini"]
    heads = {s.agent: h for s, h in zip(found, session_heads(found), strict=True)}
    assert heads["gemini"].project == "webapp"
    assert known_cwds(found) == ["/home/dev/webapp"]


def test_a_truncated_json_chat_is_counted_not_raised(tmp_path):
    cut = tmp_path / JSON.name
    data = JSON.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    session = parse_session(SessionFiles("x", cut, agent="gemini"))
    assert session.stats.malformed_lines == 1
    assert session.skip_reason is not None and session.skip_reason.startswith("not a transcript")
    assert "login" not in " ".join(session.stats.malformed_examples).lower()


# -- what is nothing to remember, and what cannot be read --------------------------------------


def test_empty_header_only_and_unreadable(tmp_path):
    empty = tmp_path / "session-empty.jsonl"
    empty.write_bytes(b"")
    assert _skip(empty) == "empty file"
    header = tmp_path / "session-header.jsonl"
    header.write_text(JSONL.read_text().splitlines()[0] + "\n")
    reason = _skip(header)
    assert reason is not None and reason.startswith("no conversation")
    notices = tmp_path / "session-notices.jsonl"
    lines = JSONL.read_text().splitlines()
    notices.write_text(lines[0] + "\n" + lines[1] + "\n")
    assert (_skip(notices) or "").startswith("no conversation")
    folder = tmp_path / "session-folder.jsonl"
    folder.mkdir()
    assert (_skip(folder) or "").startswith(UNREADABLE)


def _skip(path: Path) -> str | None:
    return parse_session(SessionFiles(path.stem, path, agent="gemini")).skip_reason


# -- which files are Gemini CLI's ----------------------------------------------------------------


def test_discovery_groups_chats_and_subagents_and_leaves_other_files():
    sessions = READERS["gemini"].discover(FIXTURES)
    by_id = {s.session_id: s for s in sessions}
    assert set(by_id) == {
        "5b7c2e1a-0d3f-4c8e-9a61-2f4e8d7c9b10",
        "a3f1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
        "e4000000-0000-4000-8000-000000000001",
        "6cc80d31-48a2-42ce-84cf-11ecd8700752",
    }
    assert by_id["5b7c2e1a-0d3f-4c8e-9a61-2f4e8d7c9b10"].subagents == (SUBAGENT,)
    assert all(s.agent == "gemini" for s in sessions)


def test_a_chat_the_real_cli_wrote_and_resumed():
    session = _parse(LIVE)
    assert (session.session_id, session.agent, session.skip_reason) == (
        "6cc80d31-48a2-42ce-84cf-11ecd8700752", "gemini", None
    )  # fmt: skip
    assert (session.cwd, session.project) == ("/tmp/gemini-live/webshop", "webshop")
    assert [u.name for u in _uses(session)] == ["read_file", "replace", "run_shell_command"]
    said = [t.text for t in session.turns if t.role == "assistant" and t.kind == "text" and t.text]
    assert said == [
        "`total()` takes a `discount` argument but never applies it: it returns the raw sum.",
        "I will apply the discount.",
        "Fixed: `total([(10, 2)], 0.5)` now returns 10.0.",
    ]


RECALLED = "<hook_context>Librarian: 2 earlier sessions in webshop.</hook_context>"
CHANGED = (
    "<hook_context>Librarian: cart.py was last changed in session 5b7c2e1a (discounts)."
    "</hook_context>"
)
HISTORY = (
    "<hook_context>Librarian: cart.py history: discount parameter added, never applied."
    "</hook_context>"
)


def test_what_hooks_added_to_a_prompt_is_never_the_prompt():
    """The live chat's prompts carry SessionStart's context before the words typed and
    BeforeAgent's as a part after them: the prompt is the words, each context a meta turn."""
    session = _parse(LIVE)
    prompts = [t.text for t in session.turns if t.kind == "prompt"]
    assert prompts == ["why does the cart total ignore discounts?", "fix it"]
    first = next(i for i, t in enumerate(session.turns) if t.kind == "prompt")
    after = session.turns[first + 1 : first + 3]
    assert [(t.kind, t.text) for t in after] == [("meta", RECALLED), ("meta", CHANGED)]
    assert {t.uuid for t in after} == {session.turns[first].uuid}
    said = [t for t in session.turns if t.kind in ("prompt", "text", "tool_result")]
    assert not [t.text for t in said if "hook_context" in t.text or "Librarian" in t.text]


def test_what_a_hook_added_to_a_tool_s_result_is_apart_from_it():
    session = _parse(LIVE)
    results = [i for i, t in enumerate(session.turns) if t.kind == "tool_result"]
    read = session.turns[results[0]]
    assert read.text == (
        "def total(items, discount=0.0):\n    return sum(price * qty for price, qty in items)"
    )
    assert (session.turns[results[0] + 1].kind, session.turns[results[0] + 1].text) == (
        "meta", HISTORY
    )  # fmt: skip
    assert [session.turns[i].text.startswith("Successfully modified") for i in results] == [
        False, True, False
    ]  # fmt: skip


def test_a_resumed_chat_keeps_what_it_was_before_the_resume():
    """`-r latest` wrote a second header and a rewrite of the history (`$set` of `messages`)
    stamped with the time of the resume, without tokens or tool calls, without the first
    prompt (its text began with a hook's context), and with the read's result twice."""
    session = _parse(LIVE)
    assert session.started_at is not None and session.ended_at is not None
    assert session.started_at.isoformat() == "2026-12-03T22:08:52.848000+00:00"
    assert session.ended_at.isoformat() == "2026-12-03T22:09:00.277000+00:00"
    assert (session.input_tokens, session.output_tokens) == (5 * 1000, 5 * 20)
    assert session.models == ("gemini-2.5-flash",)
    when = {t.text: t.timestamp.isoformat() for t in session.turns if t.timestamp}
    assert when["why does the cart total ignore discounts?"] == "2026-12-03T22:08:52.927000+00:00"
    answer = "`total()` takes a `discount` argument but never applies it: it returns the raw sum."
    assert when[answer] == "2026-12-03T22:08:53.570000+00:00"
    results = [t.text for t in session.turns if t.kind == "tool_result"]
    assert sum(text.startswith("def total(") for text in results) == 1
    kinds = Counter(t.kind for t in session.turns)
    assert kinds == {"meta": 7, "prompt": 2, "text": 5, "tool_result": 3}
    assert session.stats.tool_uses == 3


# -- hand-made chats: hook contexts, and rewrites of the history ---------------------------------

HEADER = {"sessionId": "s-1", "projectHash": "0" * 64, "kind": "main"}


def _chat(tmp_path: Path, *records: dict) -> Session:
    path = tmp_path / "session-2026-01-01T00-00-s1.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return parse_session(SessionFiles("s-1", path, agent="gemini"))


def _user(mid: str, ts: str, *texts: str, **extra) -> dict:
    return {"id": mid, "timestamp": ts, "type": "user", "content": [{"text": t} for t in texts],
            **extra}  # fmt: skip


def _said(session: Session) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in session.turns]


def test_a_prompt_after_a_start_hook_s_context_and_a_context_alone(tmp_path):
    session = _chat(
        tmp_path,
        {**HEADER, "startTime": "2026-01-01T00:00:00.000Z"},
        # Interactive, SessionStart's context is a message of its own.
        _user("m0", "2026-01-01T00:00:01.000Z", "<hook_context>from &lt;start&gt;</hook_context>"),
        _user("m1", "2026-01-01T00:00:02.000Z",
              "<hook_context>one</hook_context>\n\n<hook_context>two</hook_context>\n\nfix the"
              " build please"),
        _user("m2", "2026-01-01T00:00:03.000Z", "/review cart.py", "<hook_context>three\nlines"
              "</hook_context>", displayContent=[{"text": "<hook_context>one</hook_context>\n\n"
                                                          "/review cart.py"}]),
        _user("m3", "2026-01-01T00:00:04.000Z", "Review this: cart.py",
              displayContent=[{"text": "<hook_context>one</hook_context>\n\n/review cart.py"}]),
    )  # fmt: skip
    assert _said(session) == [
        ("meta", "<hook_context>from &lt;start&gt;</hook_context>"),
        ("prompt", "fix the build please"),
        ("meta", "<hook_context>one</hook_context>"),
        ("meta", "<hook_context>two</hook_context>"),
        ("prompt", "/review cart.py"),
        ("meta", "<hook_context>three\nlines</hook_context>"),
        # What the user saw (the command, a hook's context left out) is the prompt; what was
        # sent in its place is meta.
        ("prompt", "/review cart.py"),
        ("meta", "Review this: cart.py"),
    ]


def _answer(mid: str, ts: str, text: str = "", **extra) -> dict:
    return {"id": mid, "timestamp": ts, "type": "gemini", "content": text,
            "tokens": {"input": 100, "output": 10, "cached": 0}, "model": "m", **extra}  # fmt: skip


def _call(cid: str, path: str, output: str) -> dict:
    response = {"id": cid, "name": "read_file", "response": {"output": output}}
    return {"id": cid, "name": "read_file", "args": {"file_path": path}, "status": "success",
            "timestamp": "2026-01-01T00:00:02.500Z",
            "result": [{"functionResponse": response}]}  # fmt: skip


def _response(mid: str, ts: str, cid: str, output: str) -> dict:
    part = {"functionResponse": {"id": cid, "name": "read_file", "response": {"output": output}}}
    return {"id": mid, "timestamp": ts, "type": "user", "content": [part]}


def test_a_rewrite_of_the_history_is_merged_into_what_was_read(tmp_path):
    """A rewrite keeps none of the first run's times, tokens or calls, and drops a prompt: each
    message read before stays as written, where it was; a new one comes after the message it
    follows in the rewrite; a header's time of a resume is not when the session began."""
    first = _answer("a1", "2026-01-01T00:00:02.000Z", "", toolCalls=[_call("c1", "a.py", "A")])
    rewritten_first = {"id": "a1", "timestamp": "2026-01-01T01:00:00.000Z", "type": "gemini",
                       "content": [{"functionCall": {"id": "c1", "name": "read_file",
                                                     "args": {"file_path": "a.py"}}}]}  # fmt: skip
    session = _chat(
        tmp_path,
        {**HEADER, "startTime": "2026-01-01T00:00:00.000Z"},
        _user("p1", "2026-01-01T00:00:01.000Z", "<hook_context>x</hook_context>\n\nread a.py"),
        first,
        _response("r1", "2026-01-01T00:00:03.000Z", "c1", "A"),
        _answer("a2", "2026-01-01T00:00:04.000Z", "It says A."),
        {**HEADER, "startTime": "2026-01-01T01:00:00.000Z"},
        {"$set": {"messages": [
            rewritten_first,
            _response("a1_response", "2026-01-01T01:00:00.000Z", "c1", "A"),
            _response("r1", "2026-01-01T01:00:00.000Z", "c1", "A"),
            {**_answer("a2", "2026-01-01T01:00:00.000Z", "It says A."), "tokens": None},
            _user("n1", "2026-01-01T01:00:00.000Z", "a note the rewrite adds at its end"),
        ]}},
        _user("p2", "2026-01-01T01:00:01.000Z", "and now b.py"),
        _answer("a3", "2026-01-01T01:00:02.000Z", "B."),
    )  # fmt: skip
    assert _said(session) == [
        ("prompt", "read a.py"),
        ("meta", "<hook_context>x</hook_context>"),
        ("text", ""),
        ("tool_result", "A"),
        ("text", "It says A."),
        ("prompt", "a note the rewrite adds at its end"),
        ("prompt", "and now b.py"),
        ("text", "B."),
    ]
    assert [u.id for u in _uses(session)] == ["c1"]
    assert session.started_at is not None
    assert session.started_at.isoformat() == "2026-01-01T00:00:00+00:00"
    assert session.input_tokens == 300
    times = [
        t.timestamp.isoformat()[11:19] for t in session.turns if t.kind == "text" and t.timestamp
    ]
    assert times == ["00:00:02", "00:00:04", "01:00:02"]


def test_a_result_a_rewrite_repeats_is_one_tool_result_even_without_the_call_s_record(tmp_path):
    call = {"functionCall": {"id": "c1", "name": "read_file", "args": {"file_path": "a.py"}}}
    session = _chat(
        tmp_path,
        {**HEADER, "startTime": "2026-01-01T00:00:00.000Z"},
        {"$set": {"messages": [
            _user("p1", "2026-01-01T00:00:01.000Z", "read a.py"),
            {"id": "a1", "timestamp": "2026-01-01T00:00:02.000Z", "type": "gemini",
             "content": [call]},
            _response("a1_response", "2026-01-01T00:00:02.000Z", "c1", "A"),
            _response("r1", "2026-01-01T00:00:02.000Z", "c1", "A"),
        ]}},
    )  # fmt: skip
    assert _said(session) == [("prompt", "read a.py"), ("text", ""), ("tool_result", "A")]


def test_a_rewind_after_a_rewrite_still_removes(tmp_path):
    session = _chat(
        tmp_path,
        {**HEADER, "startTime": "2026-01-01T00:00:00.000Z"},
        _user("p1", "2026-01-01T00:00:01.000Z", "first ask"),
        _user("p2", "2026-01-01T00:00:02.000Z", "second ask"),
        {"$set": {"messages": [_user("p1", "2026-01-01T00:00:09.000Z", "first ask")]}},
        {"$rewindTo": "p2"},
        _user("p3", "2026-01-01T00:00:10.000Z", "third ask"),
    )  # fmt: skip
    assert _said(session) == [("prompt", "first ask"), ("prompt", "third ask")]


def test_claims():
    assert agent_of(JSONL) == "gemini"
    assert agent_of(JSON) == "gemini"
    assert agent_of(SUBAGENT) == "gemini"
    assert agent_of(FIXTURES / "tmp" / "myproj" / "logs.json") is None
    assert agent_of(FIXTURES / "projects.json") is None
    assert not READERS["claude-code"].claims(JSONL)
    assert not READERS["claude-code"].claims(JSON)


def test_a_resumed_older_chat_is_read_in_its_newer_form(tmp_path):
    chats = tmp_path / "chats"
    chats.mkdir()
    shutil.copy(JSONL, chats / "session-x.jsonl")
    older = json.loads(JSON.read_text())
    older["sessionId"] = "5b7c2e1a-0d3f-4c8e-9a61-2f4e8d7c9b10"
    (chats / "session-x.json").write_text(json.dumps(older, indent=2))
    (files,) = READERS["gemini"].discover(tmp_path)
    assert files.main == chats / "session-x.jsonl"


# -- redaction -----------------------------------------------------------------------------------

TOKEN = "ghp_" + "FalHuG5P6C7ROUopuFRE9oTAvJN6U6PrPod6"


def test_redaction_leaves_no_secret(tmp_path):
    chat = tmp_path / JSONL.name
    lines = JSONL.read_text().splitlines()
    secret_prompt = {
        "id": "f5000000-0000-4000-8000-000000000001",
        "timestamp": "2026-05-01T10:03:00.000Z",
        "type": "user",
        "content": [{"text": f"push with GITHUB_TOKEN={TOKEN}"}],
    }
    answer = json.loads(next(line for line in lines if "invoke_agent" in line))
    answer["id"] = "f5000000-0000-4000-8000-000000000002"
    answer["toolCalls"][1]["args"]["command"] = f"GITHUB_TOKEN={TOKEN} git push"
    answer["toolCalls"][1]["id"] = "run_shell_command_secret"
    chat.write_text("\n".join([*lines, json.dumps(secret_prompt), json.dumps(answer)]) + "\n")
    session = parse_session(SessionFiles("s", chat, agent="gemini"))
    assert TOKEN in repr(session)  # the test can fail
    redacted, counts = redact_session(session)
    assert TOKEN not in repr(redacted)
    assert sum(counts.values()) >= 2


# -- the real corpus -----------------------------------------------------------------------------


def _other_agents_cwds(agents: Path, project: str) -> list[str]:
    """The folders the project's Codex (`session_meta`) and OpenCode (`info.directory`)
    sessions ran in, read from their raw JSON."""
    cwds: list[str] = []
    for path in sorted((agents / "codex" / project).glob("*.jsonl")):
        first = json.loads(path.open(encoding="utf-8").readline())
        if first.get("type") == "session_meta":
            cwds.append(first["payload"]["cwd"])
    for path in sorted((agents / "opencode" / project).glob("*.json")):
        cwds.append(json.loads(path.read_text(encoding="utf-8"))["info"]["directory"])
    return list(dict.fromkeys(cwds))


@pytest.fixture(scope="module")
def gemini_corpus(agents_corpus: Path) -> tuple[Path, list[str], dict[str, dict]]:
    chats = agents_corpus / "gemini-cli" / "session-bridge"
    manifest = {}
    for line in (agents_corpus / "manifest.jsonl").read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["agent"] == "gemini-cli":
            manifest[entry["session_id"]] = entry
    return chats, _other_agents_cwds(agents_corpus, "session-bridge"), manifest


def test_corpus_sessions_all_parse(gemini_corpus):
    chats, cwds, manifest = gemini_corpus
    found = find([chats])
    assert found.unknown == []
    assert {s.session_id for s in found.sessions} == set(manifest) and len(manifest) == 4
    for files in found.sessions:
        session = parse_session(files, known_cwds=cwds)
        entry = manifest[files.session_id]
        assert session.skip_reason is None, files.session_id
        assert session.stats.malformed_lines == 0 and session.stats.skipped_by_kind == {}
        messages = sum(n for kind, n in session.stats.records_by_type.items() if kind != "session")
        assert messages == entry["records"]
        assert entry["model"] in session.models
        assert session.started_at is not None and session.ended_at is not None
        assert session.ended_at.isoformat().startswith(entry["last_ts"][:19])
        assert session.stats.tool_uses > 0 and any(t.kind == "prompt" for t in session.turns)
        assert all(u.action for u in _uses(session)), "every corpus tool is a known one"


def test_corpus_sessions_belong_to_the_project_of_the_other_agents(gemini_corpus):
    chats, cwds, _ = gemini_corpus
    assert cwds, "the corpus' Codex and OpenCode sessions of session-bridge name their cwds"
    for files in find([chats]).sessions:
        header = read_header(files.main) if files.main else None
        assert header is not None
        # The other agents' folder is the one whose SHA-256 Gemini CLI kept.
        cwd = cwd_with_hash(cwds, header.project_hash)
        assert cwd is not None
        head = session_head(files, known_cwds=cwds)
        session = parse_session(files, known_cwds=cwds)
        assert (head.project, session.project, session.cwd) == ("session-bridge",) * 2 + (cwd,)


def test_corpus_redaction_and_files_changed(gemini_corpus):
    chats, cwds, _ = gemini_corpus
    for files in find([chats]).sessions:
        session = parse_session(files, known_cwds=cwds)
        redacted, _ = redact_session(session)
        assert len(redacted.turns) == len(session.turns)
        changed = [t for t in file_touches(redacted) if t.edits]
        assert changed and all(t.path.startswith(cwds[0] + "/") for t in changed)
        assert dataclasses.asdict(redacted)["agent"] == "gemini"
