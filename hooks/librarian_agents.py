"""Each agent's hook contract: its event on stdin, as the Claude-shaped event the handlers take
(`event_of`), and what it reads back on stdout (`answer`). Claude Code, Codex and Gemini CLI
give Claude Code's event and read `hookSpecificOutput` under their own event names; Copilot CLI
gives camelCase and reads a flat `{"additionalContext"}`, whatever shape its event came in
(@github/copilot 1.0.102, seen live by tests/hooks/test_copilot_cli.py).
"""

import json
import os
import sys

import librarian_hooklib as lib

HOME_AGENT = "claude-code"
"""The agent whose plugin these hooks are; another agent's configuration names its own after the
script (`run-hook.sh pre_tool_use.py codex`, as `librarian connect` writes it)."""
CAMEL_CASE_AGENTS = ("copilot",)
"""The agents whose hooks give a camelCase event and read a flat `{"additionalContext"}`."""
CAMEL_CASE_KEYS = {"sessionId": "session_id", "toolName": "tool_name",
                   "transcriptPath": "transcript_path"}  # fmt: skip


def main(hook: str, handle) -> int:
    """Run `handle(event, agent=...)` for the agent named after the script (else HOME_AGENT; the
    server says which it knows), on its event in Claude Code's shape."""
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    ok = 0 < len(name) <= 40 and name.replace("-", "").isalnum() and name.isascii()
    agent = name if ok else HOME_AGENT
    return lib.run(hook, lambda raw: handle(event_of(agent, raw), agent=agent), agent)


def event_of(agent: str, raw: dict, env=None) -> dict:
    """The event the handlers take, from what `agent` wrote on stdin. Copilot CLI's session is
    one file, `<COPILOT_HOME or ~/.copilot>/session-state/<sessionId>/events.jsonl`: named as
    the transcript where its event names none."""
    if agent not in CAMEL_CASE_AGENTS or "hook_event_name" in raw or "session_id" in raw:
        return raw
    event = {CAMEL_CASE_KEYS.get(k, k): value for k, value in raw.items() if k != "toolArgs"}
    arguments = raw.get("toolArgs")
    if isinstance(arguments, str):  # earlier versions gave its JSON
        try:
            arguments = json.loads(arguments)
        except ValueError:
            arguments = {}
    if "toolArgs" in raw:
        event["tool_input"] = arguments if isinstance(arguments, dict) else {}
    session = event.get("session_id")
    if "transcript_path" in event or not isinstance(session, str):
        return event
    if lib.session_key(session) == session:  # a plain name (a UUID), never a path
        named = (os.environ if env is None else env).get("COPILOT_HOME")
        home = os.path.expanduser(named or os.path.join("~", ".copilot"))
        event["transcript_path"] = os.path.join(home, "session-state", session, "events.jsonl")
    return event


def answer(agent: str, event: dict, default_name: str, texts) -> dict | None:
    """What `agent` reads on stdout to add `texts` (those given, in order) to what its model is
    told; None for none. `hookEventName` is the event's own: the same scripts answer Claude Code's
    and Codex's UserPromptSubmit and PreToolUse, and Gemini CLI's BeforeAgent and AfterTool."""
    text = "\n\n".join(t for t in texts if t)
    if not text:
        return None
    if agent in CAMEL_CASE_AGENTS:
        return {"additionalContext": text}
    name = event.get("hook_event_name")
    ok = isinstance(name, str) and 0 < len(name) <= 40 and name.isalpha()
    return {"hookSpecificOutput": {"hookEventName": name if ok else default_name,
                                   "additionalContext": text}}  # fmt: skip
