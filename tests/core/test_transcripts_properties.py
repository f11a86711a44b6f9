"""Property tests for the parser: on any bytes it never raises, and it counts each line that is
not a JSON object exactly once, whatever surrounds it."""

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from librarian_dagster.core.capture.claude_code.files import session_files_for
from librarian_dagster.core.capture.claude_code.records import iter_records
from librarian_dagster.core.capture.readers import parse_session

SESSION = "aaaaaaaa-0000-0000-0000-000000000001"


def _record(text: str, role: str) -> bytes:
    rec = {
        "type": role,
        "uuid": f"u-{abs(hash(text))}",
        "sessionId": SESSION,
        "timestamp": "2026-01-01T00:00:00Z",
        "cwd": "/work/project",
        "message": {"role": role, "content": text},
    }
    return json.dumps(rec).encode("utf-8")


good_lines = st.builds(_record, st.text(max_size=200), st.sampled_from(["user", "assistant"]))
# Lines that are not JSON objects: prose without braces or quotes, bare JSON values, binary junk.
junk_lines = st.one_of(
    st.text(alphabet="abcdefghij klmnop.,;:!?-", min_size=1, max_size=80)
    .filter(lambda t: t.strip() != "")
    .map(lambda t: t.encode("utf-8")),
    st.sampled_from([b"42", b"[1, 2]", b'"a string"', b"null", b"true"]),
    st.binary(min_size=1, max_size=80).filter(
        # Not blank to the parser either: whitespace such as \x0b or \x1c makes a blank line.
        lambda b: (
            b"\n" not in b
            and b"{" not in b
            and b.replace(b"\x00", b"").decode("utf-8", "replace").strip() != ""
        )
    ),
)


def _write(tmp: Path, lines: list[bytes], newline_at_end: bool) -> Path:
    path = tmp / f"{SESSION}.jsonl"
    path.write_bytes(b"\n".join(lines) + (b"\n" if newline_at_end else b""))
    return path


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(st.tuples(st.booleans(), st.one_of(good_lines, junk_lines)), max_size=30),
    newline_at_end=st.booleans(),
)
def test_every_line_that_is_not_an_object_is_counted_once(tmp_path, lines, newline_at_end):
    raw = [line for _, line in lines]
    path = _write(tmp_path, raw, newline_at_end)
    (files,) = session_files_for([path])
    session = parse_session(files)  # never raises
    expected = sum(1 for line in raw if not line.startswith(b"{"))
    assert session.stats.malformed_lines == expected
    assert len(list(iter_records(path))) == len(raw) - expected


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=4000))
def test_any_bytes_parse_without_raising(tmp_path, data):
    path = tmp_path / f"{SESSION}.jsonl"
    path.write_bytes(data)
    (files,) = session_files_for([path])
    session = parse_session(files)
    assert session.stats.malformed_lines <= session.stats.lines
    assert session.skip_reason is not None or session.turns


def test_deeply_nested_json_is_a_malformed_line_not_a_crash(tmp_path):
    path = tmp_path / f"{SESSION}.jsonl"
    deep = b"[" * 100_000 + b"]" * 100_000
    nested_object = b'{"a":' * 50_000 + b"1" + b"}" * 50_000
    path.write_bytes(_record("hello", "user") + b"\n" + deep + b"\n" + nested_object + b"\n")
    (files,) = session_files_for([path])
    session = parse_session(files)
    assert session.stats.malformed_lines == 2
    assert [t.text for t in session.turns if t.kind == "prompt"] == ["hello"]


def test_a_50_mb_line_and_nul_bytes_are_handled(tmp_path):
    path = tmp_path / f"{SESSION}.jsonl"
    huge = _record("x" * (50 * 1024 * 1024), "assistant")
    with path.open("wb") as fh:
        fh.write(_record("first question", "user") + b"\n")
        fh.write(huge + b"\n")
        fh.write(b"\x00" * 1000 + b"\n")
        fh.write(b"\xff\xfe not utf-8 \x80\n")
    (files,) = session_files_for([path])
    session = parse_session(files)
    assert session.stats.malformed_lines == 1  # the NUL-only line is blank; the bytes are junk
    assert any(t.kind == "prompt" and t.text == "first question" for t in session.turns)
    assert session.stats.bytes > 50 * 1024 * 1024
