"""What a Copilot CLI tool call did: its `ToolUse`, the action told from Copilot's tool names.

Tool names and arguments are those of @github/copilot 1.0.x (its session-events schema and the
calls in real sessions): `view`/`show_file` read a `path`; `edit`, `create`, `str_replace`,
`insert` change one; `str_replace_editor` (older versions) says which in its `command` argument;
`apply_patch` carries a patch (a string) naming its files; `bash`/`powershell` run a `command`,
and their `read_`/`write_`/`stop_`/`list_` companions work the same shells; `grep`, `rg`, `glob`
and the web tools search. Anything else (`task`, `ask_user`, `sql`, MCP tools) has no action.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections.abc import Mapping
from typing import Any

from librarian_dagster.core.capture.patches import patch_paths
from librarian_dagster.core.capture.session import CHANGE, READ, RUN, SEARCH, ToolUse
from librarian_dagster.core.capture.tool_summary import detail_of, strings_of, summary_of

__all__ = ["live_tool", "tool_use"]

_ACTIONS = {
    **dict.fromkeys(
        (
            "edit",
            "create",
            "str_replace",
            "insert",
            "apply_patch",
            "git_apply_patch",
            "write",
            "delete",
            "rename",
            "move",
        ),
        CHANGE,
    ),
    **dict.fromkeys(("view", "show_file", "read", "read_file"), READ),
    **dict.fromkeys(("grep", "rg", "glob", "web_search", "web_fetch", "fetch", "lsp"), SEARCH),
    **dict.fromkeys(
        (
            "bash",
            "powershell",
            "read_bash",
            "write_bash",
            "stop_bash",
            "list_bash",
            "read_powershell",
            "write_powershell",
            "stop_powershell",
            "list_powershell",
        ),
        RUN,
    ),
}
# str_replace_editor's own `command` argument names an editing step, not a shell command.
_EDITOR_ACTIONS = {"view": READ, "create": CHANGE, "str_replace": CHANGE, "insert": CHANGE,
                   "undo_edit": CHANGE}  # fmt: skip
_SHELLS = frozenset(("bash", "powershell", "write_bash", "write_powershell"))
_DETAIL_KEYS = ("description", "pattern", "query", "url", "intent", "prompt", "question", "skill")


def _patch_paths(arguments: Any) -> list[str]:
    """The files an apply_patch names (Add, Update, Delete, Move to): its arguments are the
    patch itself, or an object holding it."""
    text = arguments
    if isinstance(arguments, dict):
        text = next((v for v in arguments.values() if isinstance(v, str) and "*** " in v), "")
    if not isinstance(text, str):
        return []
    return list(patch_paths(text))


def _paths(name: str, args: dict[str, Any], arguments: Any) -> list[str]:
    if name in ("apply_patch", "git_apply_patch"):
        return _patch_paths(arguments)
    paths = strings_of(args, ("path", "file_path", "filePath"))
    many = args.get("paths")
    if isinstance(many, list):
        paths.extend(p for p in many if isinstance(p, str))
    elif isinstance(many, str):
        paths.append(many)
    return [p for p in paths if p]


def tool_use(name: str, arguments: Any, call_id: Any) -> ToolUse:
    """One tool call as the session model has it, from its name and arguments."""
    args = arguments if isinstance(arguments, dict) else {}
    action = _ACTIONS.get(name, "")
    if name == "str_replace_editor":
        action = _EDITOR_ACTIONS.get(str(args.get("command")), "")
    paths = list(dict.fromkeys(_paths(name, args, arguments)))
    command = args.get("command") if name in _SHELLS else None
    command = command if isinstance(command, str) and command else None
    worked_on = paths[0] if paths and action in (CHANGE, READ) else None
    return ToolUse(
        name=name,
        action=action,
        file_paths=tuple(paths),
        command=command,
        summary=summary_of(name, command, worked_on, detail_of(args, _DETAIL_KEYS)),
        id=call_id if isinstance(call_id, str) and call_id else None,
    )


def live_tool(name: str, tool_input: Mapping[str, Any], cwd: str | None = None) -> ToolUse:
    """A tool call as Copilot CLI's command hooks show it (`toolName`, `toolArgs`): the tool's
    own name and arguments, as its events.jsonl records them (`view` {path}, `edit` {path,
    old_str, new_str}, `create` {path, file_text}, `bash` {command}, ...)."""
    return tool_use(name, dict(tool_input), None)
