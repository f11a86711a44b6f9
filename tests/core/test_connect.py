"""`librarian connect`'s edits (core/connect/files.py) on real files: shown, idempotent, never a
setting of the user's overwritten, and taken back byte for byte."""

import json
import tomllib
from pathlib import Path

import pytest

from librarian_dagster.core.connect import files
from librarian_dagster.core.connect.agent import Where
from librarian_dagster.core.connect.connectors import CONNECTORS

ROOT = Path(__file__).resolve().parents[2]
USERS = '{\n  "theme": "dark",\n  "enabledPlugins": {"other@x": true},\n  "hooks": {}\n}\n'


def _where(tmp_path: Path, repo: Path | None = None) -> Where:
    return Where(tmp_path / "home", repo, ROOT, "http://127.0.0.1:3201/mcp", {})


@pytest.mark.parametrize("agent", sorted(CONNECTORS))
@pytest.mark.parametrize("existing", [None, "users"])
def test_connect_twice_changes_nothing_more_and_undo_gives_back_the_bytes(
    tmp_path, agent, existing
):
    where = _where(tmp_path)
    connector = CONNECTORS[agent]
    targets = connector.targets(where)
    before = {}
    for target in targets:
        if existing:
            target.path.parent.mkdir(parents=True, exist_ok=True)
            sample = USERS if target.path.suffix == ".json" else 'model = "o3"\n[tui]\nx = 1\n'
            target.path.write_text(sample, encoding="utf-8")
        before[target.path] = target.path.read_bytes() if target.path.exists() else None
    assert connector.check(where)  # not connected yet: says why
    first = files.apply(targets, tmp_path / "state", agent)
    assert all(change.how == "added" for change in first)
    assert connector.check(where) == []
    second = files.apply(connector.targets(where), tmp_path / "state", agent)
    assert [change.how for change in second] == ["unchanged"] * len(targets)
    files.undo(connector.targets(where), tmp_path / "state", agent)
    for path, content in before.items():
        assert (path.read_bytes() if path.exists() else None) == content
    assert not list((tmp_path / "state").rglob("*.json"))


def test_a_setting_of_the_user_s_is_left_as_it_is(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"enabledPlugins": {"librarian@librarian": False}}))
    notes: list[str] = []
    entries = [(("enabledPlugins", "librarian@librarian"), True), (("mcp", "x"), {"url": "u"})]
    after = json.loads(files.json_add(path, path.read_bytes(), entries, notes))
    assert after["enabledPlugins"]["librarian@librarian"] is False
    assert after["mcp"] == {"x": {"url": "u"}}
    assert notes == [f"{path}: enabledPlugins.librarian@librarian is yours, left as it is"]


def test_a_file_changed_since_loses_only_librarian_s_entries(tmp_path):
    path = tmp_path / "hooks.json"
    entries = [(("hooks", "PreToolUse[]"), {"command": "librarian"})]
    target = files.Target(
        path,
        lambda content: files.json_add(path, content, entries, []),
        lambda content: files.json_remove(path, content, entries),
    )
    path.write_text('{"hooks": {"PreToolUse": [{"command": "mine"}]}}')
    files.apply([target], tmp_path / "state", "x")
    data = json.loads(path.read_text())
    data["theme"] = "light"  # the user's own change, after connecting
    path.write_text(json.dumps(data))
    [done] = files.undo([target], tmp_path / "state", "x")
    assert done.how == "taken out"
    assert json.loads(path.read_text()) == {
        "hooks": {"PreToolUse": [{"command": "mine"}]},
        "theme": "light",
    }


def test_a_file_that_is_not_json_is_refused_and_left_alone(tmp_path):
    where = _where(tmp_path)
    [target] = CONNECTORS["claude-code"].targets(where)
    target.path.parent.mkdir(parents=True)
    target.path.write_text('{"theme": "dark",,}')
    with pytest.raises(files.ConfigError, match="not JSON"):
        files.apply([target], tmp_path / "state", "claude-code")
    assert target.path.read_text() == '{"theme": "dark",,}'


def test_a_text_block_is_added_once_and_taken_out_whole():
    mine = b'model = "o3"\n\n[tui]\nx = 1\n'
    added = files.text_block_add(mine, ["[mcp_servers.librarian]", 'url = "http://h/mcp"'])
    assert tomllib.loads(added.decode())["mcp_servers"]["librarian"]["url"] == "http://h/mcp"
    assert files.text_block_add(added, ["[mcp_servers.librarian]", 'url = "http://h/mcp"']) == added
    assert files.text_block_remove(added) == mine
    assert files.text_block_remove(files.text_block_add(None, ["a = 1"])) is None


def test_a_repository_s_own_settings_are_connected_apart(tmp_path):
    repo = tmp_path / "repo"
    where = _where(tmp_path, repo)
    [target] = CONNECTORS["claude-code"].targets(where)
    assert target.path == repo / ".claude" / "settings.json"
    files.apply([target], tmp_path / "state", "claude-code-repo")
    assert CONNECTORS["claude-code"].check(where) == []
    assert CONNECTORS["claude-code"].check(_where(tmp_path))  # the user's own: not connected
