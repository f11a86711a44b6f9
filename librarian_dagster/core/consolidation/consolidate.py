"""A project's library as its remembered sessions now support it, against what the checkout's
`_memory_library/` holds: `librarian library consolidate` prints the diff and, asked to, writes it.

Only sessions that may be shared are read: a private one (its person's, or of the `private`
domain) is never cited, since notes are committed with the repository. Each session is read
from its files and redacted as ingestion does, so nothing unredacted reaches a note."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from librarian_dagster.core.capture.readers import parse_session
from librarian_dagster.core.consolidation import git, notes
from librarian_dagster.core.consolidation.evidence import Evidence, evidence_of
from librarian_dagster.core.consolidation.mining import grounded, mine
from librarian_dagster.core.library.paths import LIBRARY_DIRNAME
from librarian_dagster.core.recall.file_match import root_of
from librarian_dagster.core.redaction.scan import redact_session
from librarian_dagster.core.store.ledger import Ledger, RememberedSource


@dataclass(frozen=True)
class Proposal:
    library: Path
    now: dict[str, str]
    """Folder -> the `recurring.md` the library holds."""
    then: dict[str, str]
    """Folder -> the `recurring.md` the sessions support."""
    read: int
    """Sessions read."""
    unread: int
    """Sessions whose files could not be read (gone from the mirror, say): not cited."""
    lines: int

    def diff(self) -> str:
        return notes.diff(self.now, self.then)

    def apply(self) -> list[str]:
        return notes.write(self.library, self.now, self.then)


def read_evidence(sources: Sequence[RememberedSource]) -> tuple[list[Evidence], int]:
    """The evidence of each shared session (and how many could not be read)."""
    shared = [s for s in sources if s.shared]
    cwds = sorted({s.cwd for s in sources if s.cwd})
    found, unread = [], 0
    for source in shared:
        session = parse_session(source.files, known_cwds=cwds)
        if session.skip_reason or not session.turns:
            unread += 1
            continue
        redacted, _ = redact_session(session)
        root = root_of(redacted.cwd or source.cwd or "/", cwds)
        found.append(evidence_of(redacted, root))
    return found, unread


def propose(ledger: Ledger, project: str, repo: Path, before: datetime | None = None) -> Proposal:
    """What `project`'s sessions (begun before `before`) support, for the checkout `repo`."""
    evidence, unread = read_evidence(ledger.remembered_sources(project, before))
    by_id = {e.session_id: e for e in evidence}
    lines = [line for line in mine(evidence) if grounded(line, by_id)]
    library = repo / LIBRARY_DIRNAME
    then = notes.proposed(lines, git.stale(repo, lines))
    return Proposal(library, notes.current(library), then, len(evidence), unread, len(lines))
