"""`librarian connect opencode`: where it writes (the user's config folder, as OpenCode finds
it, or a repository's top), and what (the plugin by its file URL, the MCP server, the token
left to OpenCode to read from the environment)."""

import json
from pathlib import Path

from librarian_dagster.core.capture.opencode.connector import CONNECTOR
from librarian_dagster.core.connect import files
from librarian_dagster.core.connect.agent import Where

ROOT = Path(__file__).resolve().parents[2]
URL = "http://127.0.0.1:3201/mcp"


def where(tmp_path: Path, repo: Path | None = None, **env: str) -> Where:
    return Where(tmp_path / "home", repo, ROOT, URL, env)


def test_the_user_s_config_folder_is_opencode_s_own(tmp_path):
    [target] = CONNECTOR.targets(where(tmp_path))
    assert target.path == tmp_path / "home" / ".config" / "opencode" / "opencode.json"
    [target] = CONNECTOR.targets(where(tmp_path, XDG_CONFIG_HOME=str(tmp_path / "xdg")))
    assert target.path == tmp_path / "xdg" / "opencode" / "opencode.json"
    [target] = CONNECTOR.targets(where(tmp_path, XDG_CONFIG_HOME="relative/xdg"))
    assert target.path == tmp_path / "home" / ".config" / "opencode" / "opencode.json"
    [target] = CONNECTOR.targets(where(tmp_path, tmp_path / "repo"))
    assert target.path == tmp_path / "repo" / "opencode.json"


def test_what_is_written_and_what_is_checked(tmp_path):
    at = where(tmp_path, LIBRARIAN_MCP_TOKEN="s3cret")
    [target] = CONNECTOR.targets(at)
    target.path.parent.mkdir(parents=True)
    mine = {"plugin": ["opencode-wakatime"], "mcp": {"other": {"type": "local", "command": ["x"]}}}
    target.path.write_text(json.dumps(mine))
    files.apply([target], tmp_path / "state", "opencode")
    written = json.loads(target.path.read_text())
    plugin = (ROOT / "plugins" / "opencode" / "librarian.js").as_uri()
    assert written["plugin"] == ["opencode-wakatime", plugin]
    assert written["mcp"]["librarian"] == {
        "type": "remote",
        "url": URL,
        "headers": {"Authorization": "Bearer {env:LIBRARIAN_MCP_TOKEN}"},
    }
    assert "s3cret" not in target.path.read_text()
    assert CONNECTOR.check(at) == []
    written["mcp"]["librarian"]["enabled"] = False
    written["plugin"] = ["opencode-wakatime"]
    target.path.write_text(json.dumps(written))
    assert CONNECTOR.check(at) == [
        f"not connected: {target.path} does not load Librarian's plugin",
        f"{target.path} turns the MCP server 'librarian' off (enabled = false)",
    ]
    moved = Where(at.home, None, tmp_path / "elsewhere", URL, at.env)
    assert f"{tmp_path / 'elsewhere'} holds no OpenCode plugin" in CONNECTOR.check(moved)[0]
