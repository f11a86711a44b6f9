"""Parse one Copilot CLI session (its events.jsonl) into the session model.

Each line is an event `{type, data, id, parentId, timestamp}`; a subagent's events add
`agentId` (older versions only `data.parentToolCallId`). What becomes a turn:

* `user.message`: typed text is a "prompt"; text Copilot put there itself (`source` "system" or
  a skill's, or an empty `content` beside a `transformedContent`) is "meta"; in a subagent's
  thread it is the task its parent gave ("prompt", with the agent's id).
* `assistant.message`: its `content` and `toolRequests` are one "text" turn; `reasoningText`
  is "thinking" only with include_thinking. `encryptedContent` and `reasoningOpaque` are never
  read.
* `tool.execution_complete`: a "tool_result" turn (its result, or its error), and the tool use
  it answers is marked `is_error` when it did not succeed.
* The main agent's questions to the user are part of the dialogue: an `ask_user` call's
  question (and choices) and the plan summary `exit_plan_mode` asks the user to approve are
  "text" turns of their own; the user's answer (the result's "User responded: ..." or "User
  selected: ...") is a "prompt", "meta" in autopilot (`session.mode_changed`), where Copilot
  answers for the user.
* `session.compaction_complete`'s summary is "compact_summary"; `system.notification`,
  `skill.invoked` and `abort` are "meta"; `session.task_complete`'s summary is "text".
* Tokens, per model, from the two records Copilot keeps of them, whichever counts more (a
  session that ended abruptly has no shutdown; older versions wrote no usage records):
  `session.usage_record` (one per model call since 1.0.10x: `usage.inputTokens`,
  `outputTokens`, `cacheReadTokens`, `cacheWriteTokens`; summed, each call once by its
  `accounting` identity) and `session.shutdown`'s `modelMetrics` (the session's totals; the
  largest seen, as a resumed session may repeat them). Older versions' output also came with
  each assistant message (`outputTokens`), gone in 1.0.102.

Event types the session needs nothing from (hooks, permissions, modes, turn marks, the system
prompt) are only counted; types this reader does not know are counted in
`stats.skipped_by_kind`. Subagents' turns follow the main dialogue, by their first timestamp.

Standard library only: hooks and the MCP server import this without dagster.
"""

import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from librarian_dagster.core.capture.copilot.files import workspace_title
from librarian_dagster.core.capture.copilot.tools import tool_use
from librarian_dagster.core.capture.files import SessionFiles, project_from
from librarian_dagster.core.capture.records import (
    ParseStats,
    count_of,
    iter_records,
    parse_ts,
    text_of,
)
from librarian_dagster.core.capture.session import (
    UNREADABLE,
    Session,
    ToolUse,
    Turn,
    nothing_to_remember,
)

__all__ = ["parse_session"]

# Known, and nothing in them for the session model: counted in records_by_type only.
_PASSED = frozenset(
    {
        "hook.start",
        "hook.end",
        "permission.requested",
        "permission.completed",
        "assistant.turn_start",
        "assistant.turn_end",
        "assistant.usage",
        "assistant.intent",
        "assistant.message_delta",
        "assistant.streaming_delta",
        "assistant.reasoning_delta",
        "session.permissions_changed",
        "session.usage_checkpoint",
        "session.usage_info",
        "session.plan_changed",
        "session.workspace_file_changed",
        "session.info",
        "session.warning",
        "session.error",
        "session.idle",
        "session.truncation",
        "session.snapshot_rewind",
        "session.handoff",
        "session.remote_steerable_changed",
        "session.compaction_start",
        "session.tools_updated",
        "session.skills_loaded",
        "session.background_tasks_changed",
        "session.custom_agents_updated",
        "session.mcp_servers_loaded",
        "session.mcp_server_status_changed",
        "session.extensions_loaded",
        "subagent.started",
        "subagent.completed",
        "subagent.failed",
        "subagent.selected",
        "subagent.deselected",
        "system.message",
        "tool.user_requested",
        "tool.execution_partial_result",
        "tool.execution_progress",
        "pending_messages.modified",
        "user_input.requested",
        "user_input.completed",
        "elicitation.requested",
        "elicitation.completed",
        "sampling.requested",
        "sampling.completed",
        "mcp.oauth_required",
        "mcp.oauth_completed",
        "external_tool.requested",
        "external_tool.completed",
        "command.queued",
        "command.execute",
        "command.completed",
        "commands.changed",
        "capabilities.changed",
        "auto_mode_switch.requested",
        "auto_mode_switch.completed",
        "exit_plan_mode.requested",
        "exit_plan_mode.completed",
    }
)


_ASK_USER = "ask_user"
_ANSWERED = re.compile(r"User (?:responded|selected): (.*)", re.S)
"""How Copilot words the user's answer as `ask_user`'s result: typed, or one of the choices."""

Counts = tuple[int, int, int, int]
"""Tokens: (fresh input, cache read, cache write, output)."""
_NONE: Counts = (0, 0, 0, 0)


@dataclass
class _State:
    include_thinking: bool
    stats: ParseStats = field(default_factory=ParseStats)
    types: Counter[str] = field(default_factory=Counter)
    threads: dict[str | None, list[Turn]] = field(default_factory=lambda: {None: []})
    tools: dict[str, ToolUse] = field(default_factory=dict)
    cwd: str | None = None
    branch: str | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    title: str | None = None
    versions: dict[str, None] = field(default_factory=dict)
    models: dict[str, None] = field(default_factory=dict)
    chosen_models: dict[str, None] = field(default_factory=dict)
    output_tokens: int = 0
    metrics: dict[str, Counts] = field(default_factory=dict)
    """Per model, from session.shutdown (the largest seen)."""
    calls: dict[str, Counts] = field(default_factory=dict)
    """Per model, summed from session.usage_record, in the same order."""
    counted: set[tuple[str, str]] = field(default_factory=set)
    messages: int = 0
    mode: str = "interactive"
    """The session's mode (session.mode_changed): in "autopilot" Copilot answers the agent's
    questions itself."""

    def add(self, agent: str | None, role: str, kind: str, text: str, rec: dict[str, Any],
            tools: tuple[ToolUse, ...] = ()) -> None:  # fmt: skip
        uuid = rec.get("id")
        self.threads.setdefault(agent, []).append(
            Turn(
                role,
                kind,
                text,
                parse_ts(rec.get("timestamp")),
                tools,
                agent,
                uuid if isinstance(uuid, str) else None,
            )
        )


def _context(state: _State, data: dict[str, Any]) -> None:
    """session.start / session.resume / session.context_changed: where the session works."""
    context = data.get("context") if "context" in data else data
    if isinstance(context, dict):
        if state.cwd is None and text_of(context.get("cwd")):
            state.cwd = context["cwd"]
        if text_of(context.get("branch")):
            state.branch = context["branch"]
    for key in ("selectedModel", "newModel"):
        if text_of(data.get(key)):
            state.chosen_models.setdefault(data[key], None)
    if text_of(data.get("copilotVersion")):
        state.versions.setdefault(data["copilotVersion"], None)


def _user(state: _State, rec: dict[str, Any], data: dict[str, Any], agent: str | None) -> None:
    content = text_of(data.get("content"))
    source = text_of(data.get("source"))
    injected = source == "system" or source.startswith("skill-") or not content.strip()
    text = content if content.strip() else text_of(data.get("transformedContent"))
    if not text.strip():
        return
    state.messages += 1
    # A subagent's first words are its parent's task: a prompt in its thread, never meta.
    kind = "prompt" if agent is not None and source.startswith("agent-") else None
    state.add(agent, "user", kind or ("meta" if injected else "prompt"), text, rec)


def _assistant(state: _State, rec: dict[str, Any], data: dict[str, Any], agent: str | None) -> None:
    state.messages += 1
    if text_of(data.get("model")):
        state.models.setdefault(data["model"], None)
    state.output_tokens += count_of(data.get("outputTokens"))
    reasoning = text_of(data.get("reasoningText"))
    if reasoning or data.get("reasoningOpaque") or data.get("encryptedContent"):
        state.stats.thinking_blocks += 1
        if state.include_thinking and reasoning.strip():
            state.add(agent, "assistant", "thinking", reasoning, rec)
    uses: list[ToolUse] = []
    requests = data.get("toolRequests")
    for req in requests if isinstance(requests, list) else ():
        if isinstance(req, dict) and text_of(req.get("name")):
            use = tool_use(req["name"], req.get("arguments"), req.get("toolCallId"))
            uses.append(use)
            if use.id:
                state.tools[use.id] = use
    text = text_of(data.get("content"))
    if text.strip() or uses:
        state.add(agent, "assistant", "text", text, rec, tuple(uses))
    for req in requests if isinstance(requests, list) and agent is None else ():
        shown = _shown_to_user(req) if isinstance(req, dict) else ""
        if shown:
            state.add(agent, "assistant", "text", shown, rec)


def _shown_to_user(request: dict[str, Any]) -> str:
    """What a tool call of the main agent puts before the user in its own words: an `ask_user`
    question with its choices, the plan summary `exit_plan_mode` asks them to approve."""
    args = request.get("arguments")
    args = args if isinstance(args, dict) else {}
    if request.get("name") == _ASK_USER:
        choices = args.get("choices")
        lines = [c for c in choices if isinstance(c, str)] if isinstance(choices, list) else []
        return "\n".join([text_of(args.get("question")), *(f"- {c}" for c in lines)]).strip()
    if request.get("name") == "exit_plan_mode":
        return text_of(args.get("summary")).strip()
    return ""


def _tool_start(
    state: _State, rec: dict[str, Any], data: dict[str, Any], agent: str | None
) -> None:
    """A tool no assistant message asked for (the user ran it): a tool use of its own."""
    call_id = text_of(data.get("toolCallId"))
    if call_id and call_id not in state.tools and text_of(data.get("toolName")):
        use = tool_use(data["toolName"], data.get("arguments"), call_id)
        state.tools[call_id] = use
        state.add(agent, "assistant", "text", "", rec, (use,))


def _tool_done(state: _State, rec: dict[str, Any], data: dict[str, Any], agent: str | None) -> None:
    ok = data.get("success") is not False
    use = state.tools.get(text_of(data.get("toolCallId")))
    if use is not None and not ok:
        use.is_error = True
    result = data.get("result")
    error = data.get("error")
    text = text_of(result.get("content")) if isinstance(result, dict) else text_of(result)
    if ok and agent is None and use is not None and use.name == _ASK_USER:
        answer = _ANSWERED.match(text)
        if answer and answer.group(1).strip():
            # The user's reply to the agent's question, typed or chosen; in autopilot Copilot
            # answers in their place.
            kind = "meta" if state.mode == "autopilot" else "prompt"
            state.add(agent, "user", kind, answer.group(1).strip(), rec)
            return
    if not ok and isinstance(error, dict) and text_of(error.get("message")):
        text = error["message"] if not text else f"{error['message']}\n{text}"
    if text.strip():
        state.add(agent, "user", "tool_result", text, rec)


def _tokens(usage: dict[str, Any]) -> Counts:
    """(fresh input, cache read, cache write, output) of a usage record or metric."""
    read, write = count_of(usage.get("cacheReadTokens")), count_of(usage.get("cacheWriteTokens"))
    # Copilot's inputTokens include the cached ones: what was new is the rest.
    fresh = max(count_of(usage.get("inputTokens")) - read - write, 0)
    return fresh, read, write, count_of(usage.get("outputTokens"))


def _combined(how: Callable[[int, int], int], old: Counts | None, new: Counts) -> Counts:
    if old is None:
        return new
    return how(old[0], new[0]), how(old[1], new[1]), how(old[2], new[2]), how(old[3], new[3])


def _shutdown(state: _State, data: dict[str, Any]) -> None:
    metrics = data.get("modelMetrics")
    for model, entry in metrics.items() if isinstance(metrics, dict) else ():
        usage = entry.get("usage") if isinstance(entry, dict) else None
        if not isinstance(usage, dict):
            continue
        state.metrics[model] = _combined(max, state.metrics.get(model), _tokens(usage))


def _usage_record(state: _State, data: dict[str, Any]) -> None:
    """One model call's usage (session.usage_record), counted once by its accounting identity."""
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return
    accounting = usage.get("accounting")
    if isinstance(accounting, dict) and accounting.get("sequence") is not None:
        key = (str(accounting.get("sourceSessionId")), str(accounting["sequence"]))
        if key in state.counted:
            return
        state.counted.add(key)
    model = text_of(usage.get("model")) or "?"
    state.calls[model] = _combined(operator.add, state.calls.get(model), _tokens(usage))


def _token_totals(state: _State) -> Counts:
    """(fresh input, cache read, cache write, output) of the session: per model, the larger
    count of the usage records' and the shutdown's; output at least the assistant messages'."""
    totals = _NONE
    for model in {*state.metrics, *state.calls}:
        most = _combined(max, state.metrics.get(model), state.calls.get(model, _NONE))
        totals = _combined(operator.add, totals, most)
    return totals[0], totals[1], totals[2], max(totals[3], state.output_tokens)


def _other(
    state: _State, rtype: str, rec: dict[str, Any], data: dict[str, Any], agent: str | None
) -> bool:
    """The remaining event types that carry something; False for one this reader does not know."""
    if rtype == "session.compaction_complete":
        state.stats.compactions += 1
        if text_of(data.get("summaryContent")).strip():
            state.add(agent, "user", "compact_summary", data["summaryContent"], rec)
    elif rtype in ("system.notification", "skill.invoked"):
        if text_of(data.get("content")).strip():
            state.add(agent, "user", "meta", data["content"], rec)
    elif rtype == "abort":
        state.add(
            agent, "user", "meta", f"[aborted: {text_of(data.get('reason')) or 'unknown'}]", rec
        )
    elif rtype == "session.task_complete":
        if text_of(data.get("summary")).strip():
            state.add(agent, "assistant", "text", data["summary"], rec)
    elif rtype == "session.mode_changed":
        state.mode = text_of(data.get("newMode")) or state.mode
    elif rtype == "session.title_changed":
        state.title = text_of(data.get("title")) or state.title
    elif rtype == "session.shutdown":
        _shutdown(state, data)
    elif rtype == "session.usage_record":
        _usage_record(state, data)
    elif rtype in ("session.start", "session.resume", "session.context_changed",
                   "session.model_change"):  # fmt: skip
        _context(state, data)
    else:
        return rtype in _PASSED
    return True


_HANDLERS = {
    "user.message": _user,
    "assistant.message": _assistant,
    "tool.execution_start": _tool_start,
    "tool.execution_complete": _tool_done,
}


def _process(state: _State, rec: dict[str, Any]) -> None:
    rtype = rec.get("type")
    rtype = rtype if isinstance(rtype, str) else "<missing>"
    state.types[rtype] += 1
    ts = rec.get("timestamp")
    if isinstance(ts, str) and ts:
        state.first_ts = state.first_ts or ts
        state.last_ts = ts
    data = rec.get("data")
    data = data if isinstance(data, dict) else {}
    agent = rec.get("agentId") or data.get("parentToolCallId")
    agent = agent if isinstance(agent, str) and agent else None
    handler = _HANDLERS.get(rtype)
    if handler is not None:
        handler(state, rec, data, agent)
    elif not _other(state, rtype, rec, data, agent):
        state.stats.skipped_by_kind[rtype] = state.stats.skipped_by_kind.get(rtype, 0) + 1


def _turns(state: _State) -> list[Turn]:
    """The main dialogue, then each subagent's turns (by their first timestamp)."""
    turns = list(state.threads[None])
    agents = [t for aid, t in state.threads.items() if aid is not None and t]
    state.stats.subagents = len(agents)

    def first(thread: list[Turn]) -> str:
        return min((t.timestamp.isoformat() for t in thread if t.timestamp), default="~")

    for thread in sorted(agents, key=lambda t: (first(t), t[0].agent_id or "")):
        turns.extend(thread)
    return turns


def _skip_reason(size: int, state: _State, turns: list[Turn]) -> str | None:
    none = "no user or assistant messages" if state.messages == 0 else None
    return nothing_to_remember(turns, size, bool(state.types), none)


def _read(files: SessionFiles, state: _State) -> tuple[int, str | None]:
    """Read the events file into `state`: its size, and why it could not be read, if not."""
    if files.main is None:
        return 0, None
    try:
        size = files.main.stat().st_size
        for rec in iter_records(files.main, state.stats):
            _process(state, rec)
    except OSError as exc:
        return 0, f"{UNREADABLE} ({exc.strerror or type(exc).__name__})"
    return size, None


def parse_session(
    files: SessionFiles, *, include_thinking: bool = False, known_cwds: Iterable[str] = ()
) -> Session:
    """Parse one Copilot CLI session. Never raises on bad content."""
    fingerprint = files.fingerprint()
    state = _State(include_thinking)
    size, unreadable = _read(files, state)
    turns = _turns(state)
    stats = state.stats
    stats.records_by_type = dict(state.types)
    stats.turns = len(turns)
    stats.tool_uses = sum(len(t.tool_uses) for t in turns)
    title = state.title or (workspace_title(files.main) if files.main else None)
    fresh, read, write, output = _token_totals(state)
    skip = "no files" if files.main is None else unreadable or _skip_reason(size, state, turns)
    return Session.of(
        files,
        fingerprint,
        project=project_from(state.cwd, files.main),
        cwd=state.cwd,
        git_branch=state.branch,
        started_at=parse_ts(state.first_ts),
        ended_at=parse_ts(state.last_ts),
        title=title,
        versions=tuple(state.versions),
        models=tuple(state.models or state.chosen_models),
        turns=turns,
        input_tokens=fresh,
        output_tokens=output,
        cache_read_tokens=read,
        cache_creation_tokens=write,
        stats=stats,
        skip_reason=skip,
    )
