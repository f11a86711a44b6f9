"""Codex's reader (core/capture/codex/): hand-made rollouts in Codex's real format (0.137 and
0.169, a review thread, a forked helper), one the real CLI 0.171 wrote with hooks, and every
Codex session of the agents corpus."""

import json
import re
import shlex
import shutil
from datetime import UTC
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from librarian_dagster.core.capture import readers
from librarian_dagster.core.capture.codex import READER
from librarian_dagster.core.capture.codex.shell import _tokens, apply_patch_in, classify
from librarian_dagster.core.capture.patches import patch_paths
from librarian_dagster.core.capture.session import CHANGE, READ, RUN, SEARCH, UNREADABLE
from librarian_dagster.core.capture.touches import normal_path
from librarian_dagster.core.redaction.scan import find_secrets, redact_session

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents" / "codex"
MAIN = "019e0000-1111-7000-8000-000000000001"
REVIEW = "019e0000-2222-7000-8000-000000000002"
FORK = "019e0000-3333-7000-8000-000000000003"
NEW = "019f0000-4444-7000-8000-000000000004"
LIVE = "01a23df3-7051-7aa1-848b-7e46d2d7e6aa"
"""rollout-0171-live.jsonl: written by codex-cli 0.171.0 in tests/hooks/test_codex_cli.py's run
(a stand-in model reads notes.txt, patches it, answers), its hooks' contexts in it."""


def _sessions(root: Path = FIXTURES) -> dict[str, readers.SessionFiles]:
    found = readers.find([root])
    assert found.unknown == []
    return {s.session_id: s for s in found.sessions}


def _uses(session, action: str | None = None):
    return [u for t in session.turns for u in t.tool_uses if action is None or u.action == action]


def test_find_tells_codex_and_attaches_spawned_threads():
    sessions = _sessions()
    assert set(sessions) == {MAIN, NEW, LIVE}
    main = sessions[MAIN]
    assert main.agent == "codex"
    assert sorted(p.name for p in main.subagents) == sorted(
        [f"rollout-2026-05-01T10-10-00-{REVIEW}.jsonl", f"rollout-2026-05-01T10-20-00-{FORK}.jsonl"]
    )
    # A file given alone picks up the threads it spawned, anywhere under sessions/.
    alone = READER.files_for([main.main])
    assert len(alone) == 1 and len(alone[0].subagents) == 2
    # A thread given alone, its parent absent, is a session of its own.
    (child,) = READER.files_for([p for p in main.subagents if REVIEW in p.name])
    assert child.session_id == REVIEW and child.subagents == ()


def test_claims_codex_only(tmp_path: Path):
    claude = tmp_path / "c.jsonl"
    claude.write_text(json.dumps({"type": "user", "sessionId": "x", "message": {}}) + "\n")
    assert not READER.claims(claude)
    assert readers.agent_of(claude) == "claude-code"
    assert readers.agent_of(_sessions()[NEW].main) == "codex"


def test_head_is_project_and_start():
    head = READER.head(_sessions()[MAIN])
    assert head.project == "proj"
    assert head.started_at is not None and head.started_at.tzinfo is not None


def test_the_0137_rollout_fills_the_model():
    session = readers.parse_session(_sessions()[MAIN])
    assert session.skip_reason is None
    assert (session.session_id, session.agent, session.project) == (MAIN, "codex", "proj")
    assert session.cwd == "/home/dev/proj" and session.git_branch == "feature/x"
    assert session.title == "Fix the parser"
    assert set(session.versions) == {"0.137.0", "0.139.0"}
    assert set(session.models) == {"gpt-5.4", "gpt-5.4-mini"}
    assert session.started_at and session.started_at.tzinfo == UTC
    assert session.ended_at and session.ended_at > session.started_at
    assert (session.input_tokens, session.output_tokens, session.cache_read_tokens) == (
        3000,
        700,
        9000,
    )
    main = [t for t in session.turns if t.agent_id is None]
    prompts = [t.text for t in main if t.kind == "prompt"]
    # The prompt once (the event_msg copy is not a second one), its image a placeholder.
    assert prompts == ["Fix the parser and look at this screenshot\n[image]"]
    assert [t.kind for t in main if t.kind == "meta"] == ["meta"]
    assert any(t.kind == "compact_summary" for t in main)
    assert not any(t.kind == "thinking" for t in session.turns)
    assert session.stats.thinking_blocks == 1
    text = json.dumps([t.text for t in session.turns])
    assert "base64" not in text and "ENCRYPTED" not in text and "permissions" not in text


def test_tool_uses_say_what_they_did():
    session = readers.parse_session(_sessions()[MAIN])
    main = [u for t in session.turns if t.agent_id is None for u in t.tool_uses]
    (patch,) = [u for u in main if u.action == CHANGE]
    assert patch.file_paths == (
        "src/app.py",
        "docs/notes.md",
        "old/unused.py",
        "src/name.py",
        "src/renamed.py",
    )
    assert patch.summary == "apply_patch src/app.py (+4 more)" and not patch.is_error
    reads = {u.id: u.file_paths for u in main if u.action == READ}
    assert reads == {
        "call_read1": ("src/app.py",),
        "call_read2": ("src/util.py",),
        # Its own workdir, not the session's: made absolute there.
        "call_read3": ("/home/dev/other/README.md",),
    }
    (test,) = [u for u in main if u.action == RUN]
    assert test.command == "go test ./..." and test.is_error
    assert test.summary == "exec_command: go test ./..."
    assert {u.summary for u in main if u.action == SEARCH} == {
        "web_search: python shlex punctuation_chars",
        "exec_command: rg -n parse src tests",
    }


def test_bad_and_unknown_records_are_counted_not_fatal():
    stats = readers.parse_session(_sessions()[MAIN]).stats
    assert stats.malformed_lines == 1
    assert stats.malformed_examples and "Fix the parser" not in stats.malformed_examples[0]
    assert stats.skipped_by_kind == {
        "mystery_record": 1,
        "event_msg:mystery_event": 1,
        "response_item:mystery_item": 1,
    }
    assert stats.records_by_type["mystery_record"] == 1
    assert stats.records_by_type["session_meta"] == 4  # main, review, fork and its copy


def test_spawned_threads_follow_the_dialogue_without_the_parents_copy():
    session = readers.parse_session(_sessions()[MAIN])
    agents = [t.agent_id for t in session.turns]
    first_thread = next(i for i, a in enumerate(agents) if a is not None)
    assert all(a is None for a in agents[:first_thread])
    assert all(a is not None for a in agents[first_thread:])
    assert list(dict.fromkeys(a for a in agents if a)) == [REVIEW, FORK]
    assert session.stats.subagents == 2
    fork = [t for t in session.turns if t.agent_id == FORK]
    assert [t.text for t in fork if t.kind == "prompt"] == ["Check the tests"]
    # The parent's patch, copied into the fork's history, is the parent's alone.
    assert len(_uses(session, CHANGE)) == 1
    assert [u.file_paths for u in _uses(session, READ) if u.id == "call_fork1"] == [
        ("tests/test_app.py",)
    ]
    assert session.stats.duplicate_records == 5
    review = [t for t in session.turns if t.agent_id == REVIEW]
    assert review[0].kind == "meta" and review[1].kind == "prompt"


def test_include_thinking_keeps_the_summary_never_the_encrypted():
    session = readers.parse_session(_sessions()[MAIN], include_thinking=True)
    (thinking,) = [t for t in session.turns if t.kind == "thinking"]
    assert thinking.text == "**Reading the parser first**"


def test_the_0169_rollout_knows_its_new_records():
    session = readers.parse_session(_sessions()[NEW])
    assert session.skip_reason is None and session.versions == ("0.169.0",)
    assert session.stats.skipped_by_kind == {}
    assert session.stats.records_by_type["world_state"] == 1
    assert session.stats.records_by_type["token_usage_record"] == 1
    changes = {u.id: (u.file_paths, u.is_error) for u in _uses(session, CHANGE)}
    assert changes == {
        "call_p2": (("CHANGELOG.md",), True),
        "call_p3": (("docs/guide.md",), False),  # apply_patch in a heredoc, after `cd docs`
    }
    assert session.models == ("gpt-5.5",)


def test_the_live_0171_rollout_leaves_the_hooks_context_out():
    session = readers.parse_session(_sessions()[LIVE])
    assert session.skip_reason is None and session.versions == ("0.171.0",)
    assert session.stats.skipped_by_kind == {}
    assert session.stats.records_by_type["token_usage_record"] == 3
    # Each hook's additionalContext is a developer message: never a prompt, never a turn.
    prompts = [t.text for t in session.turns if t.kind == "prompt"]
    assert prompts == ["Read notes.txt, then change beta to gamma."]
    assert not [t for t in session.turns if "test-context" in t.text]
    uses = [(u.name, u.action, u.file_paths) for u in _uses(session)]
    assert uses == [
        ("exec_command", READ, ("notes.txt",)),
        ("apply_patch", CHANGE, ("notes.txt",)),
    ]
    assert (session.input_tokens, session.output_tokens) == (3600, 120)


def test_empty_and_unreadable_files(tmp_path: Path):
    src = _sessions()[NEW].main
    assert src is not None
    copy = tmp_path / src.name
    shutil.copy(src, copy)
    (files,) = READER.files_for([copy])
    copy.write_bytes(b"")
    assert readers.parse_session(files).skip_reason == "empty file"
    copy.unlink()
    assert str(readers.parse_session(files).skip_reason).startswith(UNREADABLE)
    meta_only = tmp_path / "m.jsonl"
    meta_only.write_text(src.read_text().splitlines()[0] + "\n")
    (files,) = READER.files_for([meta_only])
    assert str(readers.parse_session(files).skip_reason).startswith("no conversation")


@pytest.mark.parametrize(
    ("command", "action", "paths"),
    [
        ("cat a.go", READ, ("a.go",)),
        ("sed -n '1,220p' README.md", READ, ("README.md",)),
        ("nl -ba x.go | sed -n '1,20p'", READ, ("x.go",)),
        ("cat f.txt | head -5", READ, ("f.txt",)),
        ("cd sub && cat x.md", READ, ("sub/x.md",)),
        ("sed -n 1,9p a.go && printf '\\n--\\n' && tail -n 5 b.go", READ, ("a.go", "b.go")),
        ('rg -n "func X" a/b.go c.go', READ, ("a/b.go", "c.go")),
        ("head -n 50 f.py 2>/dev/null", READ, ("f.py",)),
        ("rg -n foo internal cmd", SEARCH, ()),
        ("rg --files", SEARCH, ()),
        ("grep -R foo .", SEARCH, ()),
        ("find . -maxdepth 2 | sort", SEARCH, ()),
        ("ls -la", SEARCH, ()),
        ("go test ./...", RUN, ()),
        ("cat docs/*.md", RUN, ()),
        ("sed -i s/a/b/ f.txt", RUN, ()),
        ("cat a > b", RUN, ()),
        ("cat $(ls)", RUN, ()),
        ("git show HEAD:a.go | sed -n 1,5p", RUN, ()),
        ("cat 'unterminated", RUN, ()),
    ],
)
def test_which_shell_commands_read(command: str, action: str, paths: tuple[str, ...]):
    found = classify(command)
    assert (found.action, found.paths) == (action, paths)


def _shlex_tokens(line: str) -> list[str] | None:
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError:
        return None


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet=list("ab1 \t\r\n'\"\\|&;<>()#$*=-./~`{}é\x0b\xa0"), max_size=24))
@example(r"""rg -n "a\"b\\c\d" 'x''' \ y|z&&w 2>&1 >/dev/null""")
@example("cat 'open")
@example("'")  # Python 3.11.2 matched possessive quantifiers wrongly here
@example('a"b')
@example("sed -n 1p a#b")
def test_the_tokenizer_reads_as_shlex_does(line: str):
    """The command tokenizer gives shlex's tokens (posix, punctuation runs, whitespace split),
    quirks included (`#` begins a comment mid-word), and None where shlex raises."""
    assert _tokens(line) == _shlex_tokens(line)


_PATCH_PART = st.sampled_from(
    [
        *("*** Add File: a.py", "*** Update File: b/c.go", "*** Move to: d", "*** Delete File: e"),
        *("x ", "  ", "\n", "\n\n", " \t", "*** ", "Add File: ", "z", "\r\n"),
    ]
)
_ANCHORED = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): *(.+?)\s*$", re.M)


@settings(max_examples=2000, deadline=None)
@given(st.lists(_PATCH_PART, max_size=10).map("".join))
def test_patch_paths_are_the_lines_that_begin_so(patch: str):
    # The file-line pattern begins with its literal, not `^`: only lines it begins count.
    expected = tuple(dict.fromkeys(m.group(1) for m in _ANCHORED.finditer(patch) if m.group(1)))
    assert patch_paths(patch) == expected


def test_apply_patch_heredoc():
    found = apply_patch_in("cd pkg && apply_patch <<'EOF'\n*** Begin Patch\n*** End Patch\nEOF")
    assert found is not None and found[1] == "pkg"
    assert apply_patch_in("echo '*** Begin Patch'") is None


# --- the agents corpus ------------------------------------------------------------------------

_PATCH_LINE = re.compile(r"\*\*\* (?:Add File|Update File|Delete File|Move to): ([^\\\"]+?)\s*\\n")


def _patched_in(path: Path) -> set[str]:
    """The paths in a rollout's apply_patch calls, read from the raw JSON text of each call."""
    found: set[str] = set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        for part in line.split('}{"timestamp"'):
            call = re.search(r'"type":"(custom_tool_call|function_call)"', part)
            if call and "apply_patch" in part and '"type":"session_meta"' not in part:
                found.update(m.group(1) for m in _PATCH_LINE.finditer(part))
    return found


@pytest.fixture(scope="module")
def codex_sessions(agents_corpus: Path):
    found = readers.find([agents_corpus / "codex"])
    assert found.unknown == []
    return found.sessions


@pytest.fixture(scope="module")
def parsed_codex_sessions(codex_sessions):
    """Each corpus session with what the reader makes of it, parsed once for the tests below."""
    return [(files, readers.parse_session(files)) for files in codex_sessions]


def test_every_corpus_session_parses(codex_sessions, parsed_codex_sessions):
    assert {s.agent for s in codex_sessions} == {"codex"}
    # 88 rollouts: the 8 helper threads of git-sync join their parent, the 23 review threads
    # (their parents are not in the corpus) are sessions of their own.
    assert len(codex_sessions) == 80
    assert sum(len(s.subagents) for s in codex_sessions) == 8
    for files, session in parsed_codex_sessions:
        assert session.skip_reason is None, files.session_id
        assert session.turns and session.started_at and session.versions and session.models
        assert session.stats.malformed_lines == 0
        assert session.stats.skipped_by_kind == {}, session.stats.skipped_by_kind
        assert any(t.kind == "prompt" for t in session.turns)


def test_corpus_changes_are_the_patches(parsed_codex_sessions):
    checked = 0
    for files, session in parsed_codex_sessions:
        said = {
            normal_path(p, session.cwd)
            for u in _uses(session, CHANGE)
            for u_p in [u]
            for p in u_p.file_paths
        }
        patched = {normal_path(p, session.cwd) for path in files.paths for p in _patched_in(path)}
        assert said == patched, files.session_id
        checked += bool(patched)
    assert checked >= 30


def test_corpus_helpers_are_attached_to_their_parent(codex_sessions):
    (parent,) = [s for s in codex_sessions if s.subagents]
    assert parent.session_id == "019d7d08-46c9-7f73-affe-4e6ca9852d56"
    session = readers.parse_session(parent)
    assert session.stats.subagents == 8
    assert {t.agent_id for t in session.turns} - {None} == {p.stem for p in parent.subagents}


def test_corpus_sessions_redact_clean(parsed_codex_sessions):
    for _files, session in parsed_codex_sessions:
        redacted, _ = redact_session(session)
        for turn in redacted.turns:
            assert find_secrets(turn.text) == []
            for use in turn.tool_uses:
                assert find_secrets(use.summary) == []
                assert find_secrets(use.command or "") == []
