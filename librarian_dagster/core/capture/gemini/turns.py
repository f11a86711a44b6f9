"""How a Gemini CLI chat's messages become turns: prompts, the model's words, tool calls, results.

* "user" messages are what the user typed ("prompt"), except what Gemini CLI appended to them:
  the files a prompt referenced with `@path` follow a "--- Content from referenced files ---"
  line, and are "meta"; so is context it injected (`<session_context>`). Where it kept what the
  user saw (`displayContent`: `/command args` before it was expanded), that is the prompt and the
  text sent in its place is "meta".
* What hooks added (`additionalContext`, Librarian's own recall among it) is never the prompt:
  the CLI wraps it in `<hook_context>...</hook_context>`, put before the prompt's text
  (SessionStart's, headless), as a part of its own after it (BeforeAgent's), or after a tool's
  output (AfterTool's). Each is a "meta" turn of its own, after the prompt (or the tool's
  result) it came with; what is left is the prompt, or the result.
* "gemini" messages are the model's: its text, its `thoughts` (and thought parts) as "thinking"
  only with `include_thinking`, its `toolCalls` as tool uses, each result a "tool_result" turn.
  Newer versions also record the calls as `functionCall` parts and the results as "user"
  messages of `functionResponse` parts: each call and result is kept once.
* "info", "error" and "warning" messages are Gemini CLI's notices ("Request cancelled."):
  assistant turns of kind "other". A message of any other type is counted and skipped.
* Tokens: `input` counts the cached tokens too, so they are taken out of `input_tokens` and
  given as `cache_read_tokens`; the thinking tokens are part of `output_tokens`.

Standard library only: hooks and the MCP server import this without dagster.
"""

import re
from collections import Counter
from typing import Any

from librarian_dagster.core.capture.gemini.parts import (
    as_parts,
    part_kind,
    part_text,
    response_text,
)
from librarian_dagster.core.capture.gemini.project import paths_in_text
from librarian_dagster.core.capture.gemini.tools import absolute_paths, result_text, tool_use
from librarian_dagster.core.capture.records import ParseStats, count_of, parse_ts
from librarian_dagster.core.capture.session import ToolUse, Turn

__all__ = ["ChatState", "TurnBuilder"]

REFERENCE_STARTS = (
    "--- Content from referenced files ---",
    "--- Content from referenced context ---",
)
_INJECTED = ("<session_context>", "<hook_context>")
_NOTICES = frozenset({"info", "error", "warning"})
# The CLI writes `<` and `>` inside a hook's context as `&lt;` and `&gt;`: none ends it early.
_HOOK_CONTEXT = re.compile(r"<hook_context>.*?</hook_context>", re.DOTALL)
_MAX_PATHS = 2000
_PATH_SCAN = 4096


class ChatState:
    """What one session's messages add up to beyond their turns: counts, tokens, models, times,
    the tool calls seen, and the absolute paths named (where the session ran is among them)."""

    def __init__(self, include_thinking: bool) -> None:
        self.include_thinking = include_thinking
        self.stats = ParseStats()
        self.types: Counter[str] = Counter()
        self.blocks: Counter[str] = Counter()
        self.models: dict[str, None] = {}
        self.call_ids: set[str] = set()
        self.responded: set[str] = set()
        self.tool_by_id: dict[str, ToolUse] = {}
        self.paths: list[str] = []
        self.first_ts: str | None = None
        self.last_ts: str | None = None
        self.conversation_messages = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.cache_read_tokens = 0

    def note_calls(self, messages: list[dict[str, Any]]) -> None:
        """Remember the ids of every recorded tool call, before any turn is made: a call or a
        result that newer versions write twice is then kept once."""
        for msg in messages:
            for call in _calls(msg):
                if isinstance(call.get("id"), str):
                    self.call_ids.add(call["id"])

    def note_time(self, ts: Any) -> None:
        if isinstance(ts, str) and ts:
            if self.first_ts is None or ts < self.first_ts:
                self.first_ts = ts
            if self.last_ts is None or ts > self.last_ts:
                self.last_ts = ts

    def note_paths(self, paths: Any) -> None:
        for path in paths:
            if len(self.paths) >= _MAX_PATHS:
                return
            self.paths.append(path)

    def tokens(self, tokens: Any) -> None:
        if not isinstance(tokens, dict):
            return
        cached = count_of(tokens.get("cached"))
        self.input_tokens += max(count_of(tokens.get("input")) - cached, 0)
        self.cache_read_tokens += cached
        self.output_tokens += count_of(tokens.get("output")) + count_of(tokens.get("thoughts"))


def _calls(msg: dict[str, Any]) -> list[dict[str, Any]]:
    calls = msg.get("toolCalls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _hook_contexts(text: str) -> tuple[str, list[str]]:
    """(`text` without the contexts hooks added to it, those contexts)."""
    found = _HOOK_CONTEXT.findall(text)
    return (_HOOK_CONTEXT.sub("", text), found) if found else (text, [])


def _split_references(text: str) -> tuple[str, str]:
    """(what the user typed, what Gemini CLI appended from the files it referenced)."""
    cuts = [text.find(marker) for marker in REFERENCE_STARTS]
    cut = min((c for c in cuts if c >= 0), default=-1)
    if cut < 0:
        return text, ""
    return text[:cut], text[cut:]


class TurnBuilder:
    """One chat's turns (the main session's, or one subagent's)."""

    def __init__(self, state: ChatState, agent_id: str | None) -> None:
        self.s = state
        self.agent_id = agent_id
        self.turns: list[Turn] = []

    def _turn(self, role: str, kind: str, text: str, ts: Any, uuid: Any = None, tools=()) -> None:
        uid = uuid if isinstance(uuid, str) else None
        self.turns.append(Turn(role, kind, text, parse_ts(ts), tuple(tools), self.agent_id, uid))

    def add(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        self.s.note_time(msg.get("timestamp"))
        if kind == "user":
            self.s.conversation_messages += 1
            self._user(msg)
        elif kind == "gemini":
            self.s.conversation_messages += 1
            self._gemini(msg)
        elif kind in _NOTICES:
            text = "".join(part_text(p, self.s.blocks) for p in as_parts(msg.get("content")))
            if text.strip():
                self._turn("assistant", "other", text, msg.get("timestamp"), msg.get("id"))
        else:
            name = f"message {kind}" if isinstance(kind, str) else "message without a type"
            self.s.stats.skipped_by_kind[name] = self.s.stats.skipped_by_kind.get(name, 0) + 1

    def _user(self, msg: dict[str, Any]) -> None:
        ts, uid = msg.get("timestamp"), msg.get("id")
        typed: list[str] = []
        hooked: list[str] = []
        for part in as_parts(msg.get("content")):
            if part_kind(part) == "functionResponse":
                self.s.blocks["functionResponse"] += 1
                self._response(part["functionResponse"], ts, uid)
            else:
                text, contexts = _hook_contexts(part_text(part, self.s.blocks))
                typed.append(text)
                hooked.extend(contexts)
        prompt, referenced = _split_references("".join(typed))
        shown = msg.get("displayContent")
        if shown:
            display, _ = _hook_contexts("".join(part_text(p) for p in as_parts(shown)))
            if display.strip() and display.strip() != prompt.strip():
                # What was sent in place of what the user typed (an expanded command).
                referenced = prompt + referenced
                prompt = display
        if prompt.strip():
            injected = prompt.lstrip().startswith(_INJECTED)
            self._turn("user", "meta" if injected else "prompt", prompt.strip(), ts, uid)
        if referenced.strip():
            self._turn("user", "meta", referenced.strip(), ts, uid)
        self._contexts(hooked, ts, uid)

    def _contexts(self, contexts: list[str], ts: Any, uid: Any) -> None:
        for context in contexts:
            self._turn("user", "meta", context, ts, uid)

    def _tool_result(self, text: str, ts: Any, uid: Any) -> None:
        """A tool's result, and apart from it what AfterTool hooks appended to it."""
        text, contexts = _hook_contexts(text)
        if contexts:
            text = text.rstrip()
        self.s.note_paths(paths_in_text(text[:_PATH_SCAN]))
        self._turn("user", "tool_result", text, ts, uid)
        self._contexts(contexts, ts, uid)

    def _response(self, response: Any, ts: Any, uid: Any) -> None:
        """A tool's result sent back as a user message: kept unless its call's record has it, or
        an earlier message had it (a rewrite's `<id>_response` repeats it)."""
        if not isinstance(response, dict) or response.get("id") in self.s.call_ids:
            return
        call_id = response.get("id")
        if isinstance(call_id, str):
            if call_id in self.s.responded:
                return
            self.s.responded.add(call_id)
        answer = response.get("response")
        tool = self.s.tool_by_id.get(str(response.get("id")))
        if tool is not None and isinstance(answer, dict) and answer.get("error"):
            tool.is_error = True
        self._tool_result(response_text(answer), ts, uid)

    def _gemini(self, msg: dict[str, Any]) -> None:
        s = self.s
        ts, uid = msg.get("timestamp"), msg.get("id")
        if isinstance(msg.get("model"), str) and msg["model"]:
            s.models.setdefault(msg["model"], None)
        s.tokens(msg.get("tokens"))
        thinking = self._thoughts(msg)
        texts: list[str] = []
        tools: list[ToolUse] = []
        calls = _calls(msg)
        for part in as_parts(msg.get("content")):
            kind = part_kind(part)
            if kind == "thought":
                s.blocks[kind] += 1
                s.stats.thinking_blocks += 1
                thinking.append(str(part.get("text") or ""))
            elif kind == "functionCall":
                s.blocks[kind] += 1
                tools.extend(self._function_call(part["functionCall"], bool(calls)))
            else:
                texts.append(part_text(part, s.blocks))
        tools.extend(self._tool_call(call) for call in calls)
        if thinking and s.include_thinking:
            self._turn("assistant", "thinking", "\n".join(t for t in thinking if t), ts, uid)
        text = "".join(texts).strip()
        if text or tools:
            self._turn("assistant", "text", text, ts, uid, tools)
        for call in calls:
            self._result(call, uid)

    def _thoughts(self, msg: dict[str, Any]) -> list[str]:
        found: list[str] = []
        thoughts = msg.get("thoughts")
        for thought in thoughts if isinstance(thoughts, list) else ():
            if not isinstance(thought, dict):
                continue
            self.s.stats.thinking_blocks += 1
            self.s.blocks["thoughts"] += 1
            subject, words = thought.get("subject"), thought.get("description")
            head = f"{subject}: " if isinstance(subject, str) and subject else ""
            found.append(head + (words if isinstance(words, str) else ""))
        return found

    def _function_call(self, call: Any, has_records: bool) -> list[ToolUse]:
        """A call the model made that no `toolCalls` record holds (none ran, or none recorded)."""
        if not isinstance(call, dict):
            return []
        cid = call.get("id")
        if cid in self.s.call_ids or (cid is None and has_records):
            return []
        use = tool_use(call)
        if use.id:
            self.s.tool_by_id[use.id] = use
        return [use]

    def _tool_call(self, call: dict[str, Any]) -> ToolUse:
        use = tool_use(call)
        if use.id:
            self.s.tool_by_id[use.id] = use
        self.s.note_paths(absolute_paths(call))
        self.s.note_time(call.get("timestamp"))
        return use

    def _result(self, call: dict[str, Any], uid: Any) -> None:
        if call.get("result") is None and not isinstance(call.get("resultDisplay"), str):
            return
        text = result_text(call.get("result"), call.get("resultDisplay"))
        self._tool_result(text, call.get("timestamp") or None, uid)
