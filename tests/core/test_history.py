"""A file's history: which earlier sessions changed (or read) a file, matched as the same file of
the same repository from a root, a subfolder, a worktree, another machine or Windows."""

import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from librarian_dagster.core.capture.session import CHANGE, READ, SEARCH, Session, ToolUse, Turn
from librarian_dagster.core.capture.touches import FileTouch, file_touches, normal_path
from librarian_dagster.core.recall.cards import render_history
from librarian_dagster.core.recall.file_match import root_of, same_file
from librarian_dagster.core.recall.history import (
    NOTHING_TOUCHED,
    BadFileQuestion,
    FileQuestion,
    file_history,
)
from librarian_dagster.core.store.memories import ChunkRecord
from tests.core.test_store import MODEL, memory_record


def test_normal_path_has_one_spelling_per_file():
    assert normal_path("/a/b/../c/./d.go") == "/a/c/d.go"
    assert normal_path("src/x.py", "/repo/") == "/repo/src/x.py"
    assert normal_path("D:\\oh-my-posh\\src\\main.go") == "d:/oh-my-posh/src/main.go"
    assert normal_path("d:/oh-my-posh/src/main.go") == "d:/oh-my-posh/src/main.go"
    assert normal_path("relative/only.py") is None
    assert normal_path("/") is None
    assert normal_path("/a\x00b") is None


@pytest.mark.parametrize(
    ("path", "cwd", "other", "other_cwd"),
    [
        # Two machines' checkouts of one repository, from their roots.
        ("/u/a/cli/cmd/x.go", "/u/a/cli", "/u/b/src/cli/cmd/x.go", "/u/b/src/cli"),
        # A worktree of it (its name may hold a slash), and a worktree's subfolder.
        ("/u/a/cli/cmd/x.go", "/u/a/cli", "/u/a/cli/.worktrees/3/cmd/x.go",
         "/u/a/cli/.worktrees/3"),
        ("/u/a/cli/cmd/x.go", "/u/a/cli", "/u/a/cli/.worktrees/al/fix/cmd/x.go",
         "/u/a/cli/.worktrees/al/fix/cmd"),
        ("/u/a/cli/cmd/x.go", "/u/a/cli", "/u/a/cli/.claude/worktrees/agent-1/cmd/x.go",
         "/u/a/cli/.claude/worktrees/agent-1"),
        # A session started in a subfolder, whose root another session ran in.
        ("/u/a/cli/cmd/x.go", "/u/a/cli", "/u/a/cli/cmd/x.go", "/u/a/cli/cmd"),
        # Windows, either case of drive and names.
        ("d:/oh-my-posh/src/main.go", "d:/oh-my-posh", "c:/Work/Oh-My-Posh/src/Main.go",
         "c:/Work/Oh-My-Posh"),
    ],
)  # fmt: skip
def test_the_same_file_is_matched_from_wherever_its_session_ran(path, cwd, other, other_cwd):
    worked_in = {cwd, other_cwd, "/u/a/cli"}
    assert same_file(path, root_of(cwd, worked_in), other, root_of(other_cwd, worked_in))
    assert same_file(other, root_of(other_cwd, worked_in), path, root_of(cwd, worked_in))


@pytest.mark.parametrize(
    ("path", "cwd", "other", "other_cwd"),
    [
        # Another project's README.md is another file.
        ("/u/a/cli/README.md", "/u/a/cli", "/u/a/web/README.md", "/u/a/web"),
        # One repository's README.md and docs/README.md are two files.
        ("/u/a/cli/README.md", "/u/a/cli", "/u/b/cli/docs/README.md", "/u/b/cli"),
        # A file outside the repository matches only itself.
        ("/u/a/cli/x.go", "/u/a/cli", "/tmp/x.go", "/u/b/cli"),
    ],
)
def test_other_files_and_other_projects_stay_out(path, cwd, other, other_cwd):
    worked_in = {cwd, other_cwd}
    assert not same_file(path, root_of(cwd, worked_in), other, root_of(other_cwd, worked_in))


def test_a_root_is_never_above_a_worktree():
    worked_in = {"/r", "/r/.worktrees/2"}
    assert root_of("/r/.worktrees/2/cmd", worked_in) == "/r/.worktrees/2"
    assert root_of("/r/apps/api", worked_in) == "/r"
    assert root_of("/elsewhere/x", worked_in) == "/elsewhere/x"


def test_touches_count_changes_and_reads_of_every_agent():
    when = datetime(2026, 11, 1, tzinfo=UTC)
    uses = (
        ToolUse("Read", ("/r/a.py",), action=READ),
        ToolUse("Edit", ("/r/a.py",), action=CHANGE),
        ToolUse("Read", ("b.py",), action=READ),
        ToolUse("Grep", ("/r",), action=SEARCH),
    )
    session = Session(
        "s",
        "r",
        cwd="/r",
        turns=[
            Turn("assistant", "text", "", when, uses),
            Turn(
                "assistant",
                "text",
                "",
                when,
                (ToolUse("Write", ("/r/c.py",), action=CHANGE),),
                agent_id="x",
            ),
        ],
    )
    assert file_touches(session) == [
        FileTouch("/r/a.py", 1, 1),
        FileTouch("/r/c.py", 1, 0),
        FileTouch("/r/b.py", 0, 1),
    ]


def _remember(store, session_id, touches, *, cwd="/src/alpha", days_ago=0, project="alpha",
              vector=(1.0, 0.0, 0.0), digest_lines=(), agent="claude-code"):  # fmt: skip
    memory = memory_record(session_id, project=project, days_ago=days_ago, agent=agent)
    digest = memory.digest.model_copy(update={"solution": list(digest_lines)})
    memory = memory.model_copy(update={"cwd": cwd, "digest": digest})
    store.memories.replace_memory(memory, [ChunkRecord("exchange", 0, "t", list(vector))], touches)


class Embedder:
    model_name = MODEL  # memory_record's
    dimension = 3

    def embed_query(self, text):
        return [0.0, 1.0, 0.0] if "parser" in text else [1.0, 0.0, 0.0]

    def embed_documents(self, texts):
        return [self.embed_query(t) for t in texts]


def _ask(store, path, **kwargs):
    kwargs.setdefault("cwd", "/src/alpha")
    return file_history(store.files, Embedder(), FileQuestion(path=path, **kwargs))


def test_the_most_recent_changer_comes_first_then_the_nearest_to_the_task(store):
    main = "/src/alpha/pkg/main.go"
    _remember(store, "old-parser", [FileTouch(main, 3, 1)], days_ago=9, vector=(0.0, 1.0, 0.0))
    _remember(store, "old-other", [FileTouch(main, 1, 0)], days_ago=5)
    _remember(store, "reader", [FileTouch(main, 0, 2)], days_ago=2, vector=(0.0, 1.0, 0.0))
    _remember(store, "newest", [FileTouch(main, 1, 0)], days_ago=1,
              digest_lines=["Fixed the flag parsing in main.go", "Unrelated line"])  # fmt: skip
    _remember(store, "elsewhere", [FileTouch("/src/alpha/other.go", 4, 0)], days_ago=0)

    # Asked from another machine's checkout: after the newest changer, the one nearest the task.
    answer = _ask(store, "pkg/main.go", cwd="/home/me/alpha", task="fix the parser")
    assert answer.path == "pkg/main.go"
    ids = [s.session_id for s in answer.results]
    # Newest changer, then the changer nearest the task; the reader waits behind the changers.
    assert ids == ["newest", "old-parser", "old-other"]
    # Asked from the checkout the sessions ran in: its own most recent change comes second.
    here = _ask(store, "pkg/main.go", task="fix the parser")
    assert [s.session_id for s in here.results] == ["newest", "old-other", "old-parser"]
    first = answer.results[0]
    assert first.changed and first.lines == ["Fixed the flag parsing in main.go"]
    assert answer.results[1].relevance == pytest.approx(1.0)

    more = _ask(store, main, task="fix the parser", limit=4)
    assert [s.session_id for s in more.results][-1] == "reader"
    assert not more.results[-1].changed

    # Without a task, by recency.
    by_recency = [s.session_id for s in _ask(store, main).results]
    assert by_recency == ["newest", "old-other", "old-parser"]


def test_each_earlier_session_is_named_with_its_agent(store):
    main = "/src/alpha/pkg/main.go"
    _remember(store, "codex-1", [FileTouch(main, 2, 1)], days_ago=1, agent="codex")
    _remember(store, "claude-1", [FileTouch(main, 1, 0)], days_ago=3)
    history = _ask(store, main, task="the parser")
    assert [(r.session_id, r.agent) for r in history.results] == [
        ("codex-1", "codex"),
        ("claude-1", "claude-code"),
    ]
    codex, claude = render_history(history).split("\n\n")[1:]
    # The card names the agent beside the project; Claude Code, the usual one, goes unnamed.
    assert codex.startswith("1. alpha · Codex · main · ")
    assert claude.startswith("2. alpha · main · ") and "Claude Code" not in claude


def test_each_other_agent_s_most_recent_change_is_named_before_the_nearest(store):
    main = "/src/alpha/pkg/main.go"
    _remember(store, "codex-old", [FileTouch(main, 1, 0)], days_ago=9, agent="codex")
    _remember(store, "codex-older", [FileTouch(main, 1, 0)], days_ago=12, agent="codex")
    for day in (1, 2, 3):
        _remember(store, f"claude-{day}", [FileTouch(main, 1, 0)], days_ago=day,
                  vector=(0.0, 1.0, 0.0))  # fmt: skip
    # Every Claude Code session is nearer the task; Codex's latest change is named all the same.
    ids = [s.session_id for s in _ask(store, main, task="fix the parser").results]
    assert ids == ["claude-1", "claude-2", "codex-old"]  # newest, this checkout's, Codex's


def test_worktrees_subfolders_and_other_projects(store):
    _remember(store, "root", [FileTouch("/src/alpha/api/x.ts", 1, 0)], days_ago=3)
    _remember(store, "sub", [FileTouch("/src/alpha/api/x.ts", 1, 0)], cwd="/src/alpha/api",
              project="api", days_ago=2)  # fmt: skip
    _remember(store, "tree", [FileTouch("/src/alpha/.worktrees/2/api/x.ts", 2, 0)],
              cwd="/src/alpha/.worktrees/2", days_ago=1)  # fmt: skip
    _remember(store, "other", [FileTouch("/src/beta/api/x.ts", 1, 0)], cwd="/src/beta",
              project="beta")  # fmt: skip

    answer = _ask(store, "/home/me/alpha/api/x.ts", cwd="/home/me/alpha/api", limit=5)
    assert answer.path == "x.ts"  # the asker's root is not known to the store: its cwd
    assert [s.session_id for s in answer.results] == ["tree", "sub", "root"]
    known = _ask(store, "/home/me/alpha/api/x.ts", root="/home/me/alpha", limit=5)
    assert known.path == "api/x.ts" and len(known.results) == 3


def test_nothing_touched_says_so_and_the_asker_is_left_out(store):
    _remember(store, "me", [FileTouch("/src/alpha/a.py", 1, 0)])
    answer = _ask(store, "a.py", session_id="me")
    assert answer.results == [] and answer.note == NOTHING_TOUCHED
    assert [s.session_id for s in _ask(store, "a.py").results] == ["me"]


def test_a_private_session_needs_the_right(store):
    memory = memory_record("secret", domain="private")
    memory = memory.model_copy(update={"cwd": "/src/alpha"})
    store.memories.replace_memory(memory, [], [FileTouch("/src/alpha/a.py", 1, 0)])
    assert _ask(store, "a.py").results == []
    assert [s.session_id for s in _ask(store, "a.py", include_private=True).results] == ["secret"]


def test_a_relative_path_without_a_cwd_is_refused(store):
    with pytest.raises(BadFileQuestion):
        file_history(store.files, None, FileQuestion(path="a.py"))


def _git(repo, *args, when=None):
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(repo)}  # fmt: skip
    if when:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = when.isoformat()
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def renamed_repository(repo, old: str, new: str) -> datetime:
    """A repository whose `old` (committed on 2026-10-01) became `new` 40 days later; when the
    rename was committed."""
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / old).write_text("print('a')\n" * 20)
    start = datetime(2026, 10, 1, tzinfo=UTC)
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "one", when=start)
    _git(repo, "mv", old, new)
    _git(repo, "commit", "-qm", "moved", when=start + timedelta(days=40))
    return start + timedelta(days=40)


def test_a_renamed_file_is_followed_and_changes_since_are_counted(store, tmp_path):
    repo = tmp_path / "alpha"
    moved = renamed_repository(repo, "old.py", "new.py")
    (repo / "new.py").write_text("print('b')\n" * 20)
    _git(repo, "commit", "-qam", "changed", when=moved + timedelta(days=1))
    # The session changed old.py, on 2026-10-30: two commits came after.
    _remember(store, "before-the-move", [FileTouch(f"{repo}/old.py", 1, 0)], cwd=str(repo),
              days_ago=2)  # fmt: skip
    answer = file_history(
        store.files, None, FileQuestion(path=str(repo / "new.py"), cwd=str(repo)), git_timeout=10
    )
    assert answer.former_names == ["old.py"]
    assert [s.session_id for s in answer.results] == ["before-the-move"]
    assert answer.results[0].changed_since == "2 commits since"


def test_a_file_outside_the_cwd_is_looked_up_from_its_own_folder(store):
    _remember(store, "there", [FileTouch("/src/alpha/pkg/a.go", 1, 0)])
    answer = _ask(store, "/src/alpha/pkg/a.go", cwd="/tmp")
    assert answer.path == "pkg/a.go" and [s.session_id for s in answer.results] == ["there"]
