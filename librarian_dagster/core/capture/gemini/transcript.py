"""Parse one Gemini CLI session (its chat and its subagents' chats) into the session model.

Where the pieces live: which files make a session (`files.py`), a chat file read back into its
messages (`conversation.py`), messages into turns (`turns.py`), tool calls (`tools.py`), where
the session ran (`project.py`). `parse_session` never raises on bad content (an unreadable main
file becomes a `skip_reason`).

* Turn order: the main chat first, in message order, then each subagent's turns (subagents by
  their first timestamp), carrying the subagent's session id as `agent_id`.
* The title is the summary Gemini CLI wrote for the session (`summary`), if it wrote one. The
  chat names no CLI version and no git branch: both stay empty.
* The working folder is not in the chat: it is found from its `projectHash` (`project.py`),
  with `known_cwds`, the folders where other sessions ran; the project is named from it, else
  `gemini-<hash[:8]>`.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from librarian_dagster.core.capture.files import SessionFiles, project_from
from librarian_dagster.core.capture.gemini.conversation import Conversation, load
from librarian_dagster.core.capture.gemini.project import project_name, resolve_cwd
from librarian_dagster.core.capture.gemini.turns import ChatState, TurnBuilder
from librarian_dagster.core.capture.records import parse_ts
from librarian_dagster.core.capture.session import UNREADABLE, Session, Turn, nothing_to_remember

__all__ = ["parse_session"]


@dataclass
class _Chats:
    """The session's chats read back: the main one, each subagent's, and what went wrong."""

    main: Conversation | None = None
    subagents: list[tuple[str, Conversation]] = field(default_factory=list)
    unreadable: str | None = None
    total_bytes: int = 0


def _read(files: SessionFiles, state: ChatState) -> _Chats:
    chats = _Chats()
    if files.main is not None:
        try:
            chats.total_bytes += files.main.stat().st_size
            chats.main = load(files.main, state.stats, state.types)
        except OSError as exc:
            chats.unreadable = f"{UNREADABLE} ({exc.strerror or type(exc).__name__})"
    for path in files.subagents:
        try:
            chats.total_bytes += path.stat().st_size
            conv = load(path, state.stats, state.types)
        except OSError:
            state.stats.malformed_examples.append(f"{path.name}: unreadable file")
            continue
        sid = conv.meta.get("sessionId")
        chats.subagents.append((sid if isinstance(sid, str) and sid else path.stem, conv))
    return chats


def _first_time(builder: TurnBuilder) -> tuple[str, str]:
    # Subagents without any timestamp sort last ("~" is after every digit).
    first = min((t.timestamp.isoformat() for t in builder.turns if t.timestamp), default="~")
    return first, builder.agent_id or ""


def _turns(chats: _Chats, state: ChatState) -> tuple[list[Turn], int]:
    """Every turn, the main chat's first; and how many subagents said anything."""
    every = ([chats.main] if chats.main else []) + [c for _, c in chats.subagents]
    for conv in every:
        state.note_calls(conv.messages)
    main = TurnBuilder(state, None)
    for msg in chats.main.messages if chats.main else ():
        main.add(msg)
    agents = []
    for agent_id, conv in chats.subagents:
        builder = TurnBuilder(state, agent_id)
        for msg in conv.messages:
            builder.add(msg)
        if builder.turns:
            agents.append(builder)
    turns = list(main.turns)
    for builder in sorted(agents, key=_first_time):
        turns.extend(builder.turns)
    return turns, len(agents)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_session(
    files: SessionFiles, *, include_thinking: bool = False, known_cwds: Iterable[str] = ()
) -> Session:
    """Parse one session (main chat plus subagents). Never raises on bad content."""
    fingerprint = files.fingerprint()
    state = ChatState(include_thinking)
    chats = _read(files, state)
    turns, subagents = _turns(chats, state)
    meta = chats.main.meta if chats.main else {}
    if not meta and chats.subagents:
        meta = chats.subagents[0][1].meta
    project_hash = _text(meta.get("projectHash")) or ""
    first = files.main or (files.subagents[0] if files.subagents else None)
    cwd = resolve_cwd(first, project_hash, known_cwds, state.paths)
    stats = state.stats
    stats.records_by_type = dict(state.types)
    stats.blocks_by_type = dict(state.blocks)
    stats.turns, stats.subagents = len(turns), subagents
    stats.tool_uses = sum(len(t.tool_uses) for t in turns)
    return Session.of(
        files,
        fingerprint,
        project=project_from(cwd, None) if cwd else project_name(project_hash),
        cwd=cwd,
        started_at=parse_ts(_text(meta.get("startTime")) or state.first_ts),
        ended_at=parse_ts(state.last_ts or _text(meta.get("lastUpdated"))),
        title=_text(meta.get("summary")),
        models=tuple(state.models),
        turns=turns,
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        cache_read_tokens=state.cache_read_tokens,
        stats=stats,
        skip_reason=chats.unreadable or _skip_reason(files, chats, state, turns),
    )


def _skip_reason(
    files: SessionFiles, chats: _Chats, state: ChatState, turns: list[Turn]
) -> str | None:
    main = chats.main
    if chats.total_bytes and main is not None and main.invalid and not turns:
        return main.invalid
    none = None
    if state.conversation_messages == 0:
        header = main is not None and main.meta
        none = "a header and no messages" if header else "no user or model messages"
    size = None if files.main is None and not files.subagents else chats.total_bytes
    return nothing_to_remember(turns, size, True, none, "only notices or empty messages")
