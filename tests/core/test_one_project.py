"""One project across machines and people: a repository is named by its remote, whatever each
person's folder for it is called, and a session pushed before its remote was known joins its
repository's project when it becomes known."""

import pytest

from librarian_dagster.core.capture.repository import normal_remote, project_of_remote
from librarian_dagster.core.capture.touches import FileTouch
from librarian_dagster.core.recall.history import FileQuestion, file_history
from tests.core.test_store import memory_record

CLI = "github.com/acme/cli"


@pytest.mark.parametrize(
    ("url", "remote"),
    [
        ("git@github.com:acme/cli.git", CLI),
        ("https://alice:ghp_secret@github.com/acme/cli.git", CLI),
        ("https://GitHub.com:443/acme/cli/", CLI),
        ("ssh://git@github.com:22/acme/cli.git", CLI),
        ("/srv/git/acme/cli.git", "acme/cli"),
        (CLI, CLI),  # already normal: as it is
        ("", None),
    ],
)
def test_a_remote_is_named_without_scheme_user_password_or_port(url, remote):
    assert normal_remote(url) == remote
    if remote:
        assert "secret" not in remote and project_of_remote(remote) == "cli"


def _write(store, session_id, person, cwd, repository=None, touches=(), days_ago=0):
    project = project_of_remote(repository) if repository else cwd.rsplit("/", 1)[-1]
    memory = memory_record(session_id, project=project, days_ago=days_ago).model_copy(
        update={"person": person, "cwd": cwd, "repository": repository}
    )
    store.memories.replace_memory(memory, [], list(touches))


def _projects(store) -> dict[str, tuple[str, str | None]]:
    memories = [store.memories.memory_record(s) for s in ("early", "known", "late", "bobs")]
    return {m.session_id: (m.project, m.repository) for m in memories if m is not None}


def test_sessions_of_a_folder_join_its_repository_when_its_remote_becomes_known(store):
    folder = "/home/alice/improve-status-cmd-output"
    _write(store, "early", "alice", folder, days_ago=3)
    _write(store, "bobs", "bob", folder, days_ago=2)  # another person's folder of that name
    assert _projects(store)["early"] == ("improve-status-cmd-output", None)
    _write(store, "known", "alice", folder, repository=CLI, days_ago=1)
    _write(store, "late", "alice", folder)  # its laptop read no remote this time
    assert _projects(store) == {
        "early": ("cli", CLI),
        "known": ("cli", CLI),
        "late": ("cli", CLI),
        "bobs": ("improve-status-cmd-output", None),
    }


def test_another_person_s_change_is_found_whatever_their_folder_is_called(store):
    _write(
        store, "alice-change", "alice", "/home/alice/cli", CLI,
        [FileTouch("/home/alice/cli/src/billing.ts", 3, 0)], days_ago=1,
    )  # fmt: skip
    bob = "/Users/bob/20260205-cli"
    question = FileQuestion(path=f"{bob}/src/billing.ts", cwd=bob)
    # Bob's folder is known to no session yet: by its name it is another repository...
    assert file_history(store.files, None, question).results == []
    # ...unless his hook says its remote, as it reads it from his checkout's git config.
    said = FileQuestion(path=f"{bob}/src/billing.ts", cwd=bob, repository=CLI)
    assert [s.session_id for s in file_history(store.files, None, said).results] == ["alice-change"]
    _write(store, "bob-earlier", "bob", bob, CLI, [FileTouch(f"{bob}/README.md", 1, 0)])
    found = file_history(store.files, None, question).results
    assert [(s.session_id, s.person, s.edits) for s in found] == [("alice-change", "alice", 3)]
