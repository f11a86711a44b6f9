"""A project's library as its remembered sessions now support it, against what the checkout's
`_memory_library/` holds: `librarian library consolidate` prints the diff and, asked to, writes it.

Only sessions that may be shared are read: a private one (its person's, or of the `private`
domain) is never cited, since notes are committed with the repository. Each session is read
from its files and redacted as ingestion does, so nothing unredacted reaches a note."""

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from librarian_dagster.core.capture.readers import parse_session
from librarian_dagster.core.consolidation import git, notes, wording
from librarian_dagster.core.consolidation.cache import EvidenceCache
from librarian_dagster.core.consolidation.checks import retired, superseded
from librarian_dagster.core.consolidation.evidence import Evidence, evidence_of
from librarian_dagster.core.consolidation.mining import Line, grounded, mine
from librarian_dagster.core.library.paths import LIBRARY_DIRNAME
from librarian_dagster.core.recall.file_match import root_of
from librarian_dagster.core.redaction.scan import redact_session
from librarian_dagster.core.store.ledger import Ledger, RememberedSource


@dataclass(frozen=True)
class Proposal:
    library: Path | None
    """The checkout's `_memory_library/`; None: no checkout of the project here."""
    now: dict[str, str]
    """Path inside the library -> what consolidation's files there hold."""
    then: dict[str, str]
    """The same, as the sessions support them."""
    read: int
    """Sessions read."""
    unread: int
    """Sessions whose files could not be read (gone from their folder, say): not cited."""
    lines: int
    archived: int
    """Lines retired or superseded by this proposal."""
    checked: bool
    """Whether the checkout could be checked (git, and the files the sessions changed)."""
    cited: dict[str, list[str]] = field(default_factory=dict)
    """What each line it keeps says -> the sessions it cites, newest first."""

    def diff(self) -> str:
        return notes.diff(self.now, self.then)

    def apply(self) -> list[str]:
        if self.library is None:
            raise ValueError("no checkout of the project here to write its library in")
        return notes.write(self.library, self.now, self.then)

    def needs_a_person(self) -> bool:
        """Whether it says something new: a line, or an archive entry (a line retired or
        superseded). What applies on its own only drops or restates: sources, support counts,
        stale marks, and the lines and entries whose every session was forgotten."""
        for path, text in self.then.items():
            held = self.now.get(path, "")
            if path.endswith(notes.NOTES_NAME):
                if set(notes.claims(text)) - set(notes.claims(held)):
                    return True
            elif path.endswith(notes.ARCHIVE_NAME) and set(notes.archived(text)) - set(
                notes.archived(held)
            ):
                return True
        return False


def read_evidence(
    sources: Sequence[RememberedSource], cache: EvidenceCache | None = None
) -> tuple[list[Evidence], int]:
    """The evidence of each shared session (and how many could not be read): from `cache` for
    a session whose files are as they were, else read and redacted, and kept there."""
    shared = [s for s in sources if s.shared]
    cwds = sorted({s.cwd for s in sources if s.cwd})
    found, unread = [], 0
    for source in shared:
        fingerprint = source.files.fingerprint()
        held = cache.get(source.files.session_id, fingerprint) if cache else None
        if held is None:
            session = parse_session(source.files, known_cwds=cwds)
            if session.skip_reason or not session.turns:
                unread += 1
                continue
            redacted, _ = redact_session(session)
            held = evidence_of(redacted, root_of(redacted.cwd or source.cwd or "/", cwds))
            if cache:
                cache.put(held, fingerprint)
        found.append(held)
    if cache:
        cache.keep_only(e.session_id for e in found)
    return found, unread


def local_checkout(sources: Sequence[RememberedSource]) -> Path | None:
    """The project's checkout on this machine, if any: the root of the newest session's folder
    that is still here and a git checkout."""
    cwds = sorted({s.cwd for s in sources if s.cwd})
    for source in sorted(sources, key=lambda s: s.started_at or datetime.min.replace(tzinfo=UTC),
                         reverse=True):  # fmt: skip
        root = Path(root_of(source.cwd, cwds)) if source.cwd else None
        if root and root.is_dir() and git.is_checkout(root):
            return root
    return None


def holds_the_project(repo: Path, evidence: Sequence[Evidence]) -> bool:
    """Whether `repo` is the sessions' checkout: it holds, or its history held, a file one of
    them changed."""
    changed = sorted({path for e in evidence for path in e.changed})
    return any((repo / path).exists() for path in changed) or git.ever_held(repo, changed)


def propose(
    ledger: Ledger,
    project: str,
    repo: Path | None,
    before: datetime | None = None,
    cache: EvidenceCache | None = None,
    answer: Callable[[str], str] | None = None,
) -> Proposal:
    """What `project`'s sessions (begun before `before`) support, for the checkout `repo` (None:
    the project's checkout on this machine, if there is one; else a proposal from nothing).
    `answer`: a configured model's reply to a wording request, which may say lines shorter."""
    sources = ledger.remembered_sources(project, before)
    evidence, unread = read_evidence(sources, cache)
    repo = repo or local_checkout(sources)
    by_id = {e.session_id: e for e in evidence}
    lines = [line for line in mine(evidence) if grounded(line, by_id)]
    checked = repo is not None and holds_the_project(repo, evidence)
    kept, archived = [], []
    for line in lines:
        why = (retired(line, repo) if checked and repo else None) or superseded(line, evidence)
        if why:
            archived.append(notes.Archived(line, why))
        else:
            kept.append(line)
    library = repo / LIBRARY_DIRNAME if repo else None
    now = notes.current(library) if library else {}
    if answer is not None:
        kept, _ = wording.reword(kept, answer, notes.wordings(now))
    known = {e.session_id for e in evidence}
    then = files(kept, archived, now, known, repo if checked else None)
    cited = {line.text: [s for s, _ in line.sessions] for line in kept}
    return Proposal(library, now, then, len(evidence), unread, len(kept), len(archived), checked,
                    cited)  # fmt: skip


def files(kept: Sequence[Line], archived: Sequence[notes.Archived], now: Mapping[str, str],
          known: set[str], repo: Path | None) -> dict[str, str]:  # fmt: skip
    """Path inside the library -> text: each folder's notes, sources and archive."""
    checkout = repo if repo is not None and git.is_checkout(repo) else None
    stale = git.stale(checkout, kept) if checkout else {}
    commits = git.commits(checkout, kept) if checkout else {}
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
