"""`librarian token add | list | revoke` as a user runs them."""

import pytest

from librarian_dagster.cli.main import main
from librarian_dagster.core.service import tokens


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("LIBRARIAN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LIBRARIAN_MCP_TOKENS", raising=False)
    return tmp_path / "home"


def test_add_prints_the_token_once_as_the_last_line(home, capsys):
    assert main(["token", "add", "laptop", "--scope", "private"]) == 0
    out = capsys.readouterr().out
    token = out.splitlines()[-1]
    assert token.startswith(tokens.TOKEN_PREFIX)
    entry = tokens.find(tokens.load(home / "tokens.json"), token)
    assert entry is not None and entry.scopes == (tokens.READ, tokens.PRIVATE)

    assert main(["token", "list"]) == 0
    listed = capsys.readouterr().out
    assert "laptop" in listed and "read,private" in listed and token not in listed


def test_list_and_revoke(home, capsys):
    assert main(["token", "list"]) == 0
    assert "no tokens" in capsys.readouterr().out
    assert main(["token", "add", "ci"]) == 0
    token = capsys.readouterr().out.splitlines()[-1]
    assert main(["token", "revoke", "ci"]) == 0
    assert tokens.find(tokens.load(home / "tokens.json"), token) is None
    assert main(["token", "revoke", "ci"]) == 1
    assert capsys.readouterr().err.strip() == "librarian token: no token named 'ci'"


def test_LIBRARIAN_MCP_TOKENS_names_the_file(tmp_path, home, monkeypatch, capsys):
    elsewhere = tmp_path / "elsewhere" / "t.json"
    monkeypatch.setenv("LIBRARIAN_MCP_TOKENS", str(elsewhere))
    assert main(["token", "add", "x"]) == 0
    assert elsewhere.exists() and not (home / "tokens.json").exists()


def test_a_duplicate_or_a_bad_name_is_one_line_and_exit_1(home, capsys):
    assert main(["token", "add", "ci"]) == 0
    capsys.readouterr()
    assert main(["token", "add", "ci"]) == 1
    assert main(["token", "add", "a b"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("librarian token: ") for line in err)
