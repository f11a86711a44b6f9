"""Results as session cards: which session each is, what it found, decided or fixed, and which
files it changed, enough to judge it without asking for its digest (`librarian search`).

The MCP tool returns the same facts as fields of each result (core/store/rows.py: ChunkResult);
the hooks' text, for an agent's model, is written by core/recall/hook_text.py.

A card names the agent that wrote its session beside the project ("git-sync · Codex") when that
is not Claude Code: the sessions of most stores are mostly Claude Code's, and a name on every card
would say the usual thing each time; the name that is there then stands out. So with the person:
a teammate's session says whose it is ("alice's Codex"), the asker's own does not. `--json` and
the tools always carry the fields.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from librarian_dagster.core.capture.readers import label
from librarian_dagster.core.digest.distil import cut
from librarian_dagster.core.store.rows import ChunkResult, FileHistory

SHOWN_FILES = 4
MATCH_CHARS = 200
USUAL_AGENT = "claude-code"
"""The agent a card does not name: the one most sessions are by."""


def agent_named(agent: str) -> str | None:
    """The agent as a card names it ("Codex"); None for the usual one."""
    return None if agent == USUAL_AGENT else label(agent)


def whose(person: str | None, agent: str, own_person: str | None) -> str | None:
    """Who wrote the session, as a card names it: "alice's Codex", "alice's Claude Code"; the
    agent alone (or nothing, for the usual one) when it is the asker's own or no one's."""
    if person is None or person == own_person:
        return agent_named(agent)
    return f"{person}'s {label(agent)}"


def render_history(history: FileHistory, own_person: str | None = None) -> str:
    """One card per earlier session of a file, in the answer's order (`librarian history`)."""
    title = f"{history.path}"
    if history.former_names:
        title += f" (before: {', '.join(history.former_names)})"
    cards = [title]
    for rank, entry in enumerate(history.results, 1):
        plural = "s" if entry.edits != 1 else ""
        touched = f"changed it, {entry.edits} edit{plural}" if entry.changed else "read it"
        where = " · ".join(
            part
            for part in (
                entry.project, whose(entry.person, entry.agent, own_person), entry.git_branch,
                dates(entry.started_at, entry.date), touched,
                entry.changed_since,
            )
            if part
        )  # fmt: skip
        lines = [f"{rank}. {where}", f"   {entry.title or entry.summary}"]
        if entry.title and entry.summary:
            lines.append(f"   {entry.summary}")
        lines += [f"   - {line}" for line in dict.fromkeys([*entry.lines, *entry.highlights])]
        lines.append(f"   as {entry.path}")
        lines.append(f"   session {entry.session_id}")
        cards.append("\n".join(lines))
    return "\n\n".join(cards)


@dataclass(frozen=True)
class SessionCard:
    """One session of an answer: its best result (the session's facts) and every result of it."""

    first: ChunkResult
    matched: list[ChunkResult]

    @property
    def dates(self) -> str:
        return dates(self.first.started_at, self.first.date)


def session_cards(results: Sequence[ChunkResult]) -> list[SessionCard]:
    """The results grouped by session, best session first."""
    by_session: dict[str, list[ChunkResult]] = {}
    for hit in results:
        by_session.setdefault(hit.session_id, []).append(hit)
    return [SessionCard(hits[0], hits) for hits in by_session.values()]


def render_cards(results: Sequence[ChunkResult], own_person: str | None = None) -> str:
    """One card per session, best first; a session's matched chunks under its card. A session
    of another person than `own_person` names them."""
    cards = []
    for rank, card in enumerate(session_cards(results), 1):
        first = card.first
        who = whose(first.person, first.agent, own_person)
        parts = (first.project, who, first.git_branch, card.dates)
        where = " · ".join(part for part in parts if part)
        lines = [f"{rank}. {where} · relevance {first.score:.2f}"]
        lines.append(f"   {first.title or first.summary}")
        if first.title and first.summary:
            lines.append(f"   {first.summary}")
        lines += [f"   - {line}" for line in first.highlights]
        if first.files:
            more = len(first.files) - SHOWN_FILES
            lines.append(
                "   files: "
                + ", ".join(first.files[:SHOWN_FILES])
                + (f" (+{more} more)" if more > 0 else "")
            )
        for hit in card.matched:
            lines.append(f"   matched ({hit.section}): {cut(hit.text, MATCH_CHARS)}")
        lines.append(f"   session {first.session_id}")
        cards.append("\n".join(lines))
    return "\n\n".join(cards)


def dates(started: datetime | None, ended: datetime | None) -> str:
    days = [d.date().isoformat() for d in (started, ended) if d is not None]
    if len(days) == 2 and days[0] == days[1]:
        days = days[:1]
    return " to ".join(days)
