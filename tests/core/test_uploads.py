"""Staging a pushed session (core/capture/uploads.py) after a server was killed while staging."""

from librarian_dagster.core.capture.uploads import (
    SESSIONS,
    VERSIONS,
    StagedFile,
    stage,
    staged_sessions,
    unstage,
)
from tests.helpers import transcript_line

SESSION = "a11ce000-0000-4000-8000-000000000001"


def _files(*prompts: str) -> list[StagedFile]:
    lines = b"".join(transcript_line(SESSION, "user", p, f"u{i}") for i, p in enumerate(prompts))
    return [StagedFile(f"-work-app/{SESSION}.jsonl", lines, 1_000_000.0)]


def test_what_a_killed_server_left_of_a_session_is_cleared_by_its_next_push(tmp_path):
    versions = tmp_path / VERSIONS / "claude-code"
    stage(tmp_path, "claude-code", SESSION, _files("first"), "a" * 64)
    # Killed while writing a version, and after writing one but before naming it.
    (versions / f".incoming-{SESSION}~x1y2").mkdir()
    (versions / f"{SESSION}.{'b' * 64}").mkdir()
    # Another session's, whose id starts with this one's: not this session's to clear.
    other = versions / f"{SESSION}.old.{'c' * 64}"
    other.mkdir()

    stage(tmp_path, "claude-code", SESSION, _files("first", "second"), "d" * 64)

    assert sorted(p.name for p in versions.iterdir()) == sorted(
        [f"{SESSION}.{'d' * 64}", other.name]
    )
    assert (tmp_path / SESSIONS / "claude-code" / SESSION).resolve().name.endswith("d" * 64)


def test_unstaging_a_session_leaves_another_whose_id_starts_with_its_own(tmp_path):
    versions = tmp_path / VERSIONS / "claude-code"
    stage(tmp_path, "claude-code", SESSION, _files("first"), "a" * 64)
    other = versions / f"{SESSION}.old.{'c' * 64}"
    other.mkdir()
    unstage(tmp_path, {SESSION: "claude-code"})
    assert [p.name for p in versions.iterdir()] == [other.name]
    assert not (tmp_path / SESSIONS / "claude-code" / SESSION).exists()
    assert staged_sessions(tmp_path) == []


def test_a_session_staged_but_not_recorded_waits_for_its_record(tmp_path):
    stage(tmp_path, "claude-code", SESSION, _files("first"), "a" * 64)
    assert [s.session_id for s in staged_sessions(tmp_path)] == [SESSION]
    # The server was killed after staging, before its record (whose person it is) committed.
    assert staged_sessions(tmp_path, recorded={}) == []
    assert staged_sessions(tmp_path, recorded={SESSION: None}) == []
    assert staged_sessions(tmp_path, recorded={SESSION: "b" * 64}) == []
    recorded = staged_sessions(tmp_path, recorded={SESSION: "a" * 64})
    assert [s.session_id for s in recorded] == [SESSION]


def test_a_temporary_link_a_killed_server_left_is_cleared_by_the_next_push(tmp_path):
    links = tmp_path / SESSIONS / "claude-code"
    stage(tmp_path, "claude-code", SESSION, _files("first"), "a" * 64)
    # Killed between making the new link under a temporary name and swapping it in.
    (links / f".{SESSION}.0123456789abcdef").symlink_to(f"../../{VERSIONS}/claude-code/x")
    # Another session's, whose id starts with this one's: not this session's to clear.
    other = links / f".{SESSION}.old.0123456789abcdef"
    other.symlink_to(f"../../{VERSIONS}/claude-code/y")

    stage(tmp_path, "claude-code", SESSION, _files("first", "second"), "d" * 64)

    assert sorted(p.name for p in links.iterdir()) == sorted([SESSION, other.name])
