"""Each agent's hook contract: its event on stdin, as the Claude-shaped event the handlers take
(`event_of`), and what it reads back on stdout (`output_of`). Claude Code, Codex and Gemini CLI
give Claude Code's event and read `{"hookSpecificOutput": {"hookEventName", "additionalContext"}}`
under their own event names. Copilot CLI's command hooks give camelCase payloads (`sessionId`,
`cwd`, `prompt`, `toolName`, `toolArgs`) and read a flat `{"additionalContext"}` (@github/copilot
1.0.102, seen live by tests/hooks/test_copilot_cli.py); its session's one file,
`<COPILOT_HOME or ~/.copilot>/session-state/<sessionId>/events.jsonl`, is named as the transcript.
A payload already in Claude Code's shape is taken as it is. Imports nothing the hooks have not.
"""

import json
import os

HOME_AGENT = "claude-code"
"""The agent whose plugin these hooks are; another agent's configuration names its own after the
script (`run-hook.sh pre_tool_use.py codex`, as `librarian connect` writes it)."""
COPILOT = "copilot"
_COPILOT_KEYS = (
    ("sessionId", "session_id"),
    ("cwd", "cwd"),
    ("prompt", "prompt"),
    ("toolName", "tool_name"),
    ("transcriptPath", "transcript_path"),
)
"""Copilot CLI's payload keys, and Claude Code's for the same."""


def agent_argument(argv: list[str]) -> str:
    """The agent named after the script, else HOME_AGENT; the server says which it knows."""
    name = argv[1] if len(argv) > 1 else ""
    ok = 0 < len(name) <= 40 and name.replace("-", "").isalnum() and name.isascii()
    return name if ok else HOME_AGENT


def event_name(event: dict, default: str) -> str:
    """The event's own name, for the output's `hookEventName`: the same scripts answer Claude
    Code's and Codex's UserPromptSubmit and PreToolUse, and Gemini CLI's BeforeAgent and
    AfterTool, which take the same output under their own names."""
    name = event.get("hook_event_name")
    if isinstance(name, str) and 0 < len(name) <= 40 and name.isalpha():
        return name
    return default


def event_of(agent: str, raw: dict, env=None) -> dict:
    """The event the handlers take, from what `agent` wrote on stdin."""
    if agent != COPILOT or "hook_event_name" in raw or "session_id" in raw:
        return raw
    env = os.environ if env is None else env
    event: dict = {}
    for theirs, ours in _COPILOT_KEYS:
        if theirs in raw:
            event[ours] = raw[theirs]
    if "toolArgs" in raw:
        event["tool_input"] = _arguments(raw["toolArgs"])
    if "transcript_path" not in event:
        transcript = _copilot_events(event.get("session_id"), env)
        if transcript:
            event["transcript_path"] = transcript
    return event


def output_of(agent: str, event_name: str, text: str) -> dict:
    """What `agent` reads on stdout to add `text` to what its model is told."""
    if agent == COPILOT:
        return {"additionalContext": text}
    return {"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": text}}


def _arguments(value) -> dict:
    """A tool's arguments as an object: Copilot CLI gives one (earlier versions gave its JSON)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _copilot_events(session_id, env) -> str | None:
    """Where Copilot CLI writes this session's events: a session id is a plain name (a UUID),
    never a path."""
    if not isinstance(session_id, str) or not 0 < len(session_id) <= 100:
        return None
    if not all(c.isalnum() or c in "-_" for c in session_id):
        return None
    named = env.get("COPILOT_HOME")
    home = os.path.expanduser(named) if named else os.path.join(os.path.expanduser("~"), ".copilot")
    return os.path.join(home, "session-state", session_id, "events.jsonl")
