"""The plugin: manifest, hooks.json commands that really run, MCP config, import command."""

import json
import os
import shlex
import subprocess

import pytest
from hookutil import REPO, make_library, pre_tool_use_event

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


def _json(rel: str) -> dict:
    return json.loads((REPO / rel).read_text(encoding="utf-8"))


def test_manifest_has_kebab_case_name_and_typed_fields():
    manifest = _json(".claude-plugin/plugin.json")
    assert manifest["name"] == "librarian"
    assert isinstance(manifest.get("keywords", []), list)
    # Only manifests go in .claude-plugin/; components sit at the plugin root.
    assert sorted(os.listdir(REPO / ".claude-plugin")) == ["marketplace.json", "plugin.json"]
    # The repository is its own one-plugin marketplace: the entry names this plugin, here.
    [entry] = _json(".claude-plugin/marketplace.json")["plugins"]
    assert entry["name"] == manifest["name"] and entry["source"] == "./"
    assert (REPO / "commands" / "import-library.md").exists()


def test_hooks_json_commands_run_from_the_plugin_root(hooks, tmp_path):
    config = _json("hooks/hooks.json")["hooks"]
    assert set(config) == {"PreToolUse", "UserPromptSubmit", "Stop"}
    assert config["PreToolUse"][0]["matcher"] == "Read|Edit|Write|MultiEdit|NotebookEdit"
    repo = tmp_path / "repo"
    make_library(repo, {"tech.md": "- from the plugin"})
    for event_name, groups in config.items():
        command = groups[0]["hooks"][0]["command"]
        assert "${CLAUDE_PLUGIN_ROOT}" in command and command.startswith("sh ")
        argv = shlex.split(command.replace("${CLAUDE_PLUGIN_ROOT}", str(REPO)))
        assert argv[1] == str(REPO / "hooks" / "run-hook.sh")
        assert (REPO / "hooks" / argv[2]).is_file()
        if event_name == "PreToolUse":
            # Run it as Claude Code would (through the shell), with python3 from PATH.
            proc = subprocess.run(
                command,
                shell=True,
                capture_output=True,
                timeout=60,
                env=dict(hooks.env, CLAUDE_PLUGIN_ROOT=str(REPO)),
                input=json.dumps(pre_tool_use_event(str(repo / "f.py"), str(repo))).encode(),
            )
            assert proc.returncode == 0, proc.stderr
            assert (
                "from the plugin"
                in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
            )


def test_mcp_json_entry_is_typed_http():
    servers = _json(".mcp.json")["mcpServers"]
    assert servers
    for entry in servers.values():
        # An entry with a url but no type is read as stdio and fails.
        assert entry["type"] == "http"
        assert "/mcp" in entry["url"]
