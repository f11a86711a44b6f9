"""What a Pi tool call did: its `ToolUse`, with the action decided from Pi's tool names.

Pi's built-in tools (@mariozechner/pi-coding-agent, dist/core/tools/): `read` a `path`; `write`
and `edit` a `path` (edit's `edits` are old/new text pairs of that one file); `bash` runs a
`command`; `ls`, `grep` and `find` search a folder (`path`, optional). Tools from extensions
keep their names and get no action.

An extension sees a tool call as its name and input (`tool_call`/`tool_result` events:
`toolName`, `input`), the very `arguments` its `toolCall` records: `live_tool` reads it by the
same rule.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections.abc import Mapping
from typing import Any

from librarian_dagster.core.capture.session import CHANGE, READ, RUN, SEARCH, ToolUse
from librarian_dagster.core.capture.tool_summary import detail_of, summary_of

__all__ = ["live_tool", "tool_use"]

_ACTIONS = {
    "read": READ,
    "write": CHANGE,
    "edit": CHANGE,
    "bash": RUN,
    "ls": SEARCH,
    "grep": SEARCH,
    "find": SEARCH,
}
_DETAIL_KEYS = ("pattern", "description", "query", "url", "prompt", "task")


def tool_use(block: dict[str, Any]) -> ToolUse:
    """One `toolCall` content item as the session model has it."""
    name = block.get("name")
    name = name if isinstance(name, str) and name else "?"
    args = block.get("arguments")
    args = args if isinstance(args, dict) else {}
    path = args.get("path")
    path = path if isinstance(path, str) else ""
    command = args.get("command") if name == "bash" else None
    command = command if isinstance(command, str) and command else None
    action = _ACTIONS.get(name, "")
    worked_on = path if action in (CHANGE, READ) else None
    call_id = block.get("id")
    return ToolUse(
        name=name,
        action=action,
        file_paths=(path,) if path else (),
        command=command,
        summary=summary_of(name, command, worked_on, detail_of(args, _DETAIL_KEYS) or path),
        id=call_id if isinstance(call_id, str) and call_id else None,
    )


def live_tool(name: str, tool_input: Mapping[str, Any], cwd: str | None = None) -> ToolUse:
    """A tool call as Pi's extensions see it (`tool_result`'s `toolName` and `input`): the tool
    use its `toolCall` will record. Paths are as the call gives them (the extension joins a
    relative one to its cwd)."""
    return tool_use({"name": name, "arguments": dict(tool_input)})
