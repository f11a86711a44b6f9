"""`librarian status` on a real store."""

from librarian_dagster.cli.main import main
from librarian_dagster.core.store.memories import ChunkRecord
from tests.core.test_store import memory_record


def test_status_counts_sessions_chunks_and_projects(store, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LIBRARIAN_DATABASE_URL", store.url)
    monkeypatch.setenv("LIBRARIAN_HOME", str(tmp_path / "home"))
    assert main(["status"]) == 0
    empty = capsys.readouterr().out
    assert "sessions:    0 in 0 project(s)" in empty and "by agent:" not in empty
    store.memories.replace_memory(memory_record("s1"), [ChunkRecord("a", 0, "t", [1.0, 0.0])])
    store.memories.replace_memory(memory_record("s2", project="beta"), [])
    store.memories.replace_memory(memory_record("s3", agent="codex"), [])
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "sessions:    3 in 2 project(s)\nby agent:    Claude Code 2, Codex 1\n" in out
    assert "chunks:      1" in out
    assert "last ingest: never" not in out
