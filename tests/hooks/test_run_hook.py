"""hooks/run-hook.sh: the hooks run with the Python `python3` resolved to once, not through it.

A fake `python3` first on PATH stands for a version manager's shim: it counts its calls and
hands over to the real interpreter, as pyenv's does.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hookutil import REPO, make_library, pre_tool_use_event

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


COMMAND = ["sh", str(REPO / "hooks" / "run-hook.sh"), "pre_tool_use.py"]


def _shim(tmp_path: Path) -> tuple[Path, Path]:
    """A `python3` that logs each call and runs the real interpreter; its folder and its log."""
    folder, calls = tmp_path / "shims", tmp_path / "shim-calls"
    folder.mkdir()
    shim = folder / "python3"
    shim.write_text(f'#!/bin/sh\necho call >> "{calls}"\nexec "{sys.executable}" "$@"\n')
    shim.chmod(0o755)
    return folder, calls


def _edit(hooks, tmp_path: Path, shims: Path, cache: Path) -> subprocess.CompletedProcess:
    repo = tmp_path / "repo"
    if not repo.exists():
        make_library(repo, {"tech.md": "- kept in the library"})
    env = dict(hooks.env, PATH=f"{shims}{os.pathsep}{hooks.env['PATH']}",
               XDG_CACHE_HOME=str(cache))  # fmt: skip
    # A session of its own each time: a note is injected once per session.
    event = pre_tool_use_event(str(repo / "f.py"), str(repo), session=os.urandom(8).hex())
    proc = subprocess.run(COMMAND, input=json.dumps(event).encode(), capture_output=True,
                          env=env, cwd=str(hooks.home), timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    context = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "kept in the library" in context
    return proc


def _calls(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_the_shim_is_asked_once_and_the_python_it_names_runs_every_hook_after(hooks, tmp_path):
    shims, calls = _shim(tmp_path)
    cache = tmp_path / "cache"
    _edit(hooks, tmp_path, shims, cache)
    remembered = (cache / "librarian" / "hook-python").read_text().strip()
    assert os.path.samefile(remembered, sys.executable) and _calls(calls) == 1
    for _ in range(3):
        _edit(hooks, tmp_path, shims, cache)
    assert _calls(calls) == 1


def test_a_remembered_python_that_is_gone_is_looked_up_again(hooks, tmp_path):
    shims, calls = _shim(tmp_path)
    cache = tmp_path / "cache"
    (cache / "librarian").mkdir(parents=True)
    (cache / "librarian" / "hook-python").write_text(str(tmp_path / "uninstalled" / "python3"))
    _edit(hooks, tmp_path, shims, cache)
    assert _calls(calls) == 1
    remembered = (cache / "librarian" / "hook-python").read_text().strip()
    assert os.path.samefile(remembered, sys.executable)


def test_a_cache_that_cannot_be_written_still_runs_the_hook(hooks, tmp_path):
    shims, calls = _shim(tmp_path)
    cache = tmp_path / "not-a-folder"
    cache.write_text("a file where the cache folder would go")
    for _ in range(2):
        proc = _edit(hooks, tmp_path, shims, cache)
        assert proc.stderr == b""
    assert _calls(calls) == 2  # nothing remembered: asked each time, and the hook still ran
    assert list(tmp_path.glob("not-a-folder*")) == [cache]
