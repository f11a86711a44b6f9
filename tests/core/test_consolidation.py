"""Consolidation's parts on sessions made here: what a redacted session offers (`evidence_of`),
the lines sessions support (`mine`: two to write a line, three for a gotcha, placed in the
deepest folder their changed files share), their grounding, and the files and their diff."""

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from librarian_dagster.core.capture.session import CHANGE, RUN, Session, ToolUse, Turn
from librarian_dagster.core.consolidation import notes
from librarian_dagster.core.consolidation.checks import retired, superseded
from librarian_dagster.core.consolidation.consolidate import Proposal
from librarian_dagster.core.consolidation.consolidate import files as library_files
from librarian_dagster.core.consolidation.evidence import command_words, evidence_of
from librarian_dagster.core.consolidation.mining import (
    COMMAND,
    FAILURE,
    GOTCHA,
    LINES_PER_FOLDER,
    grounded,
    mine,
)

ROOT = "/work/app"
ESM = "Error [ERR_REQUIRE_ESM]: require() of ES Module /work/app/node_modules/chalk/index.js"


def session(sid: str, day: int, *, fails: str | None = ESM, fixed_in: str = "src/db/migrate.js",
            then: str = "npm test -- --experimental-vm-modules") -> Session:  # fmt: skip
    """A session that ran `npm test`, which failed saying `fails`, changed `fixed_in`, then ran
    `then`, which passed."""
    t = datetime(2026, 6, 1, tzinfo=UTC) + timedelta(days=day)
    turns = [Turn("user", "prompt", "Make the migration run first", t)]
    run = ToolUse("Bash", command="npm test 2>&1 | tail -20", action=RUN, is_error=bool(fails))
    turns += [Turn("assistant", "text", "", t, (run,)),
              Turn("user", "tool_result", f"Exit code 1\n{fails or 'ok'}", t)]  # fmt: skip
    edit = ToolUse("Edit", file_paths=(f"{ROOT}/{fixed_in}",), action=CHANGE)
    turns += [Turn("assistant", "text", "", t, (edit,)), Turn("user", "tool_result", "ok", t)]
    again = ToolUse("Bash", command=f"cd {ROOT} && {then}", action=RUN)
    turns += [Turn("assistant", "text", "", t, (again,)), Turn("user", "tool_result", "ok", t)]
    return Session(session_id=sid, project="app", cwd=ROOT, started_at=t, turns=turns)


def test_a_session_offers_its_failure_what_passed_next_and_what_it_changed_between():
    e = evidence_of(session("s1", 1), ROOT)
    [failure] = e.failures
    assert failure.command == "npm test" and failure.lines == (ESM,)
    assert failure.then == "npm test --" and failure.changed == ("src/db/migrate.js",)
    assert e.changed == ("src/db/migrate.js",) and e.passed == ("npm test --",)


def test_a_command_is_known_by_its_first_words_and_chores_are_not_kept():
    assert command_words("cd /a && FOO=1 mise run test 2>&1 | tail") == "mise run test"
    assert command_words("go build -o bin/x ./cmd") == "go build"  # -o's value is cut off
    assert command_words("env GOCACHE=/tmp/go go test ./...") == "go test ./..."
    assert command_words("git status") is None and command_words("ls -la && cat x") is None


def test_a_wrappers_line_a_log_line_and_code_say_nothing_that_failed():
    for said in ("[lint] ERROR task failed", "12:00:01 INFO cleanup done failed_branches=0",
                 "func Get(name string) (Strategy, error) {"):  # fmt: skip
        assert evidence_of(session("s1", 1, fails=said), ROOT).failures == ()


def test_one_session_writes_nothing_two_a_line_three_a_gotcha():
    assert not [x for x in mine([evidence_of(session("s1", 1), ROOT)]) if x.kind != COMMAND]
    two = [evidence_of(session(f"s{i}", i), ROOT) for i in (1, 2)]
    [line] = [x for x in mine(two) if x.kind != COMMAND]
    assert line.kind == FAILURE and line.folder == "src/db"
    assert [s for s, _ in line.sessions] == ["s2", "s1"]  # newest first
    assert line.quotes == ("npm test", ESM, "npm test --", "src/db/migrate.js")
    assert line.text.endswith("; then `npm test --` passed after a change to `src/db/migrate.js`")
    three = [*two, evidence_of(session("s3", 3, fixed_in="src/api/x.js"), ROOT)]
    [line] = [x for x in mine(three) if x.kind != COMMAND]
    assert line.kind == GOTCHA and line.folder == "src"  # no wider than its evidence


def test_the_same_failure_elsewhere_in_the_tree_or_at_another_line_is_one_cluster():
    other = ESM.replace("chalk/index.js", "ora/index.js")
    found = mine([evidence_of(session("s1", 1), ROOT),
                  evidence_of(session("s2", 2, fails=other), ROOT)])  # fmt: skip
    assert [x.kind for x in found if x.kind != COMMAND] == [FAILURE]


def test_a_session_that_changed_nothing_cannot_place_a_line():
    bare = session("s2", 2)
    bare.turns[:] = [t for t in bare.turns if not any(u.action == CHANGE for u in t.tool_uses)]
    found = mine([evidence_of(session("s1", 1), ROOT), evidence_of(bare, ROOT)])
    assert not [x for x in found if x.kind == FAILURE]


def test_a_folder_keeps_its_budget_of_lines_most_sessions_first():
    many = [evidence_of(session(f"s{i}", i, fails=f"Error: widget {chr(97 + i % 13)}{i % 13} "
                                f"cannot load", then=f"npm run build{i % 13}"), ROOT)
            for i in range(26)]  # fmt: skip
    by_folder = [x for x in mine(many) if x.folder == "src/db"]
    assert len(by_folder) == LINES_PER_FOLDER


def test_a_quote_found_in_none_of_its_sessions_is_not_grounded():
    two = [evidence_of(session(f"s{i}", i), ROOT) for i in (1, 2)]
    [line] = [x for x in mine(two) if x.kind == FAILURE]
    by_id = {e.session_id: e for e in two}
    assert grounded(line, by_id)
    assert not grounded(line.__class__(**{**line.__dict__, "quotes": ("npm ci",)}), by_id)


def test_the_file_cites_its_sessions_keeps_them_all_in_a_marker_and_redacts():
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    two = [evidence_of(session(f"s{i}", i, fails=f"Error: auth failed for token {secret}"), ROOT)
           for i in (1, 2)]  # fmt: skip
    text = library_files(mine(two), [], {}, set(), None)["src/db/recurring.md"]
    assert secret not in text and "REDACTED" in text
    said = [x for x in text.splitlines() if x.startswith("- ")]
    assert said and all("(2 sessions: s2 2026-06-03, s1 2026-06-02)" in x for x in said)
    markers = [json.loads(x[len("<!-- librarian line "):-len(" -->")])
               for x in text.splitlines() if x.startswith("<!-- librarian line ")]  # fmt: skip
    assert sorted(m["files"] for m in markers) == [[], ["src/db/migrate.js"]]  # commands: none
    sources = json.loads(library_files(mine(two), [], {}, set(), None)["src/db/.recurring.json"])
    assert {x["kind"] for x in sources["lines"]} == {FAILURE, COMMAND}
    assert all([s for s, _ in x["sessions"]] == ["s2", "s1"] for x in sources["lines"])


def test_the_same_input_gives_an_empty_diff_and_a_written_library_reads_back(tmp_path):
    two = [evidence_of(session(f"s{i}", i), ROOT) for i in (1, 2)]
    then = library_files(mine(two), [], {}, set(), None)
    library = tmp_path / "_memory_library"
    written = ["_memory_library/src/db/.recurring.json", "_memory_library/src/db/recurring.md"]
    assert notes.diff({}, then).count("+++ b/_memory_library/src/db/recurring.md") == 1
    assert notes.write(library, {}, then) == written
    assert notes.current(library) == then and notes.diff(notes.current(library), then) == ""
    assert notes.write(library, then, {}) == written
    assert notes.current(library) == {}


def test_a_later_revert_of_its_files_or_a_switch_away_from_its_command_supersedes_a_line():
    two = [evidence_of(session(f"s{i}", i), ROOT) for i in (1, 2)]
    [line] = [x for x in mine(two) if x.kind == FAILURE]
    assert superseded(line, two) is None
    revert = session("s3", 3, fails=None)
    undo = ToolUse("Bash", command="git revert HEAD~1", action=RUN)
    revert.turns.append(Turn("assistant", "text", "", None, (undo,)))
    assert superseded(line, [*two, evidence_of(revert, ROOT)]) == (
        "superseded by s3 2026-06-04, which reverted a change to its files"
    )
    switch = session("s4", 4, fails=None)
    switch.turns.insert(0, Turn("user", "prompt", "Switch away from `npm test`, use vitest", None))
    said = superseded(line, [*two, evidence_of(switch, ROOT)])
    assert said == "superseded by s4 2026-06-05, which switched away from `npm test`"
    older = session("s0", 0, fails=None)  # before the line's newest session: no reversal
    older.turns.insert(0, Turn("user", "prompt", "Switch away from `npm test`", None))
    assert superseded(line, [*two, evidence_of(older, ROOT)]) is None


def test_a_line_whose_files_are_gone_is_retired_and_kept_in_the_archive_till_forgotten(tmp_path):
    two = [evidence_of(session(f"s{i}", i), ROOT) for i in (1, 2)]
    [line] = [x for x in mine(two) if x.kind == FAILURE]
    (tmp_path / "src" / "db").mkdir(parents=True)
    (tmp_path / "src" / "db" / "migrate.js").write_text("x")
    assert retired(line, tmp_path) is None
    (tmp_path / "src" / "db" / "migrate.js").unlink()
    why = retired(line, tmp_path)
    assert why == "retired: `src/db/migrate.js` gone from the code"
    kept = notes.archive(None, [notes.Archived(line, why)], {"s1", "s2"})
    assert kept and ESM in kept and why in kept
    assert notes.archive(kept, [], {"s2"}) == kept  # one of its sessions is still there
    assert notes.archive(kept, [], set()) is None  # both forgotten: nothing of them is kept


def test_support_counts_need_no_person_a_new_line_does(tmp_path):
    def proposal(days) -> Proposal:
        lines = mine([evidence_of(session(f"s{i}", i), ROOT) for i in days])
        return Proposal(tmp_path, {}, library_files(lines, [], {}, set(), None), 0, 0, 0, 0, False)

    three, four = proposal((1, 2, 3)), proposal((1, 2, 3, 4))
    assert replace(four, now=three.then).needs_a_person() is False  # one more session, same lines
    assert replace(three, now=proposal((1, 2)).then).needs_a_person()  # a failure became a gotcha
    assert replace(three, now={}).needs_a_person()  # new lines


def test_a_line_whose_every_session_is_forgotten_goes_on_its_own_a_retired_one_waits(tmp_path):
    gone = mine([evidence_of(session(f"s{i}", i, fails=ESM), ROOT) for i in (1, 2)])
    other = "Error: the widget cannot load its theme file"
    both = mine([evidence_of(session(f"s{i}", i, fails=ESM if i < 3 else other), ROOT)
                 for i in (1, 2, 3, 4)])  # fmt: skip
    held = library_files(both, [], {}, set(), None)
    left = library_files(mine([evidence_of(session(f"s{i}", i, fails=other), ROOT)
                               for i in (3, 4)]), [], held, {"s3", "s4"}, None)  # fmt: skip
    assert not Proposal(tmp_path, held, left, 0, 0, 0, 0, False).needs_a_person()
    [line] = [x for x in gone if x.kind == FAILURE]
    retiring = library_files([], [notes.Archived(line, "retired: gone")], held, {"s1"}, None)
    assert Proposal(tmp_path, held, retiring, 0, 0, 0, 0, False).needs_a_person()
