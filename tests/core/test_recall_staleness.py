"""core/recall/hook_text.py, recall: each recalled session is named with its dates and the files
it changed, and a session of the asker's repository is marked when those files changed since it
ended.

Real repositories made by git; one session of this project (`context: project`) whose files and
end time the test chooses. Whatever git says or fails to say, the text is written within the
deadline.
"""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from librarian_dagster.core.recall.hook_text import recall_text
from librarian_dagster.core.store.rows import ChunkResult

ENDED = "2026-01-15T10:00:00.123000Z"

pytestmark = [
    pytest.mark.process,  # runs git
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]


def _git(cwd: Path, *args: str, when: str = "2026-01-01T00:00:00Z") -> None:
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_DATE": when,
        "GIT_COMMITTER_DATE": when,
    }
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env=env,
    )


def _commit(repo: Path, files: dict[str, str], when: str) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", f"at {when}", when=when)


def _repo(root: Path) -> Path:
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    first = {"ingest/worker.py": "v1", "ingest/db.py": "v1", "README.md": "v1"}
    _commit(root, first, "2026-01-01T00:00:00Z")
    return root


def _answer(context: str | None = "project") -> list[ChunkResult]:
    hit = {
        "text": "Set busy_timeout on the SQLite connection.",
        "score": 0.9,
        "session_id": "s1",
        "section": "solution",
        "position": 0,
        "project": "alpha",
        "started_at": "2026-01-14T09:00:00Z",
        "date": ENDED,
        "summary": "Fixed the database is locked error in the ingest worker.",
        "domain": "technical",
        "tags": [],
        "git_branch": "fix/locked",
        "title": "SQLite locked",
        "files": ["ingest/worker.py", "ingest/db.py", "tests/test_worker.py", "docs/read me.md"],
        "highlights": ["Set busy_timeout on the SQLite connection."],
        "context": context,
    }
    return [ChunkResult.model_validate(hit)]


def _context(cwd: Path, answer: list[ChunkResult], wait_s: float = 2.0) -> str:
    text, named = recall_text(answer, 1500, None, str(cwd), time.perf_counter() + wait_s)
    assert text is not None and named == 1
    return text


def test_a_session_whose_files_changed_since_is_marked_with_how_many(tmp_path):
    repo = _repo(tmp_path / "repo")
    _commit(repo, {"ingest/worker.py": "v2"}, "2026-02-01T00:00:00Z")
    _commit(repo, {"README.md": "v2", "docs/read me.md": "new"}, "2026-02-02T00:00:00Z")
    _commit(repo, {"ingest/db.py": "v2", "README.md": "v3"}, "2026-02-03T00:00:00Z")
    text = _context(repo, _answer())
    head = next(line for line in text.splitlines() if line.startswith("- session s1"))
    assert "2026-01-14 to 2026-01-15" in head
    assert "branch fix/locked" in head
    assert "3 of its 4 files changed since, 3 commits" in head  # a name with a space counts
    assert "  - files: ingest/worker.py, ingest/db.py, tests/test_worker.py (+1 more)" in text


def test_no_commit_since_says_so_and_an_old_change_does_not_count(tmp_path):
    repo = _repo(tmp_path / "repo")  # its only commit is before the session ended
    text = _context(repo, _answer())
    assert "no commits since" in text
    assert "files changed since" not in text


def test_silent_outside_a_repository_and_for_another_project_s_session(tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    text = _context(bare, _answer())
    assert "since" not in text and "files: ingest/worker.py" in text
    repo = _repo(tmp_path / "repo")
    _commit(repo, {"ingest/worker.py": "v2"}, "2026-02-01T00:00:00Z")
    # The same files, but the server says the session is not of this project: no claim made.
    assert "since" not in _context(repo, _answer(context=None))
    # Nor with no time left before the caller's deadline.
    assert "since" not in _context(repo, _answer(), wait_s=0.0)


def test_a_git_that_hangs_costs_the_mark_not_the_context(tmp_path, monkeypatch):
    repo = _repo(tmp_path / "repo")
    _commit(repo, {"ingest/worker.py": "v2"}, "2026-02-01T00:00:00Z")
    # A `git` first on PATH that never answers: it is given what is left of the deadline, then
    # the text goes without the mark (one that waited for it would not end before the test's own
    # 60 s limit, which fails the test).
    fake = tmp_path / "bin"
    fake.mkdir()
    started = tmp_path / "git-started"
    (fake / "git").write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 120\n", encoding="utf-8")
    (fake / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ.get('PATH', '')}")
    text = _context(repo, _answer(), wait_s=1.0)
    assert started.exists()  # git was asked
    assert "session s1" in text and "since" not in text
