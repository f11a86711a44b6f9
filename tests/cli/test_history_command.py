"""`librarian history PATH` on a real store and a real git repository: in this process, and
through a running recall server, with the same answer as the MCP tool."""

import json
import os

import pytest

from librarian_dagster.cli.main import main
from librarian_dagster.core.capture.touches import FileTouch
from mcp_server.app import Served, build_server, http_app
from tests.core.test_history import renamed_repository
from tests.core.test_store import memory_record
from tests.helpers import free_port, serve_http
from tests.mcp_server.test_tools import FakeEmbedder


@pytest.fixture
def repo(store, tmp_path, monkeypatch):
    """A repository whose `flags.go` was `options.go` when a remembered session changed it."""
    repo = tmp_path / "alpha"
    renamed_repository(repo, "options.go", "flags.go")
    memory = memory_record("9d0c5e1a-5c1e-4d58-9b6b-6b1f7a1c2f00", days_ago=5,
                           embedding_model=FakeEmbedder.model_name)  # fmt: skip
    digest = memory.digest.model_copy(update={"solution": ["options.go now parses --strict"]})
    memory = memory.model_copy(update={"cwd": str(repo), "digest": digest, "title": "Strict"})
    store.memories.replace_memory(memory, [], [FileTouch(str(repo / "options.go"), 3, 1)])
    monkeypatch.setenv("LIBRARIAN_DATABASE_URL", store.url)
    monkeypatch.setenv("LIBRARIAN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LIBRARIAN_MCP_PORT", str(free_port()))  # no server unless started
    monkeypatch.chdir(repo)
    return repo


def test_history_follows_the_rename_and_says_what_changed_since(repo, capsys):
    assert main(["history", "flags.go"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("flags.go (before: options.go)")
    assert "changed it, 3 edits" in out and "1 commit since" in out
    assert "options.go now parses --strict" in out
    assert "session 9d0c5e1a-5c1e-4d58-9b6b-6b1f7a1c2f00" in out


def test_an_untouched_file_says_so(repo, capsys):
    (repo / "new.go").write_text("package main\n")
    assert main(["history", "new.go"]) == 0
    assert "no earlier session" in capsys.readouterr().out


def test_a_running_server_gives_the_same_answer(repo, store, capsys, monkeypatch):
    assert main(["history", "flags.go", "--json", "--local"]) == 0
    local = json.loads(capsys.readouterr().out)
    port = free_port()
    app = http_app(build_server(Served.of(store, FakeEmbedder())), "127.0.0.1")
    with serve_http(app, port):
        monkeypatch.setenv("LIBRARIAN_MCP_PORT", str(port))
        # Point the store somewhere unreachable: only the server can answer now.
        monkeypatch.setenv("LIBRARIAN_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
        assert main(["history", os.path.join(str(repo), "flags.go"), "--json"]) == 0
        served = json.loads(capsys.readouterr().out)
    assert served == local and served["results"][0]["changed_since"] == "1 commit since"


def test_a_bad_limit_is_refused(repo, capsys):
    assert main(["history", "flags.go", "--limit", "0"]) == 2
    assert "--limit" in capsys.readouterr().err
