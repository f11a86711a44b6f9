"""Clusters of what sessions share, each a line in the deepest folder that holds the files its
sessions changed. A line needs two distinct sessions; a failure that three met is a gotcha.

Only the sessions' own words are used: the failed command and its output's line, the command
that passed next, a command that passed. Every line is checked against them (`grounded`)."""

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from librarian_dagster.core.consolidation.evidence import Evidence, failure_key

MIN_SESSIONS = 2
"""Sessions that must agree before anything is written."""
GOTCHA_SESSIONS = 3
"""Sessions that must have met a failure before it is written as a warning."""
LINES_PER_FOLDER = 10
"""A folder's budget: its lines ranked by distinct sessions, then by the newest of them."""
GOTCHA, FAILURE, COMMAND = "gotcha", "failure", "command"


@dataclass(frozen=True)
class Line:
    folder: str
    """Where it goes, relative to the repository's root ("" for the root itself)."""
    kind: str
    key: str
    """What its sessions share, as it is compared (`failure_key`, or a command's words)."""
    text: str
    """What it says, without its sources."""
    quotes: tuple[str, ...]
    """What it quotes (as `code`): its sessions' own words, each of them."""
    sessions: tuple[tuple[str, datetime | None], ...]
    """(session id, when it began), newest first."""
    files: tuple[str, ...]
    """The files its sessions changed that placed it, relative to the root, sorted."""
    mined: str | None = None
    """Its wording as mined, when a model said it shorter (core/consolidation/wording.py)."""

    @property
    def newest(self) -> datetime | None:
        """When the newest of its sessions began (None: none of them says)."""
        return max((when for _, when in self.sessions if when), default=None)


def common_folder(paths: Iterable[str]) -> str:
    """The deepest folder that holds all `paths` (relative, '/'), "" for the root."""
    folders = [p.split("/")[:-1] for p in paths]
    if not folders:
        return ""
    common = folders[0]
    for parts in folders[1:]:
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return "/".join(common)


def mine(evidence: Sequence[Evidence]) -> list[Line]:
    """The lines that `evidence` supports, each folder's within its budget, in a stable order."""
    lines = [*_failure_lines(evidence), *_command_lines(evidence)]
    by_folder: dict[str, list[Line]] = defaultdict(list)
    for line in lines:
        by_folder[line.folder].append(line)
    kept = []
    for folder in sorted(by_folder):
        ranked = sorted(by_folder[folder], key=_rank)
        kept.extend(ranked[:LINES_PER_FOLDER])
    return kept


def _rank(line: Line) -> tuple:
    newest = line.newest
    return (-len(line.sessions), -(newest.timestamp() if newest else 0.0), line.kind, line.key)


def _newest_first(sessions: Iterable[Evidence]) -> list[Evidence]:
    return sorted(sessions, key=lambda e: (e.started_at.timestamp() if e.started_at else 0.0,
                                           e.session_id), reverse=True)  # fmt: skip


def _cited(sessions: Sequence[Evidence]) -> tuple[tuple[str, datetime | None], ...]:
    return tuple((e.session_id, e.started_at) for e in sessions)


@dataclass(frozen=True)
class _Met:
    """How one session met a failure."""

    said: str
    command: str
    then: str | None
    fixed: tuple[str, ...]
    """The files it changed before `then` passed (none when nothing passed after)."""
    scope: tuple[str, ...]
    """The files that place it: `fixed`, else every file the session changed."""


def _failure_lines(evidence: Sequence[Evidence]) -> list[Line]:
    met: dict[str, dict[str, _Met]] = defaultdict(dict)  # key -> session -> how it met it
    by_id = {e.session_id: e for e in evidence}
    for e in evidence:
        for failure in e.failures:
            fixed = failure.changed if failure.then else ()
            scope = failure.changed or e.changed
            for said in failure.lines:
                if scope:  # a session that changed nothing cannot say where a line belongs
                    met[failure_key(said)].setdefault(
                        e.session_id, _Met(said, failure.command, failure.then, fixed, scope)
                    )
    lines = []
    for key, seen in met.items():
        if len(seen) >= MIN_SESSIONS:
            sessions = _newest_first(by_id[s] for s in seen)
            lines.append(_failure_line(key, [seen[e.session_id] for e in sessions], sessions))
    return lines


def _agreed(values: Iterable[str]) -> str | None:
    """The value most sessions gave, if at least MIN_SESSIONS gave it."""
    ranked = Counter(values).most_common(1)
    return ranked[0][0] if ranked and ranked[0][1] >= MIN_SESSIONS else None


def _failure_line(key: str, met: list[_Met], sessions: list[Evidence]) -> Line:
    """The line of one failure, `met` by `sessions` (newest first), quoting the newest."""
    said, command = met[0].said, met[0].command
    then = _agreed(m.then for m in met if m.then)
    fixed = _agreed(path for m in met for path in set(m.fixed))
    quotes = [command, said]
    text = f"{code(command)} failed with {code(said)}"
    if then:
        quotes.append(then)
        text += f"; then {code(then)} passed"
    if fixed:
        quotes.append(fixed)
        text += f"{' after' if then else '; fixed in'} a change to {code(fixed)}"
    kind = GOTCHA if len(met) >= GOTCHA_SESSIONS else FAILURE
    files = sorted({p for m in met for p in m.scope})
    return Line(common_folder(files), kind, key, text, tuple(quotes), _cited(sessions),
                tuple(files))  # fmt: skip


def _command_lines(evidence: Sequence[Evidence]) -> list[Line]:
    ran: dict[str, list[Evidence]] = defaultdict(list)
    for e in evidence:
        if e.changed:
            for words in e.passed:
                ran[words].append(e)
    lines = []
    for words, sessions in ran.items():
        if len(sessions) < MIN_SESSIONS:
            continue
        files = sorted({p for e in sessions for p in e.changed})
        text = f"{code(words)} ran and passed"
        lines.append(Line(common_folder(files), COMMAND, words, text, (words,),
                          _cited(_newest_first(sessions)), tuple(files)))  # fmt: skip
    return lines


def spoken(evidence: Evidence) -> set[str]:
    """Everything `evidence` said that a line may quote."""
    said = {*evidence.passed, *evidence.changed}
    for failure in evidence.failures:
        said.update((failure.command, *failure.lines, *([failure.then] if failure.then else [])))
    return said


def grounded(line: Line, evidence: dict[str, Evidence]) -> bool:
    """Whether each quote of `line` stands verbatim in what one of its sessions said."""
    said = set().union(*(spoken(evidence[s]) for s, _ in line.sessions if s in evidence))
    return all(quote in said for quote in line.quotes)


def code(text: str) -> str:
    """`text` as Markdown code, fenced so that a backtick inside it stays inside."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"
