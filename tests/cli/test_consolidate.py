"""`librarian library consolidate`, end to end: Claude Code transcripts ingested by the real job,
their recurring failure proposed as a diff, written with `--apply`, delivered by the real
PreToolUse hook before an edit in its folder; a private session never cited; the same input
gives an empty diff; `--before` replays the library as it stood."""

import json
import subprocess

import psycopg
import pytest

from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.helpers import make_settings
from tests.hooks.hookutil import HookRunner, pre_tool_use_event

pytestmark = pytest.mark.process  # runs the PreToolUse hook: not in the fast tier

ESM = "Error [ERR_REQUIRE_ESM]: require() of ES Module /work/app/node_modules/chalk/index.js"
SESSIONS = [f"c0de{i:04d}-0000-4000-8000-{i:012d}" for i in range(4)]
PRIVATE = SESSIONS[3]


def _records(sid: str, day: int, repo: str) -> list[dict]:
    """A session that ran `npm test`, which failed saying ESM, fixed src/db/migrate.js, then ran
    `npm test -- --experimental-vm-modules`, which passed."""
    when = f"2026-06-{day:02d}T10:00:0"
    head = {"sessionId": sid, "cwd": repo}

    def said(i: int, role: str, content) -> dict:
        message = {"role": role, "content": content}
        if role == "assistant":
            message |= {"id": f"msg_{i}", "model": "claude-test"}
        return {**head, "type": role, "uuid": f"{sid}-{i}", "timestamp": f"{when}{i}Z",
                "message": message}  # fmt: skip

    def tool(i: int, name: str, given: dict) -> dict:
        return said(i, "assistant", [{"type": "tool_use", "id": f"t{i}", "name": name,
                                      "input": given}])  # fmt: skip

    def result(i: int, text: str, error: bool = False) -> dict:
        return said(i, "user", [{"type": "tool_result", "tool_use_id": f"t{i - 1}",
                                 "content": text, "is_error": error}])  # fmt: skip

    return [
        said(0, "user", "The migration test fails, make it pass"),
        tool(1, "Bash", {"command": "npm test"}),
        result(2, f"Exit code 1\n{ESM}", error=True),
        tool(
            3,
            "Edit",
            {"file_path": f"{repo}/src/db/migrate.js", "old_string": "a", "new_string": "b"},
        ),
        result(4, "The file has been updated."),
        tool(5, "Bash", {"command": "npm test -- --experimental-vm-modules"}),
        result(6, "4 passing"),
        said(7, "assistant", [{"type": "text", "text": "Fixed: the tests run as ES modules."}]),
    ]


def _commit(repo, message: str, when: str | None = None) -> str:
    """Commit everything, at `when` (else now); its short hash."""
    dated = {"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when} if when else {}
    for args in (["add", "."], ["commit", "-qm", message], ["rev-parse", "--short", "HEAD"]):
        done = subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                               *args], check=True, capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", **dated})  # fmt: skip
    return done.stdout.strip()


def test_recurring_failure_is_proposed_written_delivered_and_never_cites_a_private_session(
    tmp_path, database_url, librarian_cli
):
    repo = tmp_path / "app"
    (repo / "src" / "db").mkdir(parents=True)
    (repo / "src" / "db" / "migrate.js").write_text("module.exports = 1\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    first = _commit(repo, "first", "2026-05-01T00:00:00Z")  # before every session
    mirror = tmp_path / "mirror" / "-work-app"
    mirror.mkdir(parents=True)
    for day, sid in enumerate(SESSIONS, start=3):
        lines = _records(sid, day, str(repo))
        (mirror / f"{sid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    settings = make_settings(tmp_path, database_url, mirror.parent)
    outcomes = ingest_sessions(session_files_for([mirror]), settings, open_instance(settings),
                               per_run=10)  # fmt: skip
    assert [o.status for o in outcomes] == ["ingested"] * 4
    with psycopg.connect(database_url) as conn:  # its person keeps this one private
        conn.execute("UPDATE memories SET private = true WHERE session_id = %s", (PRIVATE,))
        [(project,)] = conn.execute("SELECT DISTINCT project FROM memories").fetchall()
    env = {"PATH": "/usr/bin:/bin", "LIBRARIAN_HOME": str(settings.home),
           "LIBRARIAN_DATABASE_URL": database_url}  # fmt: skip

    proposed = librarian_cli(["library", "consolidate", project, "--repo", str(repo)], env)
    assert proposed.returncode == 0, proposed.stderr
    assert "+++ b/_memory_library/src/db/recurring.md" in proposed.stdout
    assert f"- Gotcha: `npm test` failed with `{ESM}`" in proposed.stdout
    assert (
        "then `npm test --` passed after a change to `src/db/migrate.js` (3 sessions: "
        "c0de0002 2026-06-05,"
    ) in proposed.stdout
    assert PRIVATE not in proposed.stdout and PRIVATE[:8] not in proposed.stdout
    assert not (repo / "_memory_library").exists()  # a proposal writes nothing

    applied = librarian_cli(["library", "consolidate", project, "--repo", str(repo), "--apply"],
                            env)  # fmt: skip
    assert applied.returncode == 0 and applied.stdout == proposed.stdout
    assert (
        "wrote _memory_library/src/db/.recurring.json, _memory_library/src/db/recurring.md"
        in applied.stderr
    )
    again = librarian_cli(["library", "consolidate", project, "--repo", str(repo)], env)
    assert again.returncode == 0 and again.stdout == ""
    assert "nothing to change" in again.stderr

    # Before an edit in src/db, the real hook hands the agent the line, not its marker.
    (tmp_path / "hook").mkdir()
    edit = pre_tool_use_event(str(repo / "src/db/migrate.js"), str(repo))
    hook = HookRunner(tmp_path / "hook")
    done = hook.run("pre_tool_use", edit)
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "Gotcha: `npm test` failed with" in context and "librarian line" not in context
    assert "may be stale" not in context  # its one commit is older than every session

    # The fixed file changed after the newest session: the line may be stale since then.
    (repo / "src" / "db" / "migrate.js").write_text("module.exports = 2\n")
    since = _commit(repo, "later")
    # The hook says so at once, before any consolidation runs again.
    edit["session_id"] = "a-later-session"
    context = json.loads(hook.run("pre_tool_use", edit).stdout)[
        "hookSpecificOutput"]["additionalContext"]  # fmt: skip
    assert f"(may be stale since {first})" in context and "librarian line" not in context
    stale = librarian_cli(["library", "consolidate", project, "--repo", str(repo)], env)
    assert f"+- Gotcha: `npm test` failed with `{ESM}`" in stale.stdout
    assert stale.stdout.count(f"(may be stale since {since})") == 1

    # Replayed before the third session began: two sessions, a line but no gotcha yet.
    before = librarian_cli(["library", "consolidate", project, "--repo", str(repo),
                            "--before", "2026-06-05"], env)  # fmt: skip
    assert f"-- Gotcha: `npm test` failed with `{ESM}`" in before.stdout  # what the file says
    assert "+- `npm test` failed with" in before.stdout and "(2 sessions:" in before.stdout

    # Gone from the code: retired, into the archive, which the hook never injects.
    (repo / "src" / "db" / "migrate.js").unlink()
    _commit(repo, "gone")
    gone = librarian_cli(["library", "consolidate", project, "--repo", str(repo), "--apply"], env)
    assert f"-- Gotcha: `npm test` failed with `{ESM}`" in gone.stdout
    assert "1 retired or superseded" in gone.stderr
    archived = (repo / "_memory_library" / "src" / "db" / ".recurring-archive.md").read_text()
    assert "`src/db/migrate.js` gone from the code" in archived and ESM in archived
    left = (repo / "_memory_library" / "src" / "db" / "recurring.md").read_text()
    assert ESM not in left and "`npm test --` ran and passed" in left  # what it ran holds


def test_a_configured_model_says_lines_shorter_through_the_real_sdk_and_invents_nothing(
    tmp_path, database_url, librarian_cli
):
    from tests.fake_anthropic import FakeAnthropic, message

    repo = tmp_path / "app"
    (repo / "src" / "db").mkdir(parents=True)
    mirror = tmp_path / "mirror" / "-work-app"
    mirror.mkdir(parents=True)
    for day, sid in enumerate(SESSIONS[:2], start=3):
        lines = _records(sid, day, str(repo))
        (mirror / f"{sid}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    settings = make_settings(tmp_path, database_url, mirror.parent)
    ingest_sessions(session_files_for([mirror]), settings, open_instance(settings), per_run=10)
    with psycopg.connect(database_url) as conn:
        [(project,)] = conn.execute("SELECT DISTINCT project FROM memories").fetchall()

    with FakeAnthropic() as fake:

        def shorter(raw: bytes):
            asked = json.loads(raw)["messages"][0]["content"]
            notes = json.loads(asked.split("\n", 1)[1])
            return message(json.dumps({"notes": [  # the command line gains a flag: refused
                {"id": n["id"], "text": n["note"].replace(" failed with ", ": ").replace(
                    " ran and passed", " passes with `--ci`")} for n in notes]}))  # fmt: skip

        fake.default = shorter  # type: ignore[method-assign]
        env = {"PATH": "/usr/bin:/bin", "LIBRARIAN_HOME": str(settings.home),
               "LIBRARIAN_DATABASE_URL": database_url, "LIBRARIAN_DIGEST_PROVIDER": "anthropic",
               "ANTHROPIC_API_KEY": "sk-ant-api03-FAKEFAKEFAKEFAKEFAKEFAKE",
               "LIBRARIAN_ANTHROPIC_BASE_URL": fake.url}  # fmt: skip
        done = librarian_cli(["library", "consolidate", project, "--repo", str(repo), "--apply"],
                             env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"+- `npm test`: `{ESM}`; then `npm test --` passed" in done.stdout
        assert "+- `npm test --` ran and passed (2 sessions" in done.stdout  # as mined
        assert "--ci" not in done.stdout
        [call] = fake.calls()
        again = librarian_cli(["library", "consolidate", project, "--repo", str(repo)], env)
        assert again.stdout == "" and fake.calls() == [call]  # the same lines: no request


def test_a_project_with_no_session_remembered_is_said_so(tmp_path, database_url, librarian_cli):
    env = {"PATH": "/usr/bin:/bin", "LIBRARIAN_HOME": str(tmp_path / "home"),
           "LIBRARIAN_DATABASE_URL": database_url}  # fmt: skip
    done = librarian_cli(["library", "consolidate", "nosuch", "--repo", str(tmp_path)], env)
    assert done.returncode == 1 and done.stdout == ""
    assert "no session of 'nosuch' is remembered" in done.stderr
