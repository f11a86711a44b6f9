"""Parse one Claude Code session (its JSONL files) into the session model.

Where the pieces live: which files make a session (`files.py`), reading their lines as records
(`records.py`), records into turns (`turns.py`); here a session's records are routed to the
dialogue or to its subagents and the whole is put together. `parse_session` never raises on bad
content (an unreadable file becomes a `skip_reason`).

What the turns mean:

* Turn order: the main dialogue first, in file order, then each subagent's turns (agents sorted
  by their first timestamp, each agent's turns in file order). Subagent turns carry `agent_id`;
  their "prompt" is the task the parent agent gave, not something the user typed.
* A record seen twice (same `uuid`) counts once.
* Compaction appends to the same file, so the turns before a `compact_boundary` are still here;
  the summary message that follows it is kept as kind "compact_summary" (a restatement of those
  turns: skip it when reading the dialogue, use it when only the tail is wanted). Boundaries are
  counted in `stats.compactions`.
* Subagents: the files `files.py` attaches, and 2.1.x `agent_progress` records in the parent
  (only `data.message` is read; `normalizedMessages` repeats the history).
* The title comes from a `summary` whose `leafUuid` is in this session, else `custom-title`.
  Older versions wrote a session's summary into a later session's file: there it is counted
  in `stats.summaries_unmatched`, and titles nothing.
* `progress` records other than agent_progress and `file-history-snapshot` records are only
  counted and timed. Unknown record types are counted.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from librarian_dagster.core.capture.claude_code.files import agent_file_id
from librarian_dagster.core.capture.claude_code.records import iter_records
from librarian_dagster.core.capture.claude_code.turns import SessionState, TurnBuilder
from librarian_dagster.core.capture.files import SessionFiles, project_from
from librarian_dagster.core.capture.records import parse_ts
from librarian_dagster.core.capture.session import UNREADABLE, Session, Turn, nothing_to_remember

__all__ = ["parse_session"]


def _process(
    state: SessionState,
    rec: dict[str, Any],
    builder: TurnBuilder,
    main: bool,
    agents: dict[str, TurnBuilder],
) -> None:
    rtype = rec.get("type")
    rtype_s = rtype if isinstance(rtype, str) else "<missing>"
    state.types[rtype_s] += 1
    data = rec.get("data") if rtype == "progress" else None
    if rtype == "file-history-snapshot" or (
        rtype == "progress" and (not isinstance(data, dict) or data.get("type") != "agent_progress")
    ):
        # A third of all records, and nothing for the dialogue: only their time counts (a
        # session can end on a hook's progress). Skipping the rest saves ~10% of parse time.
        state.note_time(rec)
        return
    uuid = rec.get("uuid")
    if isinstance(uuid, str):
        if uuid in state.uuids_seen:
            # Resumed or forked sessions can repeat records: count each once.
            state.stats.duplicate_records += 1
            return
        state.uuids_seen.add(uuid)
    state.envelope(rec, main)
    if rtype in ("user", "assistant"):
        state.conversation_records += 1
        if main and rec.get("isSidechain") and isinstance(rec.get("agentId"), str):
            # Old files occasionally inline sidechain records: route them to their agent.
            aid = rec["agentId"]
            agents.setdefault(aid, TurnBuilder(state, aid)).add(rec)
        else:
            builder.add(rec)
    elif rtype == "summary":
        text = rec.get("summary")
        if isinstance(text, str) and text:
            leaf = rec.get("leafUuid")
            state.summaries.append((leaf if isinstance(leaf, str) else None, text))
    elif rtype == "custom-title":
        title = rec.get("customTitle") or rec.get("title")
        if isinstance(title, str) and title:
            state.custom_title = title
    elif rtype == "system":
        _system(state, rec, builder)
    elif rtype == "progress":
        _agent_progress(state, rec, agents)
    # Everything else (attachment, permission-mode, last-prompt, pr-link, queue-operation: typed
    # while Claude was busy, it comes again as a user record when dequeued; unknown types) is
    # counted in records_by_type and otherwise ignored.


def _system(state: SessionState, rec: dict[str, Any], builder: TurnBuilder) -> None:
    sub = rec.get("subtype")
    if sub == "compact_boundary":
        state.stats.compactions += 1
    elif sub == "away_summary" and isinstance(rec.get("content"), str):
        uuid = rec.get("uuid")
        builder.turns.append(
            Turn(
                "assistant",
                "other",
                rec["content"],
                parse_ts(rec.get("timestamp")),
                (),
                builder.agent_id,
                uuid if isinstance(uuid, str) else None,
            )
        )


def _agent_progress(
    state: SessionState, rec: dict[str, Any], agents: dict[str, TurnBuilder]
) -> None:
    data = rec.get("data")
    if isinstance(data, dict) and data.get("type") == "agent_progress":
        # 2.1.x streams each subagent message into the parent as data.message (the
        # normalizedMessages list repeats the whole history, so only data.message is read).
        inner = data.get("message")
        aid = data.get("agentId")
        if isinstance(inner, dict) and isinstance(aid, str) and aid:
            if aid not in agents:
                agents[aid] = TurnBuilder(state, aid)
            _process_inner(state, inner, agents[aid])


def _process_inner(state: SessionState, rec: dict[str, Any], builder: TurnBuilder) -> None:
    uuid = rec.get("uuid")
    if isinstance(uuid, str):
        if uuid in state.uuids_seen:
            return
        state.uuids_seen.add(uuid)
    if rec.get("type") in ("user", "assistant"):
        builder.add(rec)


def _agent_order(builder: TurnBuilder) -> tuple[str, str]:
    # Agents without any timestamp sort last ("~" is after every digit).
    first = min((t.timestamp.isoformat() for t in builder.turns if t.timestamp), default="~")
    return first, builder.agent_id or ""


@dataclass
class _Read:
    """What reading a session's files gave: the main thread's turns, each agent's, and whether
    anything was there to read."""

    main: TurnBuilder
    agents: dict[str, TurnBuilder]
    unreadable: str | None = None
    total_bytes: int = 0
    any_records: bool = False


def parse_session(
    files: SessionFiles,
    *,
    include_thinking: bool = False,
    known_cwds: Iterable[str] = (),
) -> Session:
    """Parse one session (main file plus subagents). Never raises on bad content.
    `known_cwds` is not needed: Claude Code's records name their cwd."""
    fingerprint = files.fingerprint()
    state = SessionState(include_thinking)
    read = _read_files(files, state)
    agents = read.agents
    state.stats.subagents = sum(1 for b in agents.values() if b.turns)

    turns = list(read.main.turns)
    for b in sorted((b for b in agents.values() if b.turns), key=_agent_order):
        turns.extend(b.turns)

    stats = state.stats
    stats.records_by_type = dict(state.types)
    stats.blocks_by_type = dict(state.blocks)
    stats.turns = len(turns)
    stats.tool_uses = sum(len(t.tool_uses) for t in turns)
    title = _title(state)
    skip = read.unreadable or _skip_reason(files, state, read, turns)
    return Session.of(
        files,
        fingerprint,
        project=project_from(
            state.cwd, files.main or (files.subagents[0] if files.subagents else None)
        ),
        cwd=state.cwd,
        git_branch=state.git_branch,
        started_at=parse_ts(state.first_ts_raw),
        ended_at=parse_ts(state.last_ts_raw),
        title=title,
        versions=tuple(state.versions),
        models=tuple(state.models),
        turns=turns,
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        cache_read_tokens=state.cache_read_tokens,
        cache_creation_tokens=state.cache_creation_tokens,
        stats=stats,
        skip_reason=skip,
    )


def _read_files(files: SessionFiles, state: SessionState) -> _Read:
    read = _Read(TurnBuilder(state, None), {})
    if files.main is not None:
        try:
            read.total_bytes += files.main.stat().st_size
            for rec in iter_records(files.main, state.stats):
                read.any_records = True
                _process(state, rec, read.main, True, read.agents)
        except OSError as exc:
            read.unreadable = f"{UNREADABLE} ({exc.strerror or type(exc).__name__})"
    for path in files.subagents:
        aid = agent_file_id(path)
        builder = read.agents.get(aid) or TurnBuilder(state, aid)
        read.agents[aid] = builder
        try:
            read.total_bytes += path.stat().st_size
            for rec in iter_records(path, state.stats):
                read.any_records = True
                if isinstance(rec.get("agentId"), str) and builder.agent_id != rec["agentId"]:
                    # Agent ids in records are authoritative (file names can be renamed copies).
                    builder.agent_id = rec["agentId"]
                _process(state, rec, builder, False, read.agents)
        except OSError:
            state.stats.malformed_examples.append(f"{path.name}: unreadable file")
    return read


def _title(state: SessionState) -> str | None:
    """The last summary of a leaf this session holds, else the title the user gave it."""
    matched = [text for leaf, text in state.summaries if leaf in state.uuids_seen]
    state.stats.summaries_unmatched = len(state.summaries) - len(matched)
    return matched[-1] if matched else (state.custom_title or None)


def _skip_reason(
    files: SessionFiles, state: SessionState, read: _Read, turns: list[Turn]
) -> str | None:
    none = _no_conversation(state) if state.conversation_records == 0 else None
    size = None if files.main is None and not files.subagents else read.total_bytes
    return nothing_to_remember(turns, size, read.any_records, none)


def _no_conversation(state: SessionState) -> str:
    """Which records a transcript without user or assistant records holds."""
    present = set(state.types) - {"<missing>"}
    if present and present <= {"summary"}:
        return "summary-only"
    if present and present <= {"file-history-snapshot"}:
        return "file-history snapshots only"
    if present and present <= {"summary", "file-history-snapshot"}:
        return "summaries and file-history snapshots only"
    return "no user or assistant records"
