from datetime import UTC, datetime

from librarian_dagster.core.capture.readers import parse_session, session_files_for
from librarian_dagster.core.capture.session import CHANGE, RUN, Session, ToolUse, Turn
from librarian_dagster.core.digest.chunking import chunk_digest
from librarian_dagster.core.digest.distil import closing_lead
from librarian_dagster.core.digest.offline import DIGEST_BUDGET, OfflineDigester, exchanges
from librarian_dagster.core.digest.schema import content_hash, render_digest
from tests.conftest import TRANSCRIPTS

T = datetime(2026, 11, 1, tzinfo=UTC)


def _session(turns, title=None):
    return Session(session_id="s", project="proj", turns=turns, title=title)


def test_exchanges_drop_bare_slash_commands_and_ide_context():
    turns = [
        Turn("user", "prompt", "/clear", T),
        Turn("user", "prompt", "<ide_selection>secret stuff</ide_selection> Fix the flaky test", T),
        Turn("assistant", "text", "Fixed by waiting for the socket.", T,
             (ToolUse("Edit", ("/src/app/test_net.py",), None, "Edit test_net.py",
                      action=CHANGE),)),
    ]  # fmt: skip
    parts = exchanges(turns)
    assert [p.prompt for p in parts] == ["Fix the flaky test"]
    assert parts[0].files_edited == ["/src/app/test_net.py"]


def test_offline_digest_fills_every_section_from_the_session():
    turns = [
        Turn("user", "prompt", "The upload endpoint fails with a 413 error on big files.", T),
        Turn("assistant", "text", "The root cause was nginx's default body limit of 1m.\n\n"
             "Raised client_max_body_size in nginx.conf to 50m.", T,
             (ToolUse("Edit", ("/srv/nginx.conf",), None, "Edit nginx.conf", action=CHANGE),
              ToolUse("Bash", (), "nginx -t", "Bash: nginx -t", action=RUN))),
        Turn("user", "prompt", "Thanks. What else?", T),
        Turn("assistant", "text", "Next step: add a test for uploads over 50 MB.", T),
    ]  # fmt: skip
    result = OfflineDigester().digest(_session(turns))
    d = result.digest
    # The first ask is the summary, said once: not again as the first thing worked on.
    assert d.summary.startswith("The upload endpoint fails")
    assert not any(w.startswith("The upload endpoint fails") for w in d.worked_on)
    assert any("413" in p for p in d.problem)
    assert any("root cause was nginx" in p for p in d.problem)
    assert any("client_max_body_size" in s for s in d.solution)
    assert not any("nginx -t" in s for s in d.solution)  # a command run is no memory
    assert d.open_items == ["Next step: add a test for uploads over 50 MB."]
    assert d.domain == "technical" and 1 <= d.importance <= 5
    assert "proj" in d.summary
    chunks = chunk_digest(d)
    assert chunks[0].section == "summary"
    assert len(chunks) == 1 + len(d.worked_on) + len(d.problem) + len(d.solution) + len(
        d.open_items
    )
    assert "## How it was solved" in render_digest(d)


def test_fillers_bare_exit_codes_and_shell_prompts_are_dropped():
    turns = [
        Turn("user", "prompt", "Make the sync retry when the token expired", T),
        Turn("assistant", "text", "Let me look.", T, (ToolUse("Bash", (), "go test ./...",
             "Bash: go test", is_error=True, action=RUN),)),
        Turn("user", "tool_result", "Exit code 1\n--- FAIL: TestSync (0.01s)\nsync_test.go:40: "
             "token expired error not retried", T),
        Turn("assistant", "text", "Fixed: the sync now retries once after refreshing the token.",
             T),
        Turn("user", "prompt", "yes please, commit this", T),
        Turn("user", "prompt", "! git status", T),
        Turn("user", "prompt", "/model sonnet", T),
        Turn("user", "prompt", "ok", T),
    ]  # fmt: skip
    d = OfflineDigester().digest(_session(turns)).digest
    # Its one real ask is the summary, and no filler is something worked on.
    assert d.summary.startswith("Make the sync retry when the token expired")
    assert d.worked_on == []
    assert d.problem == ["Failed: --- FAIL: TestSync (0.01s)"]
    # The closing reply's outcome, once (its first sentence says the same).
    assert d.solution == ["Fixed: the sync now retries once after refreshing the token."]
    assert not any("Exit code" in line for line in d.problem + d.solution)
    assert d.open_items == []  # a filler left unanswered asks for nothing


def test_a_plan_started_session_is_summarised_from_the_plan_not_its_boilerplate():
    plan = (
        "Implement the following plan: # ENT-258: Mid-turn commits miss their trailers "
        "## Context When Claude makes `git commit` calls during a turn, commits don't get "
        "`Entire-Checkpoint` trailers. Observed in a real session. ## Step 1: Track pending "
        "checkpoint IDs Add a field to the session state. ## Step 2: Tests Cover both paths."
    )
    turns = [
        Turn("user", "prompt", plan, T),
        Turn("assistant", "text", "All five steps are complete.", T),
    ]
    d = OfflineDigester().digest(_session(turns)).digest
    assert d.summary == "ENT-258: Mid-turn commits miss their trailers in proj."
    assert d.worked_on[0] == "Plan: ENT-258: Mid-turn commits miss their trailers"
    assert d.worked_on[1].startswith(
        "When Claude makes `git commit` calls during a turn, commits don't get "
        "`Entire-Checkpoint` trailers."
    )
    assert d.worked_on[2].startswith("Steps: Step 1: Track pending checkpoint IDs")
    assert not any("Implement the following plan" in line for line in d.worked_on)


def test_a_plan_s_headings_end_at_their_lines():
    plan = (
        "Implement the following plan:\n\n# ENT-258: Mid-turn commits from Claude miss their "
        "Entire-Checkpoint trailers\n\n## Context\n\nWhen Claude makes `git commit` calls "
        "during a turn, commits don't get trailers.\n\n## Bug 1: Path format mismatch in "
        "`sessionHasNewContent`\n\nTranscript paths are absolute.\n"
    )
    turns = [Turn("user", "prompt", plan, T), Turn("assistant", "text", "Done.", T)]
    d = OfflineDigester().digest(_session(turns)).digest
    assert d.worked_on[:3] == [
        "Plan: ENT-258: Mid-turn commits from Claude miss their Entire-Checkpoint trailers",
        "When Claude makes `git commit` calls during a turn, commits don't get trailers",
        "Steps: Bug 1: Path format mismatch in `sessionHasNewContent`",
    ]


def test_commits_pull_requests_decisions_and_what_is_left_become_lines():
    commit = (
        "git add a.go && git commit -m \"$(cat <<'EOF'\nFix auto-commit filtering out sibling "
        'directories\n\nWhen Claude runs from a subdirectory...\nEOF\n)"'
    )
    turns = [
        Turn("user", "prompt", "address the review comments on the sibling directory fix", T,
             ()),
        Turn("assistant", "text", "We'll go with a repo-relative path instead of the cwd, "
             "because hooks run from subdirectories.", T,
             (ToolUse("Bash", (), "gh api repos/acme/cli/pulls/112/comments", "Bash", action=RUN),
              ToolUse("Bash", (), commit, "Bash", action=RUN),
              ToolUse("Bash", (), 'gh pr create --title "Fix sibling directories" --body x',
                      "Bash", action=RUN))),
        Turn("assistant", "text", "Done. Pushed the fix.\n\n### Open questions for later\n\n"
             "TODO: the Windows paths are not handled yet.", T),
    ]  # fmt: skip
    d = OfflineDigester().digest(_session(turns)).digest
    assert "Pull requests: #112" in d.solution
    assert "Commit: Fix auto-commit filtering out sibling directories" in d.solution
    assert "Opened pull request: Fix sibling directories" in d.solution
    assert any(s.startswith("We'll go with a repo-relative path") for s in d.solution)
    # What is left, not the heading above it.
    assert d.open_items == ["TODO: the Windows paths are not handled yet."]


def test_a_labelled_paragraph_is_read_as_what_its_label_says():
    reply = (
        "All tests pass. Here's the summary:\n\n**CI lint failure cause:**\n"
        "- `staticcheck SA5011` flags a possible nil dereference after `t.Fatal()`\n\n"
        "**Fix (2 files):**\n\n1. **`parser_test.go`** — Added an explicit return after each "
        "`t.Fatal()`\n"
    )
    turns = [
        Turn("user", "prompt", "why is lint failing on the build?", T),
        Turn("assistant", "text", reply, T),
    ]
    d = OfflineDigester().digest(_session(turns)).digest
    assert d.problem[0] == (
        "CI lint failure cause: `staticcheck SA5011` flags a possible nil dereference after "
        "`t.Fatal()`"
    )
    assert d.solution[0] == (
        "Fix (2 files): `parser_test.go` — Added an explicit return after each `t.Fatal()`"
    )


def test_a_line_is_said_once_across_sections():
    report = "The sync still fails with a timeout error after the retry change."
    turns = [
        Turn("user", "prompt", "Add a retry to the sync client", T),
        Turn("assistant", "text", "Added one retry with backoff to the sync client.", T),
        Turn("user", "prompt", report, T),
        Turn("assistant", "text", "The root cause was the proxy closing idle connections.\n\n"
             "Fixed: the client now sends keep-alives every 20 seconds.", T),
    ]  # fmt: skip
    d = OfflineDigester().digest(_session(turns)).digest
    lines = d.worked_on + d.problem + d.solution + d.open_items
    # A prompt that reports a fault is both something worked on and the problem: said once.
    assert sum(line.startswith("The sync still fails") for line in lines) == 1
    assert any("root cause was the proxy" in p for p in d.problem)


def test_lines_that_say_nothing_are_left_out():
    edits = tuple(
        ToolUse(
            "Edit", (f"/repo/internal/storage/backend_number_{i}.go",), None, "Edit", action=CHANGE
        )
        for i in range(6)
    )
    turns = [
        Turn("user", "prompt", "Make the storage backends close their files on shutdown", T),
        Turn("assistant", "text", "So the issue is different. Since the backend is not here, "
             "let me check whether the root cause is the pool.", T, edits),
        Turn("user", "prompt", "Operation stopped by hook: another session is active", T),
        Turn("assistant", "text", "Now let me read the call sites of the storage pool.", T),
        Turn("user", "prompt", "is it redundant?", T),
        Turn("assistant", "text", "Yeah, it's redundant.", T),
        Turn("user", "prompt", "Why do the backends leak file handles after a reload?", T),
        Turn("assistant", "text", "The root cause was the reload path skipping Close on the "
             "old backend.\n\nFixed: reload now closes the old backend before opening the new "
             "one.", T),
    ]  # fmt: skip
    d = OfflineDigester().digest(_session(turns)).digest
    lines = d.worked_on + d.problem + d.solution + d.open_items
    text = "\n".join(lines)
    assert "root cause was the reload path" in text and "reload now closes" in text
    assert "issue is different" not in text  # a cause in five words names nothing
    assert "let me" not in text.lower()  # what the assistant was about to do
    assert "Operation stopped by hook" not in text  # the user typed none of it
    assert "redundant" not in text  # three words say nothing on their own
    files = [line for line in d.worked_on if line.startswith("Files changed:")]
    assert len(files) == 1 and len(files[0]) <= 180 and files[0].endswith("…")


def test_a_closing_reply_s_lead_starts_at_what_it_says():
    assert closing_lead("Yes — git does the same when only the name is set.") == (
        "git does the same when only the name is set"
    )
    assert closing_lead("**Done.** The parser now keeps comments.") == (
        "The parser now keeps comments"
    )
    assert closing_lead("Now let me read the call sites of the pool.") is None


def test_a_long_session_s_digest_stays_within_its_budget_and_keeps_each_section():
    turns = []
    for i in range(200):
        turns += [
            Turn("user", "prompt", f"Please change the parser number {i} so that it keeps "
                 f"comments and blank lines intact in every file we format", T),
            Turn("assistant", "text", f"Fixed parser {i}: it now keeps comments. The root "
                 f"cause was the tokenizer {i} dropping trivia.", T),
        ]  # fmt: skip
    d = OfflineDigester().digest(_session(turns)).digest
    lines = d.worked_on + d.problem + d.solution + d.open_items
    assert len(d.summary) + sum(map(len, lines)) <= DIGEST_BUDGET
    assert d.worked_on and d.problem and d.solution
    assert all(len(line) <= 200 for line in lines)
    # The summary, headings and footer beside them: the rendered digest stays compact too.
    assert len(render_digest(d)) <= DIGEST_BUDGET + 500


def test_digest_is_deterministic_and_hash_tracks_the_input():
    [files] = session_files_for([TRANSCRIPTS / "obra__episodic-memory" / "tiny-conversation.jsonl"])
    session = parse_session(files)
    first = OfflineDigester().digest(session).digest
    assert first == OfflineDigester().digest(parse_session(files)).digest
    before = content_hash(session)
    session.turns.append(Turn("user", "prompt", "one more thing", T))
    assert content_hash(session) != before
