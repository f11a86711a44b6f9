"""user_prompt_submit.py, recall: the request says where the prompt comes from (cwd, git branch).

The branch is read from `.git/HEAD` with the standard library, in real repositories made by git
and in odd ones made by hand. Whatever the tree holds, the hook answers within its deadline and
the budget it sends: every case here must still end in "recall added" (a hook that blocked on a
FIFO or read a huge HEAD whole would end in "recall failed (timeout)" or not at all).
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hookutil import answering, user_prompt_event

PROMPT = "How did we fix the SQLite database is locked error in the ingest worker?"
BUDGET = 600

pytestmark = [
    pytest.mark.process,
    pytest.mark.skipif(shutil.which("git") is None, reason="needs git"),
]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"},
    )


def _repo(root: Path, branch: str = "feat/lock-fix") -> Path:
    root.mkdir(parents=True)
    _git(root, "init", "-q", "-b", branch)
    _git(root, "commit", "-q", "--allow-empty", "-m", "start")
    return root


RECALLED = "Librarian remembers past sessions that may bear on this prompt:\n- session s1"


def _ask(hooks, cwd: str) -> dict:
    """The body the hook sent from `cwd`; asserts the hook finished in time and in budget."""
    env = {
        "LIBRARIAN_RECALL": "on",
        "LIBRARIAN_RECALL_BUDGET": str(BUDGET),
    }
    with answering(200, {"context": RECALLED, "sessions": 1}) as server:
        env["LIBRARIAN_RECALL_URL"] = server.url + "/recall"
        proc = hooks.run("user_prompt_submit", user_prompt_event(cwd, prompt=PROMPT), env)
    assert proc.returncode == 0, proc.stderr
    assert "recall added" in hooks.log_lines()[-1]  # not "failed (timeout)": within the deadline
    assert json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"] == RECALLED
    [(_, _, _, body)] = server.requests
    asked = json.loads(body)
    assert (asked.pop("budget"), asked.pop("deadline_ms")) == (BUDGET, 800)
    return asked


def test_a_repository_made_by_git_gives_its_branch_from_any_folder_inside(hooks, tmp_path):
    repo = _repo(tmp_path / "repo")
    deep = repo / "src" / "pkg"
    deep.mkdir(parents=True)
    body = _ask(hooks, str(deep))
    assert body == {"prompt": PROMPT, "limit": 3, "cwd": str(deep), "git_branch": "feat/lock-fix"}


def test_a_worktree_and_a_submodule_style_gitdir_file(hooks, tmp_path):
    repo = _repo(tmp_path / "repo")
    _git(repo, "worktree", "add", "-q", "-b", "wt/second", str(tmp_path / "wt"))
    assert (tmp_path / "wt" / ".git").is_file()  # git's own `gitdir: ...` file
    assert _ask(hooks, str(tmp_path / "wt"))["git_branch"] == "wt/second"
    # A relative gitdir, as submodules write: relative to the folder holding the file.
    modules = repo / ".git" / "modules" / "sub"
    modules.mkdir(parents=True)
    (modules / "HEAD").write_text("ref: refs/heads/sub-branch\n", encoding="utf-8")
    sub = repo / "sub"
    sub.mkdir()
    (sub / ".git").write_text("gitdir: ../.git/modules/sub\n", encoding="utf-8")
    assert _ask(hooks, str(sub))["git_branch"] == "sub-branch"


def test_a_detached_head_and_no_repository_send_the_cwd_alone(hooks, tmp_path):
    repo = _repo(tmp_path / "repo")
    _git(repo, "checkout", "-q", "--detach")
    assert _ask(hooks, str(repo)) == {"prompt": PROMPT, "limit": 3, "cwd": str(repo)}
    bare = tmp_path / "bare"
    bare.mkdir()
    assert _ask(hooks, str(bare)) == {"prompt": PROMPT, "limit": 3, "cwd": str(bare)}


def _odd_head(dotgit: Path, kind: str) -> None:
    head = dotgit / "HEAD"
    if kind == "fifo":  # a plain open() of it would wait for a writer forever
        os.mkfifo(head)
    elif kind == "folder":
        head.mkdir()
    elif kind == "binary":
        head.write_bytes(b"ref: refs/heads/\xff\xfe\x00\n")
    elif kind == "spaces":
        head.write_text("ref: refs/heads/has space\n", encoding="utf-8")
    elif kind == "other-ref":
        head.write_text("ref: refs/remotes/origin/main\n", encoding="utf-8")
    elif kind == "long-line":
        head.write_bytes(b"ref: refs/heads/" + b"x" * 100_000)
    elif kind == "unreadable":  # root reads through modes: then it is an odd HEAD like the rest
        head.write_text("ref: refs/heads/secret\n", encoding="utf-8")
        head.chmod(0)
        if os.access(head, os.R_OK):
            head.chmod(0o644)
            head.write_text("ref: refs/heads/\n", encoding="utf-8")


@pytest.mark.parametrize(
    "kind", ["fifo", "folder", "binary", "spaces", "other-ref", "long-line", "unreadable"]
)
def test_an_odd_head_names_no_branch_and_costs_nothing(hooks, tmp_path, kind):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    _odd_head(repo / ".git", kind)
    assert _ask(hooks, str(repo)) == {"prompt": PROMPT, "limit": 3, "cwd": str(repo)}


def test_only_the_start_of_head_is_read(hooks, tmp_path):
    # 64 GiB, sparse (no disk used): a hook that read HEAD whole would never answer in time.
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    with open(repo / ".git" / "HEAD", "wb") as head:
        head.write(b"ref: refs/heads/sparse\n")
        head.truncate(64 << 30)
    assert _ask(hooks, str(repo))["git_branch"] == "sparse"


@pytest.mark.parametrize(
    "content", [b"", b"gitdir:\n", b"not a gitdir line\n", b"gitdir: /no/such/place\n"]
)
def test_an_odd_gitdir_file_names_no_branch(hooks, tmp_path, content):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".git").write_bytes(content)
    assert "git_branch" not in _ask(hooks, str(repo))


def test_the_walk_up_is_bounded(hooks, tmp_path):
    repo = _repo(tmp_path / "repo", branch="near")
    near = repo.joinpath(*["d"] * 10)
    far = repo.joinpath(*["d"] * 80)  # deeper than any checkout: not worth 80 stat calls
    far.mkdir(parents=True)
    assert _ask(hooks, str(near))["git_branch"] == "near"
    assert "git_branch" not in _ask(hooks, str(far))


@pytest.mark.parametrize("cwd", ["relative/path", "/x" * 3000, "/a\x00b"])
def test_a_cwd_the_endpoint_would_refuse_is_not_sent(hooks, cwd):
    assert _ask(hooks, cwd) == {"prompt": PROMPT, "limit": 3}
