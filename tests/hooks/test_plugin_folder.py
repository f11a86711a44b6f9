"""The hooks write nothing into the plugin's own folder, which may be read-only once installed.

Each hook runs from a fresh copy of the plugin's files (no bytecode cache yet), as Claude Code
runs it: `python3 -E -S` with CLAUDE_PLUGIN_ROOT and CLAUDE_PLUGIN_DATA set.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hookutil import REPO, make_library, pre_tool_use_event, stop_event, user_prompt_event


def _plugin_copy(tmp_path: Path) -> Path:
    """The files the hooks run from: hooks/ and the stdlib-only module of library rules."""
    plugin = tmp_path / "plugin"
    shutil.copytree(REPO / "hooks", plugin / "hooks", ignore=shutil.ignore_patterns("__pycache__"))
    library = plugin / "librarian_dagster" / "core" / "library"
    library.mkdir(parents=True)
    for name in ("__init__.py", "core/__init__.py", "core/library/__init__.py"):
        (plugin / "librarian_dagster" / name).write_text("", encoding="utf-8")
    shutil.copy(REPO / "librarian_dagster" / "core" / "library" / "paths.py", library)
    return plugin


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _run(hooks, plugin: Path, name: str, event: dict, **env: str):
    return subprocess.run(
        [sys.executable, "-E", "-S", str(plugin / "hooks" / f"{name}.py")],
        input=json.dumps(event).encode("utf-8"),
        capture_output=True,
        env={**hooks.env, "CLAUDE_PLUGIN_ROOT": str(plugin), **env},
        cwd=str(hooks.home),
        timeout=60,
    )


def _events(repo: Path) -> list[tuple[str, dict]]:
    return [
        ("pre_tool_use", pre_tool_use_event(str(repo / "src" / "f.py"), str(repo))),
        ("user_prompt_submit", user_prompt_event(str(repo))),
        ("stop", stop_event(str(repo))),
    ]


@pytest.mark.process
def test_no_hook_writes_into_the_plugin_folder_and_bytecode_goes_to_the_data_folder(
    hooks, tmp_path
):
    plugin = _plugin_copy(tmp_path)
    before = _files(plugin)
    repo = tmp_path / "repo"
    scratch = "## [TAG: src, type: tech]\n- n\n"
    lib = make_library(repo, {"src/tech.md": "- t", ".scratch.md": scratch})
    data = tmp_path / "plugin-data"
    outputs = {}
    for name, event in _events(repo):
        proc = _run(hooks, plugin, name, event, CLAUDE_PLUGIN_DATA=str(data))
        assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
        outputs[name] = proc.stdout.decode("utf-8")
    assert _files(plugin) == before
    # The hooks really worked (the note was injected, the block routed)...
    assert "- t" in outputs["pre_tool_use"]
    assert "- n" in (lib / "src" / "tech.md").read_text(encoding="utf-8")
    assert not [line for line in hooks.log_lines() if "error" in line]
    # ...and their modules' bytecode was cached, outside the plugin.
    cached = {p.name.split(".")[0] for p in (data / "pycache").rglob("*.pyc")}
    # Ours only: the standard library keeps being read from its own cache.
    assert cached == {
        "librarian_agents",
        "librarian_hooklib",
        "librarian_inject",
        "librarian_recurring",
        "librarian_memory",
        "librarian_routing",
        "__init__",
        "paths",
    }


@pytest.mark.process
def test_without_plugin_data_the_bytecode_goes_under_the_users_claude_folder(hooks, tmp_path):
    plugin = _plugin_copy(tmp_path)
    before = _files(plugin)
    repo = tmp_path / "repo"
    make_library(repo, {"src/tech.md": "- t"})
    name, event = _events(repo)[0]
    assert _run(hooks, plugin, name, event).returncode == 0
    assert _files(plugin) == before
    assert list((hooks.home / ".claude" / "librarian" / "pycache").rglob("librarian_inject*.pyc"))


@pytest.mark.process
def test_hooks_still_work_when_no_cache_log_or_state_can_be_written(hooks, tmp_path):
    plugin = _plugin_copy(tmp_path)
    repo = tmp_path / "repo"
    make_library(repo, {"src/tech.md": "- the note", ".scratch.md": "## [TAG: src, type: tech]\n"})
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    unwritable = {
        "CLAUDE_PLUGIN_DATA": str(blocker / "data"),  # pycache and state under a file: no folder
        "LIBRARIAN_STATE_DIR": str(blocker / "state"),
        "LIBRARIAN_LOG": str(blocker / "log" / "librarian.log"),
    }
    outputs = {}
    for name, event in _events(repo):
        proc = _run(hooks, plugin, name, event, **unwritable)
        assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
        outputs[name] = proc.stdout
    # The log cannot be written, so nothing says what happened; Claude Code's session goes on.
    assert not hooks.log.exists()
    assert outputs["stop"] == b""


@pytest.mark.parametrize("name", ["pre_tool_use", "user_prompt_submit", "stop"])
def test_hooks_json_runs_each_script_the_way_these_tests_do(name):
    commands = [
        hook["command"]
        for entries in json.loads((REPO / "hooks" / "hooks.json").read_text("utf-8"))[
            "hooks"
        ].values()
        for entry in entries
        for hook in entry["hooks"]
    ]
    assert f'sh "${{CLAUDE_PLUGIN_ROOT}}/hooks/run-hook.sh" {name}.py' in commands
    # which runs the script as these tests do: a Python 3 with -E -S.
    launcher = (REPO / "hooks" / "run-hook.sh").read_text("utf-8")
    assert launcher.rstrip().endswith('exec "$python" -E -S "$hooks/$script" "$@"')
