"""All 199 real sessions of the dev corpus: zero exceptions, sane output, nothing left to redact.

Marked slow (about a minute on two cores) but runs in CI by default: the marker only names it.
"""

from pathlib import Path

import pytest

from librarian_dagster.core.capture.claude_code.files import discover_sessions
from librarian_dagster.core.capture.readers import parse_session
from librarian_dagster.core.redaction.scan import find_secrets, redact_session


@pytest.mark.slow
def test_every_corpus_session_parses_and_redacts(dev_corpus: Path):
    sessions = discover_sessions(dev_corpus)
    assert len(sessions) == 199
    parsed = skipped = 0
    for files in sessions:
        session = parse_session(files)
        if session.skip_reason:
            skipped += 1
            continue
        parsed += 1
        assert session.turns and session.started_at and session.project
        assert any(t.kind == "prompt" for t in session.turns)
        # base64 never goes further than the parser.
        assert not any(";base64," in t.text for t in session.turns)
        redacted, _ = redact_session(session)
        # What the blocking check no_secrets_remain does: a second scan finds nothing.
        for turn in redacted.turns:
            assert find_secrets(turn.text) == []
            for tu in turn.tool_uses:
                assert find_secrets(tu.summary) == []
    assert parsed >= 190, (parsed, skipped)
