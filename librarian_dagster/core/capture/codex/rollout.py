"""Parse one Codex session (its rollout and the rollouts of the threads it spawned) into the
session model.

What is read from where (codex-rs/protocol and codex-rs/history):

* The dialogue is the `response_item` records, the history the model saw: a user `message` is
  a "prompt", or "meta" when Codex injected it (environment context, AGENTS.md, a subagent's
  notification, an aborted turn); an assistant `message` is "text"; tool calls join the
  assistant turn before them and their outputs are "tool_result" turns. `event_msg`
  `user_message` and `agent_message` repeat those messages for the UI: counted, not kept.
  Developer messages and `base_instructions` are Codex's instructions, not memory.
* `reasoning` is kept (its summary and text) only with include_thinking; `encrypted_content`
  is never read. Images become `[image]`: base64 never leaves the parser.
* Failures come from `exec_command_end` (exit code), `patch_apply_end` (success),
  `mcp_tool_call_end` and the output's own text, matched by `call_id`.
* The title is the last `thread_name_updated`; the model each `turn_context`'s; tokens the last
  `token_count` total of each thread; a `compacted` record's message a "compact_summary".
* A thread spawned with its parent's history (`fork_context`) begins with a copy of that
  history (from the parent's own `session_meta` to the spawn call's output): the parent's
  rollout holds it, so it is counted in `duplicate_records` and skipped.
* Threads' turns follow the main dialogue, each carrying its thread id as `agent_id`.
* Records of a type or event this reader does not know are counted in `skipped_by_kind`.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections.abc import Iterable
from pathlib import Path

from librarian_dagster.core.capture.codex.turns import State, Thread
from librarian_dagster.core.capture.files import SessionFiles, project_from
from librarian_dagster.core.capture.records import iter_records, parse_ts
from librarian_dagster.core.capture.session import UNREADABLE, Session, Turn, nothing_to_remember

__all__ = ["parse_session"]


def parse_session(
    files: SessionFiles, *, include_thinking: bool = False, known_cwds: Iterable[str] = ()
) -> Session:
    """Parse one session (main rollout plus spawned threads). Never raises on bad content."""
    fingerprint = files.fingerprint()
    state = State(include_thinking)
    main = Thread(state, None, main=True)
    unreadable = _read(files.main, main, state) if files.main is not None else None
    threads = []
    for path in files.subagents:
        thread = Thread(state, path.stem, main=False)
        if _read(path, thread, state) is not None:
            state.stats.malformed_examples.append(f"{path.name}: unreadable file")
        threads.append(thread)
    spawned = sorted((t for t in threads if t.turns), key=lambda t: t.order())
    turns = list(main.turns) + [turn for t in spawned for turn in t.turns]
    stats = state.stats
    stats.records_by_type = dict(state.types)
    stats.blocks_by_type = dict(state.blocks)
    stats.turns = len(turns)
    stats.tool_uses = sum(len(t.tool_uses) for t in turns)
    stats.subagents = len(spawned)
    tokens = [main.tokens] + [t.tokens for t in threads]
    first = files.main or (files.subagents[0] if files.subagents else None)
    return Session.of(
        files,
        fingerprint,
        project=project_from(state.cwd, first),
        cwd=state.cwd,
        git_branch=state.git_branch,
        started_at=parse_ts(state.first_ts),
        ended_at=parse_ts(state.last_ts),
        title=state.title,
        versions=tuple(state.versions),
        models=tuple(state.models),
        turns=turns,
        input_tokens=sum(t[0] for t in tokens),
        output_tokens=sum(t[1] for t in tokens),
        cache_read_tokens=sum(t[2] for t in tokens),
        stats=stats,
        skip_reason=unreadable or _skip_reason(files, state, turns),
    )


def _read(path: Path, thread: Thread, state: State) -> str | None:
    """Feed one rollout's records to its thread; why it could not be read, else None."""
    try:
        state.total_bytes += path.stat().st_size
        for rec in iter_records(path, state.stats):
            state.any_records = True
            thread.add(rec)
    except OSError as exc:
        return f"{UNREADABLE} ({exc.strerror or type(exc).__name__})"
    return None


def _skip_reason(files: SessionFiles, state: State, turns: list[Turn]) -> str | None:
    none = "no messages or tool calls" if state.conversation_records == 0 else None
    size = None if files.main is None and not files.subagents else state.total_bytes
    return nothing_to_remember(turns, size, state.any_records, none)
