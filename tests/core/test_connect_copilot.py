"""`librarian connect copilot` (core/capture/copilot/connector.py): which files Copilot CLI
reads, where, and what `--check` says of them. The real CLI reading them is
tests/hooks/test_copilot_cli.py."""

import json
from pathlib import Path

from librarian_dagster.core.capture.copilot.connector import CONNECTOR
from librarian_dagster.core.connect import files
from librarian_dagster.core.connect.agent import Where

ROOT = Path(__file__).resolve().parents[2]
URL = "http://127.0.0.1:3201/mcp"
RUN_HOOK = f'sh "{ROOT / "hooks" / "run-hook.sh"}"'


def _where(tmp_path: Path, repo: Path | None = None, **env: str) -> Where:
    return Where(tmp_path / "home", repo, ROOT, URL, env)


def test_the_user_s_copilot_home_gets_the_hooks_and_the_server(tmp_path):
    home = tmp_path / "elsewhere"
    where = _where(tmp_path, COPILOT_HOME=str(home), LIBRARIAN_MCP_TOKEN="lbr_x")
    hooks, mcp = CONNECTOR.targets(where)
    assert (hooks.path, mcp.path) == (home / "hooks" / "librarian.json", home / "mcp-config.json")
    files.apply([hooks, mcp], tmp_path / "state", "copilot")
    assert json.loads(hooks.path.read_text()) == {
        "version": 1,
        "hooks": {
            "userPromptSubmitted": [
                {
                    "type": "command",
                    "bash": f"{RUN_HOOK} user_prompt_submit.py copilot",
                    "timeoutSec": 10,
                }
            ],
            "preToolUse": [
                {
                    "type": "command",
                    "bash": f"{RUN_HOOK} pre_tool_use.py copilot",
                    "matcher": "^(view|edit|create)$",
                    "timeoutSec": 10,
                }
            ],
        },
    }
    # The token stays in the environment: Copilot expands ${VAR} in a header.
    assert json.loads(mcp.path.read_text()) == {
        "mcpServers": {
            "librarian": {
                "type": "http",
                "url": URL,
                "headers": {"Authorization": "Bearer ${LIBRARIAN_MCP_TOKEN}"},
                "tools": ["*"],
            }
        }
    }
    assert CONNECTOR.check(where) == []
    assert CONNECTOR.check(_where(tmp_path))  # ~/.copilot: not connected


def test_a_repository_s_own_files_are_read_only_once_the_user_trusted_it(tmp_path):
    repo = tmp_path / "work" / "repo"
    repo.mkdir(parents=True)
    where = _where(tmp_path, repo)
    targets = CONNECTOR.targets(where)
    assert [t.path for t in targets] == [
        repo / ".github" / "hooks" / "librarian.json",
        repo / ".github" / "mcp.json",
    ]
    files.apply(targets, tmp_path / "state", "copilot-repo")
    [problem] = CONNECTOR.check(where)
    assert "only in a folder you trusted" in problem
    # Copilot keeps trust in its config.json, which it writes with comment lines.
    config = tmp_path / "home" / ".copilot" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text("// managed automatically\n" + json.dumps({"trustedFolders": ["/x"]}))
    assert CONNECTOR.check(where) == [problem]
    config.write_text(
        "// managed automatically\n" + json.dumps({"trustedFolders": [str(repo.parent)]})
    )
    assert CONNECTOR.check(where) == []


def test_a_repository_s_dot_mcp_json_is_the_one_copilot_reads_when_there_is_one(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    shared = repo / ".mcp.json"
    shared.write_text('{"mcpServers": {"other": {"command": "x"}}}\n')
    before = shared.read_bytes()
    targets = CONNECTOR.targets(_where(tmp_path, repo))
    assert targets[1].path == shared
    files.apply(targets, tmp_path / "state", "copilot-repo")
    # The file Claude Code reads too: the server as both know it, no Copilot-only key.
    servers = json.loads(shared.read_text())["mcpServers"]
    assert servers == {"other": {"command": "x"}, "librarian": {"type": "http", "url": URL}}
    files.undo(CONNECTOR.targets(_where(tmp_path, repo)), tmp_path / "state", "copilot-repo")
    assert shared.read_bytes() == before
    assert not (repo / ".github").exists() or not list((repo / ".github").rglob("*.json"))


def test_check_says_when_the_user_turned_every_hook_off(tmp_path):
    where = _where(tmp_path)
    files.apply(CONNECTOR.targets(where), tmp_path / "state", "copilot")
    settings = tmp_path / "home" / ".copilot" / "settings.json"
    settings.write_text('{"disableAllHooks": true}')
    assert CONNECTOR.check(where) == [
        f"{settings} turns Copilot CLI's hooks off (disableAllHooks: true)"
    ]
