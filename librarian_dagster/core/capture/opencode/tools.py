"""What an OpenCode tool part did: its name, `action`, files, command and one-line summary.

OpenCode's tools (packages/opencode/src/tool/) take camelCase inputs: `filePath` (edit, write,
read), `edits[].filePath` (multiedit), `patchText` (apply_patch, patch: the files are named in
its `*** Update File:` lines), `command` (bash), `pattern`/`path` (grep, glob, list). A step's
`patch` part lists the files the step changed on disk, whatever tool did it.

A plugin sees a tool call as its name and arguments (`tool.execute.before`/`after`: `tool`,
`args`), the very `state.input` the part records: `live_tool` reads it by the same rule.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections.abc import Mapping
from typing import Any

from librarian_dagster.core.capture.patches import patch_paths
from librarian_dagster.core.capture.session import CHANGE, READ, RUN, SEARCH, ToolUse, one_line
from librarian_dagster.core.capture.tool_summary import detail_of, strings_of, summary_of

__all__ = ["as_dict", "live_tool", "patch_use", "tool_use"]

_ACTIONS = {
    **dict.fromkeys(("edit", "write", "patch", "multiedit", "apply_patch"), CHANGE),
    **dict.fromkeys(("read", "view"), READ),
    **dict.fromkeys(("bash",), RUN),
    **dict.fromkeys(("grep", "glob", "list", "ls", "webfetch", "websearch", "codesearch"), SEARCH),
    # task spawns a child session (a subagent); todowrite, todoread, skill, question, invalid
    # and MCP tools did none of the four: "".
}


def as_dict(value: Any) -> dict[str, Any]:
    """The value where it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _paths(name: str, inp: dict[str, Any], metadata: dict[str, Any]) -> list[str]:
    paths = strings_of(inp, ("filePath", "file_path", "path"))
    edits = inp.get("edits")
    if isinstance(edits, list):
        paths += [p for e in edits if isinstance(e, dict) for p in strings_of(e, ("filePath",))]
    patch = inp.get("patchText")
    if isinstance(patch, str):
        paths.extend(patch_paths(patch))
    files = metadata.get("files")
    if name in ("apply_patch", "patch") and isinstance(files, list):
        # What apply_patch reports it did, absolute: moves name their target here too.
        paths += [
            p for f in files if isinstance(f, dict) for p in strings_of(f, ("filePath", "movePath"))
        ]
    return paths


def tool_use(part: dict[str, Any]) -> ToolUse:
    """The tool use a `tool` part records (its state: pending, running, completed or error)."""
    name = str(part.get("tool") or "?")
    state = as_dict(part.get("state"))
    inp = as_dict(state.get("input"))
    metadata = as_dict(state.get("metadata"))
    paths = list(dict.fromkeys(_paths(name, inp, metadata)))
    command = inp.get("command") if name == "bash" and isinstance(inp.get("command"), str) else None
    action = _ACTIONS.get(name, "")
    detail = detail_of(inp, ("pattern", "description", "query", "url", "name", "prompt"))
    # A search says what it looked for; the folder it looked in is in file_paths.
    path = paths[0] if paths and not (action == SEARCH and detail) else None
    call = part.get("callID")
    return ToolUse(
        name=name,
        file_paths=tuple(paths),
        command=command,
        summary=summary_of(name, command, path, detail),
        is_error=state.get("status") == "error",
        id=call if isinstance(call, str) and call else None,
        action=action,
    )


def live_tool(name: str, tool_input: Mapping[str, Any], cwd: str | None = None) -> ToolUse:
    """A tool call as OpenCode's plugins see it (`tool.execute.after`'s `tool` and `args`):
    the tool use its part will record. Paths are as the call gives them (the plugin joins a
    relative one to its directory)."""
    return tool_use({"tool": name, "state": {"input": dict(tool_input)}})


def patch_use(part: dict[str, Any], changed: set[str]) -> ToolUse | None:
    """A step's `patch` part as a change to the files no tool of the step already said it
    changed (a formatter, `sed -i` in bash); None when the tools named them all."""
    files = part.get("files")
    if not isinstance(files, list):
        return None
    fresh = [f for f in dict.fromkeys(files) if isinstance(f, str) and f and f not in changed]
    if not fresh:
        return None
    more = f" (+{len(fresh) - 1} more)" if len(fresh) > 1 else ""
    pid = part.get("id")
    return ToolUse(
        name="patch",
        file_paths=tuple(fresh),
        summary=one_line(f"patch {fresh[0]}{more}", 120),
        id=pid if isinstance(pid, str) else None,
        action=CHANGE,
    )
