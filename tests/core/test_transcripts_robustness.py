"""What real files do to a parser: glued records, cut lines, bad bytes, NULs, live appends.

Plus property tests (hypothesis): the parser never raises on arbitrary lines.
"""

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from librarian_dagster.core.capture.claude_code.files import discover_sessions, session_files_for
from librarian_dagster.core.capture.claude_code.records import iter_records
from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.readers import parse_session

SID = "11111111-2222-3333-4444-555555555555"


def _user(text: str, uuid: str, ts: str = "2026-01-01T10:00:00.000Z") -> dict:
    return {
        "type": "user",
        "uuid": uuid,
        "sessionId": SID,
        "cwd": "/home/dev/projects/my-app",
        "gitBranch": "main",
        "version": "2.1.14",
        "timestamp": ts,
        "message": {"role": "user", "content": text},
    }


def _assistant(mid: str, uuid: str, block: dict, usage: dict | None = None) -> dict:
    return {
        "type": "assistant",
        "uuid": uuid,
        "sessionId": SID,
        "timestamp": "2026-01-01T10:00:05.000Z",
        "message": {
            "id": mid,
            "model": "claude-opus-4-5",
            "role": "assistant",
            "content": [block],
            "usage": usage or {"input_tokens": 10, "output_tokens": 5},
        },
    }


def _write(tmp_path: Path, raw: bytes) -> SessionFiles:
    path = tmp_path / f"{SID}.jsonl"
    path.write_bytes(raw)
    (files,) = discover_sessions(tmp_path)
    return files


def _line(rec: dict) -> bytes:
    return json.dumps(rec).encode() + b"\n"


def test_two_records_on_one_line_both_kept(tmp_path: Path):
    raw = json.dumps(_user("first", "u1")).encode() + json.dumps(_user("second", "u2")).encode()
    session = parse_session(_write(tmp_path, raw + b"\n"))
    assert [t.text for t in session.turns] == ["first", "second"]
    assert session.stats.malformed_lines == 0
    assert "2 records on one line" in session.stats.malformed_examples[0]


def test_cut_record_followed_by_next_append(tmp_path: Path):
    # anthropics/claude-code#52387: a partial record, then the next append with no newline.
    partial = json.dumps(_user("lost", "u1")).encode()[:40]
    raw = partial + json.dumps(_user("kept", "u2")).encode() + b"\n"
    session = parse_session(_write(tmp_path, raw))
    assert [t.text for t in session.turns] == ["kept"]
    assert session.stats.malformed_lines == 1


def test_truncated_last_line_and_missing_newline(tmp_path: Path):
    good = _line(_user("hello", "u1"))
    cut = json.dumps(_user("half", "u2")).encode()[:50]
    session = parse_session(_write(tmp_path, good + cut))
    assert [t.text for t in session.turns] == ["hello"]
    assert session.stats.malformed_lines == 1
    assert "incomplete last line" in session.stats.malformed_examples[0]
    # A valid last record without a final newline is read normally.
    session = parse_session(_write(tmp_path, good + _line(_user("end", "u3")).rstrip(b"\n")))
    assert [t.text for t in session.turns] == ["hello", "end"]


def test_non_utf8_and_nul_bytes(tmp_path: Path):
    bad_utf8 = _line(_user("caf\u00e9 ok", "u1")).replace(b"caf\\u00e9", b"caf\xe9")
    nuls = b"\x00" * 300 + b"\n"
    nul_inside = _line(_user("with nul", "u2")).replace(b'"type"', b'\x00\x00"type"')
    session = parse_session(_write(tmp_path, bad_utf8 + nuls + nul_inside))
    texts = [t.text for t in session.turns]
    assert texts[0].startswith("caf") and texts[0].endswith(" ok")
    assert "with nul" in texts
    # Secrets must never leak through reasons: reasons carry line numbers only.
    assert all("caf" not in ex for ex in session.stats.malformed_examples)


def test_file_still_being_written(tmp_path: Path):
    path = tmp_path / f"{SID}.jsonl"
    with path.open("wb") as fh:
        fh.write(_line(_user("one", "u1")))
        fh.write(json.dumps(_user("two", "u2")).encode()[:30])
        fh.flush()
        (files,) = discover_sessions(tmp_path)
        before = files.fingerprint()
        session = parse_session(files)
        assert [t.text for t in session.turns] == ["one"]
        fh.write(json.dumps(_user("two", "u2")).encode()[30:] + b"\n")
    assert files.fingerprint() != before
    assert [t.text for t in parse_session(files).turns] == ["one", "two"]


def test_message_id_merge_counts_usage_once(tmp_path: Path):
    usage = {
        "input_tokens": 100,
        "output_tokens": 7,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 50,
    }
    recs = [
        _user("do it", "u1"),
        _assistant("msg_1", "a1", {"type": "thinking", "thinking": "hmm", "signature": "x"}, usage),
        _assistant("msg_1", "a2", {"type": "text", "text": "On it."}, usage),
        _assistant(
            "msg_1",
            "a3",
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "Bash",
                "input": {"command": "pytest -q"},
            },
            usage,
        ),
        {
            "type": "user",
            "uuid": "u2",
            "timestamp": "2026-01-01T10:00:09.000Z",
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "1 failed",
                        "is_error": True,
                    }
                ],
            },
        },
    ]
    session = parse_session(_write(tmp_path, b"".join(_line(r) for r in recs)))
    assistant = [t for t in session.turns if t.role == "assistant"]
    assert len(assistant) == 1
    (turn,) = assistant
    assert turn.text == "On it."
    (tool,) = turn.tool_uses
    assert (tool.name, tool.command, tool.summary, tool.is_error) == (
        "Bash",
        "pytest -q",
        "Bash: pytest -q",
        True,
    )
    assert (session.input_tokens, session.output_tokens) == (100, 7)
    assert (session.cache_read_tokens, session.cache_creation_tokens) == (1000, 50)
    assert session.stats.thinking_blocks == 1
    assert session.project == "my-app"
    assert session.git_branch == "main"


def test_duplicate_records_counted_once(tmp_path: Path):
    rec = _line(_user("same", "u1"))
    session = parse_session(_write(tmp_path, rec + rec))
    assert [t.text for t in session.turns] == ["same"]
    assert session.stats.duplicate_records == 1


def test_unknown_types_and_blocks_are_counted_not_fatal(tmp_path: Path):
    recs = [
        _user("hi", "u1"),
        {"type": "brand-new-type", "uuid": "x1", "payload": {"a": 1}},
        _assistant("msg_1", "a1", {"type": "hologram", "text": "future block"}),
        {"no_type": True},
    ]
    session = parse_session(_write(tmp_path, b"".join(_line(r) for r in recs)))
    assert session.stats.records_by_type["brand-new-type"] == 1
    assert session.stats.records_by_type["<missing>"] == 1
    assert session.stats.blocks_by_type["hologram"] == 1
    assert any(t.text == "future block" for t in session.turns)


def test_slash_commands_caveats_and_interrupts(tmp_path: Path):
    recs = [
        {**_user("<local-command-caveat>Caveat: ...</local-command-caveat>", "u1"), "isMeta": True},
        _user(
            "<command-name>/compact</command-name>\n<command-message>compact</command-message>"
            "\n<command-args>keep tests</command-args>",
            "u2",
        ),
        _user("<local-command-stdout>Compacted</local-command-stdout>", "u3"),
        _user("[Request interrupted by user]", "u4"),
        _user("<bash-input>git status</bash-input>", "u5"),
        _user("please fix the bug", "u6"),
    ]
    session = parse_session(_write(tmp_path, b"".join(_line(r) for r in recs)))
    kinds = [(t.kind, t.text) for t in session.turns]
    assert kinds[1] == ("prompt", "/compact keep tests")
    assert kinds[4] == ("prompt", "! git status")
    assert kinds[5] == ("prompt", "please fix the bug")
    assert [k for k, _ in kinds] == ["meta", "prompt", "meta", "meta", "prompt", "prompt"]


def test_agent_progress_becomes_subagent_turns(tmp_path: Path):
    inner = _assistant("msg_9", "inner-1", {"type": "text", "text": "subagent says hi"})
    progress = {
        "type": "progress",
        "uuid": "p1",
        "sessionId": SID,
        "data": {
            "type": "agent_progress",
            "agentId": "a1b2",
            "message": inner,
            "normalizedMessages": [inner, inner],
        },
    }
    session = parse_session(_write(tmp_path, _line(_user("go", "u1")) + _line(progress)))
    sub = [t for t in session.turns if t.agent_id == "a1b2"]
    assert [t.text for t in sub] == ["subagent says hi"]
    assert session.stats.subagents == 1


def test_session_files_for_file_and_folder(tmp_path: Path):
    proj = tmp_path / "-home-dev-app"
    sub = proj / SID / "subagents"
    sub.mkdir(parents=True)
    (proj / f"{SID}.jsonl").write_bytes(_line(_user("main", "u1")))
    (sub / "agent-abc.jsonl").write_bytes(_line({**_user("sub", "s1"), "isSidechain": True}))
    (proj / "agent-1234abcd.jsonl").write_bytes(
        _line({**_user("old", "o1"), "isSidechain": True, "agentId": "1234abcd"})
    )
    (proj / "memory").mkdir()
    (proj / "memory" / "notes.jsonl").write_text("{}\n", encoding="utf-8")
    for found in (discover_sessions(tmp_path), session_files_for([proj / f"{SID}.jsonl"])):
        (files,) = found
        assert files.session_id == SID
        assert {p.name for p in files.subagents} == {"agent-abc.jsonl", "agent-1234abcd.jsonl"}
    orphan = session_files_for([proj / "agent-1234abcd.jsonl"])
    assert orphan[0].main is None


def test_project_from_worktree_cwd(tmp_path: Path):
    rec = {**_user("x", "u1"), "cwd": "/repo/acme/.claude/worktrees/agent-a52886dc"}
    assert parse_session(_write(tmp_path, _line(rec))).project == "acme"


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "message",
                    "content",
                    "uuid",
                    "text",
                    "id",
                    "usage",
                    "timestamp",
                    "isMeta",
                    "data",
                    "agentId",
                    "input",
                    "name",
                ]
            )
            | st.text(max_size=8),
            children,
            max_size=6,
        )
    ),
    max_leaves=20,
)
_record_lines = st.one_of(
    st.binary(max_size=200),
    _json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(
        lambda t, m: json.dumps({"type": t, "message": m}).encode(),
        st.sampled_from(["user", "assistant", "system", "summary", "progress", "x"]),
        _json_values,
    ),
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(_record_lines, max_size=12), newline_at_end=st.booleans())
def test_parser_never_raises_on_arbitrary_lines(tmp_path_factory, lines, newline_at_end):
    root = tmp_path_factory.mktemp("prop")
    raw = b"\n".join(lines) + (b"\n" if newline_at_end else b"")
    path = root / f"{SID}.jsonl"
    path.write_bytes(raw)
    session = parse_session(SessionFiles(SID, path, ()))
    assert session.stats.turns == len(session.turns)
    list(iter_records(path))


def test_cut_record_does_not_leak_its_nested_objects(tmp_path: Path):
    # A cut agent_progress line holds complete nested user/assistant messages; resynchronising
    # inside it must not turn them into records of the main dialogue.
    inner = _assistant("msg_7", "inner-7", {"type": "text", "text": "nested only"})
    del inner["sessionId"]  # as in real agent_progress: the inner messages carry no envelope
    progress = {
        "type": "progress",
        "uuid": "p1",
        "sessionId": SID,
        "parentUuid": None,
        "data": {
            "type": "agent_progress",
            "agentId": "a9",
            "message": inner,
            "normalizedMessages": [inner, inner],
        },
    }
    cut = json.dumps(progress).encode()[:-40]
    summary = json.dumps({"type": "summary", "summary": "Kept title", "leafUuid": "u1"}).encode()
    session = parse_session(_write(tmp_path, _line(_user("hi", "u1")) + cut + summary + b"\n"))
    assert [t.text for t in session.turns] == ["hi"]
    assert session.title == "Kept title"
    assert session.stats.malformed_lines == 1


def test_tool_use_result_shortcut_keeps_everything_needed(tmp_path: Path):
    # Lines over 4 KiB are decoded only up to `toolUseResult` (a structured copy of the tool's
    # output); glued records, string results and other key orders still read in full.
    big = "x" * 5000

    def result(uuid: str, tool_result, after: dict | None = None) -> dict:
        rec = {
            "type": "user",
            "sessionId": SID,
            "timestamp": "2026-01-01T10:00:09.000Z",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": ""}],
            },
            "uuid": uuid,
            "toolUseResult": tool_result,
        }
        rec.update(after or {})
        return rec

    structured = result("r1", {"file": {"content": big}})
    as_string = result("r2", "Error: " + big)
    reordered = {k: v for k, v in result("r3", {"stdout": big}).items() if k != "uuid"}
    reordered["uuid"] = "r3"  # uuid after toolUseResult: the shortcut must not lose it
    glued = (
        json.dumps(result("r4", {"stdout": big})).encode()
        + json.dumps({"type": "summary", "summary": "Glued title", "leafUuid": "r4"}).encode()
    )
    raw = b"".join(_line(r) for r in (structured, as_string, reordered)) + glued + b"\n"
    session = parse_session(_write(tmp_path, raw))
    assert [t.uuid for t in session.turns] == ["r1", "r2", "r3", "r4"]
    assert session.turns[1].text.startswith("Error: ")  # the string result stands in
    assert session.title == "Glued title"
    assert session.stats.malformed_lines == 0
