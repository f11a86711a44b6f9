"""Hooks given bad input: huge, deep or odd stdin, unreadable library entries, broken scratch
files. Each exits 0 with nothing on stderr, never writes outside the library, and loses nothing.
"""

import json
import os

import pytest
from hookutil import make_library, pre_tool_use_event, stop_event, user_prompt_event

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

HOOK_NAMES = ["pre_tool_use", "user_prompt_submit", "stop"]


def _ok(proc) -> str:
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    return proc.stdout.decode("utf-8")


def _snapshot(root) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


@pytest.mark.parametrize("name", HOOK_NAMES)
@pytest.mark.parametrize(
    "stdin",
    [
        pytest.param(b"[" * 200_000, id="deeply-nested-array"),
        pytest.param(b'{"a":' * 100_000, id="deeply-nested-object"),
        pytest.param(b"\x00" * 1000, id="nul-bytes"),
        pytest.param(os.urandom(4096), id="random-bytes"),
        pytest.param(b"x" * (20 * 1024 * 1024), id="20MB-of-junk"),
    ],
)
def test_pathological_stdin_exits_0_silently(hooks, name, stdin):
    assert _ok(hooks.run(name, stdin)) == ""
    [line] = hooks.log_lines()
    assert "error" in line and len(line) < 1100


def test_a_huge_valid_event_still_works(hooks, tmp_path):
    repo = tmp_path / "repo"
    make_library(repo, {"tech.md": "- the note"})
    event = pre_tool_use_event(str(repo / "f.py"), str(repo), tool="Write")
    event["tool_input"]["content"] = "y" * (20 * 1024 * 1024)  # a 20 MB file being written
    assert "- the note" in _ok(hooks.run("pre_tool_use", event))
    prompt = user_prompt_event(str(repo), prompt="word " * 2_000_000)
    assert "_memory_library" in _ok(hooks.run("user_prompt_submit", prompt))


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_nul_bytes_and_odd_types_inside_the_event_exit_0(hooks, tmp_path, name):
    repo = tmp_path / "repo"
    make_library(repo, {"tech.md": "- t", ".scratch.md": "## [TAG: a, type: tech]\n- x\n"})
    for event in (
        {"session_id": "s\x00", "cwd": f"{repo}\x00/evil", "tool_name": "Edit"},
        {"session_id": 5, "cwd": ["a"], "tool_input": {"file_path": {"x": 1}}, "prompt": 3},
        {"session_id": "s" * 100_000, "cwd": str(repo), "stop_hook_active": "yes"},
    ):
        _ok(hooks.run(name, event))
    assert not (tmp_path / "evil").exists()


def test_unreadable_and_odd_note_entries_are_passed_over(hooks, tmp_path):
    repo = tmp_path / "repo"
    lib = make_library(repo, {"src/tech.md": "- readable note"})
    notes = lib / "src"
    (notes / "loop.md").symlink_to(notes / "loop.md")  # a symlink loop
    (notes / "dangling.md").symlink_to(tmp_path / "gone.md")
    os.mkfifo(notes / "fifo.md")  # opening it would block the hook forever
    (notes / "folder.md").mkdir()
    (notes / "latin1.md").write_bytes(b"- caf\xe9 cr\xe8me\n")  # not UTF-8
    (notes / "nul.md").write_bytes(b"- before\x00after\n")
    out = _ok(hooks.run("pre_tool_use", pre_tool_use_event(str(repo / "src" / "f.py"), str(repo))))
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert "- readable note" in context
    assert "caf" in context  # decoded with replacement rather than dropped


def test_a_library_level_that_is_a_file_or_a_loop_does_not_break_the_hooks(hooks, tmp_path):
    repo = tmp_path / "repo"
    lib = make_library(repo, {"tech.md": "- root note"})
    (lib / "src").write_text("a file where a folder should be", encoding="utf-8")
    (lib / "deep").symlink_to(lib / "deep", target_is_directory=True)
    for path in (repo / "src" / "f.py", repo / "deep" / "x" / "f.py"):
        out = _ok(hooks.run("pre_tool_use", pre_tool_use_event(str(path), str(repo))))
        assert "- root note" in out or out == ""
    scratch = "## [TAG: src, type: tech]\n- into a file?\n\n## [TAG: deep/x, type: tech]\n- loop\n"
    (lib / ".scratch.md").write_text(scratch, encoding="utf-8")
    _ok(hooks.run("stop", stop_event(str(repo))))
    # Neither block could be filed; both wait in the scratch file, nothing lost.
    kept = (lib / ".scratch.md").read_text(encoding="utf-8")
    assert "- into a file?" in kept and "- loop" in kept


def test_a_scratch_file_that_is_not_utf8_is_left_byte_for_byte(hooks, tmp_path):
    repo = tmp_path / "repo"
    lib = make_library(repo, {})
    raw = b"## [TAG: a, type: tech]\n- caf\xe9\n\x00\xff\n"
    (lib / ".scratch.md").write_bytes(raw)
    _ok(hooks.run("stop", stop_event(str(repo))))
    assert (lib / ".scratch.md").read_bytes() == raw
    assert "error" in hooks.log_lines()[-1]


BROKEN_TAGS = """\
## [TAG: unterminated, type: tech
- a
## [TAG: , type: tech]
- b
## [TAG: a, type: ]
- c
## [TAG: a, type: tech, type: patterns]
- d
## [TAG a type tech]
- e
## [TAG: a\x00b, type: tech]
- f
## [TAG: %s, type: tech]
- g
## [TAG: ok/fine, type: tech]
- the one good block
""" % ("x/" * 5000)


def test_broken_tags_stay_in_the_scratch_and_nothing_leaves_the_library(hooks, tmp_path):
    repo = tmp_path / "repo"
    lib = make_library(repo, {".scratch.md": BROKEN_TAGS})
    outside = _snapshot(tmp_path)
    _ok(hooks.run("stop", stop_event(str(repo))))
    assert "- the one good block" in (lib / "ok" / "fine" / "tech.md").read_text("utf-8")
    kept = (lib / ".scratch.md").read_text(encoding="utf-8")
    assert "the one good block" not in kept
    # Every other bullet is either still in the scratch file or filed inside the library.
    filed = "".join(
        p.read_text("utf-8", errors="replace") for p in lib.rglob("*.md") if p.name != ".scratch.md"
    )
    for bullet in "abcdefg":
        assert f"- {bullet}\n" in kept or f"- {bullet}\n" in filed, bullet
    # Written: the library, the log, and the hooks' own data folder (bytecode) under HOME.
    changed = {k for k, v in _snapshot(tmp_path).items() if outside.get(k) != v}
    allowed = ("repo/_memory_library/", "home/.claude/librarian/", "librarian.log")
    assert changed and all(k.startswith(allowed) for k in changed), changed
