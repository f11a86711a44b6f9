from datetime import UTC, datetime

from librarian_dagster.core.capture.files import session_files_for
from librarian_dagster.core.capture.transcripts import Session, parse_session
from librarian_dagster.core.capture.turns import ToolUse, Turn
from librarian_dagster.core.digest.chunking import chunk_digest
from librarian_dagster.core.digest.offline import OfflineDigester, exchanges
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
             (ToolUse("Edit", ("/src/app/test_net.py",), None, "Edit test_net.py"),)),
    ]  # fmt: skip
    parts = exchanges(turns)
    assert [p.prompt for p in parts] == ["Fix the flaky test"]
    assert parts[0].files_edited == ["/src/app/test_net.py"]


def test_offline_digest_fills_every_section_from_the_session():
    turns = [
        Turn("user", "prompt", "The upload endpoint fails with a 413 error on big files.", T),
        Turn("assistant", "text", "Raised client_max_body_size in nginx.conf to 50m.", T,
             (ToolUse("Edit", ("/srv/nginx.conf",), None, "Edit nginx.conf"),
              ToolUse("Bash", (), "nginx -t", "Bash: nginx -t"))),
        Turn("user", "prompt", "Thanks. What else?", T),
        Turn("assistant", "text", "Next step: add a test for uploads over 50 MB.", T),
    ]  # fmt: skip
    result = OfflineDigester().digest(_session(turns))
    d = result.digest
    assert d.worked_on[0].startswith("The upload endpoint fails")
    assert any("413" in p for p in d.problem)
    assert any("client_max_body_size" in s for s in d.solution)
    assert any("nginx -t" in s for s in d.solution)
    assert d.open_items == ["Next step: add a test for uploads over 50 MB."]
    assert d.domain == "technical" and 1 <= d.importance <= 5
    assert "proj" in d.summary
    chunks = chunk_digest(d)
    assert chunks[0].section == "summary"
    assert len(chunks) == 1 + len(d.worked_on) + len(d.problem) + len(d.solution) + len(
        d.open_items
    )
    assert "## How it was solved" in render_digest(d)


def test_digest_is_deterministic_and_hash_tracks_the_input():
    [files] = session_files_for([TRANSCRIPTS / "obra__episodic-memory" / "tiny-conversation.jsonl"])
    session = parse_session(files)
    first = OfflineDigester().digest(session).digest
    assert first == OfflineDigester().digest(parse_session(files)).digest
    before = content_hash(session)
    session.turns.append(Turn("user", "prompt", "one more thing", T))
    assert content_hash(session) != before
