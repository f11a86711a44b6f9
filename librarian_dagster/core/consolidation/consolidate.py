"""A project's library as its remembered sessions now support it, against what the checkout's
`_memory_library/` holds: `librarian library consolidate` prints the diff and, asked to, writes it.

Only sessions that may be shared are read: a private one (its person's, or of the `private`
domain) is never cited, since notes are committed with the repository. Each session is read
from its files and redacted as ingestion does, so nothing unredacted reaches a note."""

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from librarian_dagster.core.capture.readers import parse_session
from librarian_dagster.core.consolidation import git, notes
from librarian_dagster.core.consolidation.checks import retired, superseded
from librarian_dagster.core.consolidation.evidence import Evidence, evidence_of
from librarian_dagster.core.consolidation.mining import Line, grounded, mine
from librarian_dagster.core.library.paths import LIBRARY_DIRNAME
from librarian_dagster.core.recall.file_match import root_of
from librarian_dagster.core.redaction.scan import redact_session
from librarian_dagster.core.store.ledger import Ledger, RememberedSource


@dataclass(frozen=True)
class Proposal:
    library: Path
    now: dict[str, str]
    """Path inside the library -> what consolidation's files there hold."""
    then: dict[str, str]
    """The same, as the sessions support them."""
    read: int
    """Sessions read."""
    unread: int
    """Sessions whose files could not be read (gone from the mirror, say): not cited."""
    lines: int
    archived: int
    """Lines retired or superseded by this proposal."""
    checked: bool
    """Whether the checkout could be checked (git, and the files the sessions changed)."""

    def diff(self) -> str:
        return notes.diff(self.now, self.then)

    def apply(self) -> list[str]:
        return notes.write(self.library, self.now, self.then)

    def only_marks(self) -> bool:
        """Whether all it changes is stale marks and sources: what applies without a person."""

        def lines_of(files: Mapping[str, str]) -> dict[str, str]:
            return {p: notes.unmarked(t) for p, t in files.items() if p.endswith(notes.NOTES_NAME)}

        return bool(self.diff()) and lines_of(self.now) == lines_of(self.then)


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


def holds_the_project(repo: Path, evidence: Sequence[Evidence]) -> bool:
    """Whether `repo` is the sessions' checkout: it holds, or its history held, a file one of
    them changed."""
    changed = sorted({path for e in evidence for path in e.changed})
    return any((repo / path).exists() for path in changed) or git.ever_held(repo, changed)


def propose(ledger: Ledger, project: str, repo: Path, before: datetime | None = None) -> Proposal:
    """What `project`'s sessions (begun before `before`) support, for the checkout `repo`."""
    sources = ledger.remembered_sources(project, before)
    evidence, unread = read_evidence(sources)
    by_id = {e.session_id: e for e in evidence}
    lines = [line for line in mine(evidence) if grounded(line, by_id)]
    checked = holds_the_project(repo, evidence)
    kept, archived = [], []
    for line in lines:
        why = (retired(line, repo) if checked else None) or superseded(line, evidence)
        if why:
            archived.append(notes.Archived(line, why))
        else:
            kept.append(line)
    library = repo / LIBRARY_DIRNAME
    now = notes.current(library)
    known = {e.session_id for e in evidence}
    then = files(kept, archived, now, known, repo if checked else None)
    return Proposal(library, now, then, len(evidence), unread, len(kept), len(archived), checked)


def files(kept: Sequence[Line], archived: Sequence[notes.Archived], now: Mapping[str, str],
          known: set[str], repo: Path | None) -> dict[str, str]:  # fmt: skip
    """Path inside the library -> text: each folder's notes, sources and archive."""
    stale = git.stale(repo, kept) if repo else {}
    commits = git.commits(repo, kept) if repo else {}
    code_then = None
    if repo:
        named = sorted({f for line in kept for f in line.files[: notes.MARKED_FILES]})
        code_then = notes.Code(git.head(repo), {f: git.blob(repo / f) for f in named})
    by_folder: dict[str, list[Line]] = defaultdict(list)
    for line in kept:
        by_folder[line.folder].append(line)
    out = {}
    for folder, held in sorted(by_folder.items()):
        out[notes.path_of(folder, notes.NOTES_NAME)] = notes.render(held, stale, code_then)
        out[notes.path_of(folder, notes.SOURCES_NAME)] = notes.sources(held, commits)
    gone: dict[str, list[notes.Archived]] = defaultdict(list)
    for item in archived:
        gone[item.line.folder].append(item)
    archives = {
        p.rsplit("/", 1)[0] if "/" in p else "" for p in now if p.endswith(notes.ARCHIVE_NAME)
    }
    for folder in sorted(archives | set(gone)):
        path = notes.path_of(folder, notes.ARCHIVE_NAME)
        text = notes.archive(now.get(path), gone.get(folder, []), known)
        if text:
            out[path] = text
    return out
