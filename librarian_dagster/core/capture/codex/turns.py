"""How one Codex thread's records become turns, and what a session's threads add up to.

`Thread.add` takes a rollout's records in order (core/capture/codex/rollout.py says what is read
from where); `State` holds what the session's threads share: counts, the tool uses by call id,
models, versions, the cwd and branch, the title and the first and last time.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from librarian_dagster.core.capture.codex.tools import (
    CALL_TYPES,
    OUTPUT_TYPES,
    failed,
    output_text,
    tool_use,
)
from librarian_dagster.core.capture.records import ParseStats, count_of, parse_ts
from librarian_dagster.core.capture.session import ToolUse, Turn

__all__ = ["FORKED_MARK", "State", "Thread"]

FORKED_MARK = "You are the newly spawned agent."
"""How the output Codex gives the spawn call at the end of a forked history begins."""

# Record types Codex writes that hold nothing for memory (0.169's included): counted only.
_QUIET_TYPES = frozenset(
    {
        "world_state",
        "token_usage_record",
        "inter_agent_communication",
        "inter_agent_communication_metadata",
        "retained_context",
        "security_risk_score",
        "realtime_item",
        "rollout_reference",
    }
)
# Events that repeat the dialogue for the UI, mark a turn's life, or say nothing to remember.
_QUIET_EVENTS = frozenset(
    {
        *("user_message", "agent_message", "agent_reasoning", "agent_reasoning_raw_content"),
        *("agent_reasoning_section_break", "task_started", "task_complete", "turn_aborted"),
        *("context_compacted", "item_started", "item_completed", "error", "warning"),
        *("exec_command_begin", "patch_apply_begin", "mcp_tool_call_begin", "web_search_begin"),
        *("web_search_end", "turn_diff", "plan_update", "entered_review_mode"),
        *("exited_review_mode", "dynamic_tool_call_request", "dynamic_tool_call_response"),
        *("collab_agent_spawn_begin", "collab_agent_spawn_end", "collab_agent_interaction_begin"),
        *("collab_agent_interaction_end", "collab_waiting_begin", "collab_waiting_end"),
        *("collab_close_begin", "collab_close_end", "collab_resume_begin", "collab_resume_end"),
        *("view_image_tool_call", "stream_error", "background_event", "session_configured"),
        *("thread_rolled_back", "thread_settings_applied", "thread_goal_updated", "undo_started"),
        *("undo_completed", "shutdown_complete", "deprecation_notice", "mcp_startup_complete"),
        *("mcp_startup_update", "request_user_input", "elicitation_request", "turn_started"),
        *("turn_complete", "exec_approval_request", "apply_patch_approval_request"),
    }
)
# User-role text Codex writes itself, never typed: kept as "meta".
_INJECTED = (
    *("<environment_context>", "<user_instructions>", "<subagent_notification>"),
    *("<turn_aborted>", "<user_shell_command>", "<skill>", "# AGENTS.md instructions"),
    *("<permissions instructions>", "<collaboration_mode>", "<INSTRUCTIONS>", "<model_switch>"),
    *("<personality_spec>", "<apps_instructions>", "<realtime_conversation>"),
)


@dataclass
class State:
    """What a session's records add up to beyond its turns, shared by its threads."""

    include_thinking: bool
    stats: ParseStats = field(default_factory=ParseStats)
    types: Counter[str] = field(default_factory=Counter)
    blocks: Counter[str] = field(default_factory=Counter)
    tools: dict[str, ToolUse] = field(default_factory=dict)
    failed_calls: set[str] = field(default_factory=set)
    models: dict[str, None] = field(default_factory=dict)
    versions: dict[str, None] = field(default_factory=dict)
    cwd: str | None = None
    git_branch: str | None = None
    title: str | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    conversation_records: int = 0
    total_bytes: int = 0
    any_records: bool = False

    def note_time(self, rec: dict[str, Any]) -> None:
        ts = rec.get("timestamp")
        if isinstance(ts, str) and ts:
            # ISO-8601 UTC strings of one format compare correctly as strings.
            if self.first_ts is None or ts < self.first_ts:
                self.first_ts = ts
            if self.last_ts is None or ts > self.last_ts:
                self.last_ts = ts

    def skip(self, kind: str) -> None:
        self.stats.skipped_by_kind[kind] = self.stats.skipped_by_kind.get(kind, 0) + 1

    def fail(self, call_id: Any) -> None:
        """The call failed: its tool use says so, now or when it is read."""
        if not isinstance(call_id, str) or not call_id:
            return
        use = self.tools.get(call_id)
        if use is not None:
            use.is_error = True
        else:
            self.failed_calls.add(call_id)


class Thread:
    """One rollout's turns: the main thread's, or a spawned thread's (`agent_id` its id)."""

    def __init__(self, state: State, agent_id: str | None, *, main: bool) -> None:
        self.s = state
        self.agent_id = agent_id
        self.main = main
        self.turns: list[Turn] = []
        self.tokens = (0, 0, 0)  # input (uncached), output, cache read: the last total
        self._last_assistant: Turn | None = None
        self._own_id: str | None = None
        self._forked = False
        self._inherited = False

    def order(self) -> tuple[str, str]:
        first = min((t.timestamp.isoformat() for t in self.turns if t.timestamp), default="~")
        return first, self.agent_id or ""

    def add(self, rec: dict[str, Any]) -> None:
        rtype = rec.get("type")
        rtype_s = rtype if isinstance(rtype, str) else "<missing>"
        self.s.types[rtype_s] += 1
        payload = rec.get("payload")
        payload = payload if isinstance(payload, dict) else {}
        if self._inherits(rtype_s, payload):
            self.s.stats.duplicate_records += 1
            return
        self.s.note_time(rec)
        ts = rec.get("timestamp")
        if rtype_s == "session_meta":
            self._meta(payload)
        elif rtype_s == "turn_context":
            model = payload.get("model")
            if isinstance(model, str) and model:
                self.s.models.setdefault(model, None)
        elif rtype_s == "response_item":
            self._response(payload, ts)
        elif rtype_s == "event_msg":
            self._event(payload)
        elif rtype_s == "compacted":
            self.s.stats.compactions += 1
            message = payload.get("message")
            if isinstance(message, str) and message.strip():
                self._append("user", "compact_summary", message, ts)
        elif rtype_s not in _QUIET_TYPES:
            self.s.skip(rtype_s)

    def _inherits(self, rtype: str, payload: dict[str, Any]) -> bool:
        """Whether the record is part of the parent's history copied into a forked thread:
        from the parent's `session_meta` to the spawn call's output, or to the first turn of
        this thread's own (turn ids are UUIDv7, so later turns sort after the thread's id)."""
        if not self._inherited:
            self._inherited = self._forked and rtype == "session_meta"
            return self._inherited
        ptype = payload.get("type")
        if ptype == "function_call_output" and str(payload.get("output")).startswith(FORKED_MARK):
            self._inherited = False
            return True
        turn_id = payload.get("turn_id")
        starts = rtype == "turn_context" or ptype == "task_started"
        if starts and isinstance(turn_id, str) and self._own_id and turn_id >= self._own_id:
            self._inherited = False
            return False
        return True

    def _meta(self, payload: dict[str, Any]) -> None:
        if self._own_id is not None:
            return  # another thread's, copied in
        tid = payload.get("id") or payload.get("session_id")
        self._own_id = tid if isinstance(tid, str) and tid else ""
        self._forked = bool(payload.get("forked_from_id"))
        if not self.main and self._own_id:
            self.agent_id = self._own_id
        version = payload.get("cli_version")
        if isinstance(version, str) and version:
            self.s.versions.setdefault(version, None)
        if self.main:
            cwd = payload.get("cwd")
            self.s.cwd = cwd if isinstance(cwd, str) and cwd else self.s.cwd
            git = payload.get("git")
            branch = git.get("branch") if isinstance(git, dict) else None
            self.s.git_branch = branch if isinstance(branch, str) and branch else None

    def _append(self, role: str, kind: str, text: str, ts: Any, tools: tuple = ()) -> Turn:
        turn = Turn(role, kind, text, parse_ts(ts), tools, self.agent_id)
        self.turns.append(turn)
        if role == "user":
            self._last_assistant = None
        return turn

    def _response(self, payload: dict[str, Any], ts: Any) -> None:
        ptype = payload.get("type")
        ptype_s = ptype if isinstance(ptype, str) else "<missing>"
        self.s.blocks[f"response_item:{ptype_s}"] += 1
        if ptype_s == "message":
            self._message(payload, ts)
        elif ptype_s == "reasoning":
            self.s.stats.thinking_blocks += 1
            if self.s.include_thinking:
                text = _reasoning_text(payload)
                if text:
                    self._append("assistant", "thinking", text, ts)
        elif ptype_s in CALL_TYPES:
            self._call(payload, ts)
        elif ptype_s in OUTPUT_TYPES:
            text = output_text(payload.get("output"))
            if failed(text):
                self.s.fail(payload.get("call_id"))
            self._append("user", "tool_result", text, ts)
        else:
            self.s.skip(f"response_item:{ptype_s}")

    def _message(self, payload: dict[str, Any], ts: Any) -> None:
        role = payload.get("role")
        if role not in ("user", "assistant"):
            return  # developer and system messages: Codex's instructions
        self.s.conversation_records += 1
        text = _content_text(payload.get("content"))
        if not text:
            return
        if role == "assistant":
            self._last_assistant = self._append("assistant", "text", text, ts)
        else:
            injected = text.lstrip().startswith(_INJECTED)
            self._append("user", "meta" if injected else "prompt", text, ts)

    def _call(self, payload: dict[str, Any], ts: Any) -> None:
        self.s.conversation_records += 1
        use = tool_use(payload, self.s.cwd)
        if use.id:
            self.s.tools[use.id] = use
            if use.id in self.s.failed_calls:
                use.is_error = True
        turn = self._last_assistant
        if turn is None:
            self._last_assistant = self._append("assistant", "text", "", ts, (use,))
        else:
            turn.tool_uses = (*turn.tool_uses, use)

    def _event(self, payload: dict[str, Any]) -> None:
        etype = payload.get("type")
        etype_s = etype if isinstance(etype, str) else "<missing>"
        self.s.blocks[f"event_msg:{etype_s}"] += 1
        if etype_s == "token_count":
            self._tokens(payload.get("info"))
        elif etype_s == "exec_command_end":
            code = payload.get("exit_code")
            if (isinstance(code, int) and code != 0) or payload.get("status") in (
                "failed",
                "declined",
            ):
                self.s.fail(payload.get("call_id"))
        elif etype_s == "patch_apply_end":
            if payload.get("success") is False:
                self.s.fail(payload.get("call_id"))
        elif etype_s == "mcp_tool_call_end":
            if _mcp_failed(payload.get("result")):
                self.s.fail(payload.get("call_id"))
        elif etype_s == "thread_name_updated":
            name = payload.get("thread_name")
            if self.main and isinstance(name, str) and name.strip():
                self.s.title = name.strip()
        elif etype_s not in _QUIET_EVENTS:
            self.s.skip(f"event_msg:{etype_s}")

    def _tokens(self, info: Any) -> None:
        total = info.get("total_token_usage") if isinstance(info, dict) else None
        if isinstance(total, dict):
            cached = count_of(total.get("cached_input_tokens"))
            uncached = max(count_of(total.get("input_tokens")) - cached, 0)
            self.tokens = (uncached, count_of(total.get("output_tokens")), cached)


def _mcp_failed(result: Any) -> bool:
    if not isinstance(result, dict):
        return False
    if "Err" in result:
        return True
    ok = result.get("Ok")
    return isinstance(ok, dict) and bool(ok.get("isError") or ok.get("is_error"))


def _content_text(content: Any) -> str:
    """A message's text; images and files become placeholders (base64 stays here)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for item in content:
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("text"), str):
            parts.append(item["text"])
        elif item.get("type") in ("input_image", "image"):
            parts.append("[image]")
        elif item.get("type") == "input_file":
            parts.append(f"[file: {item.get('filename') or 'unknown'}]")
    return "\n".join(p for p in parts if p)


def _reasoning_text(payload: dict[str, Any]) -> str:
    """A reasoning item's readable summary and text; `encrypted_content` is never read."""
    parts: list[str] = []
    for key in ("summary", "content"):
        items = payload.get(key)
        if isinstance(items, list):
            parts.extend(
                item["text"]
                for item in items
                if isinstance(item, dict) and isinstance(item.get("text"), str)
            )
    return "\n".join(p for p in parts if p)
