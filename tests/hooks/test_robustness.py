"""Never break the session: any internal error -> exit 0, no stdout, one bounded log line."""

import json
import os
import subprocess
import sys

import pytest
from hookutil import HOOKS, make_library, pre_tool_use_event, stop_event

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


BAD_INPUTS = [b"", b"not json", b"[1, 2]", b'"str"', b"\xff\xfe\x00", b'{"tool_input": 5}']


@pytest.mark.parametrize("name", ["pre_tool_use", "user_prompt_submit", "stop"])
@pytest.mark.parametrize("stdin", BAD_INPUTS)
def test_bad_stdin_exits_0_silently(hooks, name, stdin):
    proc = hooks.run(name, stdin)
    assert proc.returncode == 0
    assert proc.stdout == b""
    assert len(hooks.log_lines()) == 1


def test_internal_error_is_logged_once_and_swallowed(hooks, tmp_path):
    repo = tmp_path / "repo"
    lib = make_library(repo, {".scratch.md": "## [TAG: a, type: patterns]\n- x\n"})
    # A directory where the lock file should be: opening it fails inside the hook.
    (lib / ".librarian.lock").mkdir()
    proc = hooks.run("stop", stop_event(str(repo)))
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    lines = hooks.log_lines()
    assert len(lines) == 1 and " stop " in lines[0] and "error:" in lines[0]
    assert "- x" in (lib / ".scratch.md").read_text(encoding="utf-8")


def test_unwritable_state_folder_fails_silently(hooks, tmp_path):
    repo = tmp_path / "repo"
    make_library(repo, {"tech.md": "- t"})
    blocker = tmp_path / "state-is-a-file"
    blocker.write_text("", encoding="utf-8")
    event = pre_tool_use_event(str(repo / "f.py"), str(repo))
    proc = hooks.run("pre_tool_use", event, {"LIBRARIAN_STATE_DIR": str(blocker / "sub")})
    assert proc.returncode == 0 and proc.stdout == b""
    assert "error:" in hooks.log_lines()[-1]


def test_log_is_bounded(hooks, tmp_path):
    hooks.log.write_text("x" * 300_000 + "\n", encoding="utf-8")
    hooks.run("stop", b"{}")
    assert hooks.log.stat().st_size < 2000
    assert os.path.exists(str(hooks.log) + ".1")


def test_default_log_goes_under_home(hooks, tmp_path):
    env = dict(hooks.env)
    env.pop("LIBRARIAN_LOG")
    subprocess.run(
        [sys.executable, "-E", "-S", str(HOOKS / "stop.py")],
        input=json.dumps(stop_event(str(tmp_path))).encode(),
        env=env,
        timeout=60,
        check=True,
    )
    assert (hooks.home / ".claude" / "librarian.log").read_text(encoding="utf-8").count("\n") == 1


def test_windows_style_paths_do_not_crash(hooks, tmp_path):
    event = pre_tool_use_event("C:\\project\\src\\index.ts", "C:\\project", tool="Write")
    proc = hooks.run("pre_tool_use", event)
    assert proc.returncode == 0 and proc.stdout == b""
