"""user_prompt_submit.py: a tagging reminder once per session, only where a library exists."""

import json
import os
import time

import pytest
from hookutil import make_library, user_prompt_event

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


def test_reminds_once_per_session(hooks, tmp_path):
    lib = make_library(tmp_path / "repo", {})
    proc = hooks.run("user_prompt_submit", user_prompt_event(str(lib.parent / "deep")))
    assert proc.returncode == 0, proc.stderr
    specific = json.loads(proc.stdout)["hookSpecificOutput"]
    assert specific["hookEventName"] == "UserPromptSubmit"
    text = specific["additionalContext"]
    assert "## [TAG: " in text and "type: " in text and str(lib / ".scratch.md") in text
    assert len(text) < 1000

    again = hooks.run("user_prompt_submit", user_prompt_event(str(lib.parent)))
    assert again.returncode == 0 and again.stdout == b""
    other = hooks.run("user_prompt_submit", user_prompt_event(str(lib.parent), session="other"))
    assert b"TAG:" in other.stdout


def test_librarian_path_names_the_library_and_its_parent_the_tree(hooks, tmp_path):
    make_library(tmp_path / "repo", {})  # found by the walk, but LIBRARIAN_PATH wins
    notes = make_library(tmp_path / "elsewhere", {})
    env = {"LIBRARIAN_PATH": str(notes)}
    proc = hooks.run("user_prompt_submit", user_prompt_event(str(tmp_path / "repo")), env)
    text = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    assert f"notes in {notes} (it mirrors the folders of {notes.parent})" in text


def test_silent_without_a_library(hooks, tmp_path):
    (tmp_path / "bare").mkdir()
    proc = hooks.run("user_prompt_submit", user_prompt_event(str(tmp_path / "bare")))
    assert proc.returncode == 0 and proc.stdout == b""
    assert "no library" in hooks.log_lines()[-1]


def test_week_old_state_files_are_swept_when_a_session_starts(hooks, tmp_path):
    lib = make_library(tmp_path / "repo", {})
    state = tmp_path / "state"
    state.mkdir()
    old, fresh = state / "old-session.notes.json", state / "fresh-session.notes.json"
    for path in (old, fresh):
        path.write_text("{}", encoding="utf-8")
    eight_days_ago = time.time() - 8 * 24 * 3600
    os.utime(old, (eight_days_ago, eight_days_ago))
    env = {"LIBRARIAN_STATE_DIR": str(state)}
    hooks.run("user_prompt_submit", user_prompt_event(str(lib.parent), session="new"), env)
    assert not old.exists() and fresh.exists() and (state / "new.reminded").exists()
