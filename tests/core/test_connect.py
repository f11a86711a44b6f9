"""`librarian connect`'s edits (core/connect/files.py) on real files: shown, idempotent, never a
setting of the user's overwritten, and taken back byte for byte."""

import json
import tomllib
from pathlib import Path

import pytest

from librarian_dagster.core.capture.agents import CONNECTORS
from librarian_dagster.core.connect import files
from librarian_dagster.core.connect.agent import Where, run_hook
from librarian_dagster.core.connect.server import mcp_url_of

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


SERVER = "https://memory.team.example:3201/mcp"
TOKEN = "lib-token-that-must-stay-in-the-environment"
# How each agent's MCP entry names the token's variable, in its own syntax (read at run time).
TOKEN_REFERENCE = {
    "codex": 'bearer_token_env_var = "LIBRARIAN_MCP_TOKEN"',
    "gemini": '"Bearer $LIBRARIAN_MCP_TOKEN"',
    "opencode": '"Bearer {env:LIBRARIAN_MCP_TOKEN}"',
    "copilot": '"Bearer ${LIBRARIAN_MCP_TOKEN}"',
}


def _remote(tmp_path: Path, server: str = SERVER, **env: str) -> Where:
    return Where(tmp_path / "home", None, ROOT, server, env, remote=True)


@pytest.mark.parametrize(
    ("given", "url"),
    [
        ("https://memory.team.example:3201", SERVER),
        ("https://memory.team.example:3201/mcp/", SERVER),
        ("http://10.0.0.7:3201/", "http://10.0.0.7:3201/mcp"),
        ("https://team.example/librarian", "https://team.example/librarian/mcp"),
        ("https://[::1]:3201", "https://[::1]:3201/mcp"),
    ],
)
def test_a_server_is_put_in_one_shape_its_mcp_url(given, url):
    assert mcp_url_of(given) == url


@pytest.mark.parametrize(
    "given",
    [
        "https://me:secret@memory.team.example",  # a credential would be written into files
        "https://memory.team.example/?token=x",
        "ftp://memory.team.example",
        "memory.team.example:3201",
        "https://memory.team.example/$(rm -rf ~)",  # read by the shell of a hook's command
        "https://memory.team.example/a b",
        "https://memory.team.example:99999",
    ],
)
def test_a_server_that_cannot_be_written_safely_is_refused(given):
    with pytest.raises(ValueError):
        mcp_url_of(given)


@pytest.mark.parametrize("agent", sorted(CONNECTORS))
def test_with_a_server_every_file_names_it_and_none_holds_the_token(tmp_path, agent):
    where = _remote(tmp_path, LIBRARIAN_MCP_TOKEN=TOKEN)
    connector = CONNECTORS[agent]
    files.apply(connector.targets(where), tmp_path / "state", agent)
    written = {t.path: t.path.read_text(encoding="utf-8") for t in connector.targets(where)}
    everything = "".join(written.values())
    assert SERVER in everything and "127.0.0.1" not in everything
    assert TOKEN not in everything
    assert not [p for p in (tmp_path / "state").rglob("*") if p.is_file() and
                TOKEN in p.read_text(encoding="utf-8", errors="replace")]  # fmt: skip
    if agent in TOKEN_REFERENCE:
        assert TOKEN_REFERENCE[agent] in everything
    if agent in ("codex", "gemini", "copilot"):  # command hooks: each names the server
        assert everything.count(f'run-hook.sh\\" --server={SERVER} ') == 2, everything
    assert connector.check(where) == []
    # Connected to another server, the check says this one is not the one asked.
    assert connector.check(_remote(tmp_path, "https://other.example/mcp"))
    files.undo(connector.targets(where), tmp_path / "state", agent)
    assert not [t.path for t in connector.targets(where) if t.path.exists()]


@pytest.mark.parametrize("agent", ["codex", "gemini", "opencode", "copilot"])
def test_a_team_s_server_gets_the_token_s_variable_even_where_it_is_not_set_yet(tmp_path, agent):
    where = _remote(tmp_path)
    text = "".join(t.add(None).decode() for t in CONNECTORS[agent].targets(where))
    assert TOKEN_REFERENCE[agent] in text
    local = "".join(t.add(None).decode() for t in CONNECTORS[agent].targets(_where(tmp_path)))
    assert "LIBRARIAN_MCP_TOKEN" not in local  # this machine's without tokens: as before


def test_without_a_server_the_hooks_commands_are_as_before(tmp_path):
    assert "--server" not in run_hook(_where(tmp_path), "user_prompt_submit.py", "codex")
    command = run_hook(_remote(tmp_path), "user_prompt_submit.py", "codex")
    assert command.endswith(f'run-hook.sh" --server={SERVER} user_prompt_submit.py codex')


def _connect(monkeypatch, tmp_path: Path, *args: str) -> int:
    from librarian_dagster.cli.main import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LIBRARIAN_HOME", str(tmp_path / "librarian"))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.delenv("LIBRARIAN_MCP_TOKEN", raising=False)
    try:
        return main(["connect", *args])
    except SystemExit as exc:
        return int(exc.code or 0)


def test_connecting_to_another_server_takes_the_first_out_and_undo_gives_back_the_bytes(
    monkeypatch, tmp_path, capsys
):
    hooks_json = tmp_path / "home" / ".codex" / "hooks.json"
    config = tmp_path / "home" / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('model = "o3"\n', encoding="utf-8")
    assert _connect(monkeypatch, tmp_path, "codex") == 0
    team = "https://memory.team.example:3201"
    assert _connect(monkeypatch, tmp_path, "codex", "--server", team) == 0
    hooks = json.loads(hooks_json.read_text())["hooks"]
    assert [len(hooks[event]) for event in ("UserPromptSubmit", "PreToolUse")] == [1, 1]
    assert f"--server={SERVER} " in hooks["UserPromptSubmit"][0]["hooks"][0]["command"]
    toml = tomllib.loads(config.read_text())
    assert toml["mcp_servers"]["librarian"]["url"] == SERVER
    assert "taking out the connection to this machine first" in capsys.readouterr().out
    # --undo, without --server, takes out what was connected.
    assert _connect(monkeypatch, tmp_path, "codex", "--undo") == 0
    assert config.read_bytes() == b'model = "o3"\n' and not hooks_json.exists()
    assert _connect(monkeypatch, tmp_path, "codex", "--server", "https://u:p@x.example") == 2
