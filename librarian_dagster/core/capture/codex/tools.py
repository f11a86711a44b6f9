"""What each Codex tool call did (`ToolUse.action`), and whether its result says it failed.

Tool calls come as `response_item` records: `function_call` (JSON `arguments`: `exec_command`,
`shell_command`, `shell`, `apply_patch`, `view_image`, `update_plan`, `spawn_agent`, MCP tools
under a `namespace`...), `custom_tool_call` (`apply_patch` with the patch as `input`),
`local_shell_call`, `web_search_call` and `tool_search_call`. A patch changes the files it
names; a shell command reads, searches or runs as core/capture/codex/shell.py decides.

Standard library only: hooks and the MCP server import this without dagster.
"""

import json
import posixpath
import re
from collections.abc import Mapping
from typing import Any

from librarian_dagster.core.capture.codex.shell import apply_patch_in, classify, script_of
from librarian_dagster.core.capture.patches import patch_paths
from librarian_dagster.core.capture.session import CHANGE, READ, RUN, SEARCH, ToolUse, one_line
from librarian_dagster.core.capture.tool_summary import detail_of, summary_of

__all__ = ["CALL_TYPES", "OUTPUT_TYPES", "failed", "live_tool", "output_text", "tool_use"]

CALL_TYPES = frozenset(
    {"function_call", "custom_tool_call", "local_shell_call", "web_search_call", "tool_search_call"}
)
OUTPUT_TYPES = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "tool_search_output",
        "mcp_tool_call_output",
    }
)
_SHELL_TOOLS = frozenset(
    {"exec_command", "shell_command", "shell", "local_shell", "container.exec", "unified_exec"}
)
_PATCH_TOOLS = frozenset({"apply_patch", "applypatch"})
_DETAIL_KEYS = ("message", "query", "explanation", "target", "path", "url", "prompt", "q")


def _arguments(payload: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A call's arguments as a dict (JSON text decoded) and as text."""
    raw = payload.get("arguments", payload.get("input"))
    if isinstance(raw, dict):
        return raw, ""
    if not isinstance(raw, str):
        return {}, ""
    try:
        value = json.loads(raw)
    except ValueError:
        return {}, raw
    return (value, raw) if isinstance(value, dict) else ({}, raw)


def _away(workdir: Any, cwd: str | None) -> str | None:
    """The call's own folder when it is not the session's cwd (paths are then joined to it)."""
    if not isinstance(workdir, str) or not workdir:
        return None
    if cwd and posixpath.normpath(workdir) == posixpath.normpath(cwd):
        return None
    return workdir


def tool_use(payload: dict[str, Any], cwd: str | None) -> ToolUse:
    """The tool use of one call record; `cwd` is the session's."""
    ptype = payload.get("type")
    call_id = payload.get("call_id") or payload.get("id")
    call_id = call_id if isinstance(call_id, str) and call_id else None
    if ptype == "web_search_call":
        return _web_search(payload, call_id)
    if ptype == "local_shell_call":
        action = payload.get("action")
        action = action if isinstance(action, dict) else {}
        workdir = _away(action.get("working_directory"), cwd)
        return _shell("local_shell", script_of(action.get("command")), workdir, call_id)
    name = str(payload.get("name") or ptype or "?")
    namespace = payload.get("namespace")
    if isinstance(namespace, str) and namespace:
        name = f"{namespace.rstrip('_')}__{name.lstrip('_')}"
    args, text = _arguments(payload)
    if ptype == "custom_tool_call" or name in _PATCH_TOOLS:
        patch = payload.get("input") if ptype == "custom_tool_call" else args.get("input", text)
        return _patch(
            name, patch if isinstance(patch, str) else "", _away(args.get("workdir"), cwd), call_id
        )
    if name in _SHELL_TOOLS:
        script = script_of(args.get("cmd", args.get("command")))
        return _shell(name, script, _away(args.get("workdir"), cwd), call_id)
    return _other(name, args, call_id, ptype)


def live_tool(name: str, tool_input: Mapping[str, Any], cwd: str | None = None) -> ToolUse:
    """A tool call as Codex's hooks show it: the shell as `Bash` and `apply_patch`, each with its
    script or patch in `tool_input.command`; an MCP tool under its own name."""
    command = tool_input.get("command")
    if name == "apply_patch":
        return _patch(name, command if isinstance(command, str) else "", None, None)
    if name == "Bash":
        return _shell("shell", script_of(command), None, None)
    return _other(name, dict(tool_input), None, "function_call")


def _patch(name: str, patch: str, workdir: str | None, call_id: str | None) -> ToolUse:
    paths = patch_paths(patch, workdir)
    summary = name if not paths else f"{name} {paths[0]}"
    if len(paths) > 1:
        summary += f" (+{len(paths) - 1} more)"
    return ToolUse(
        name=name,
        action=CHANGE,
        file_paths=paths,
        summary=one_line(summary, 120),
        id=call_id,
    )


def _shell(name: str, script: str | None, workdir: str | None, call_id: str | None) -> ToolUse:
    if not script:
        return ToolUse(name=name, action=RUN, summary=name, id=call_id)
    patch = apply_patch_in(script)
    if patch is not None:
        text, folder = patch
        where = folder if folder is None or workdir is None else posixpath.join(workdir, folder)
        use = _patch(name, text, where or workdir, call_id)
        use.command = script
        return use
    found = classify(script, workdir)
    return ToolUse(
        name=name,
        action=found.action,
        file_paths=found.paths,
        command=script,
        summary=summary_of(name, script, None, ""),
        id=call_id,
    )


def _web_search(payload: dict[str, Any], call_id: str | None) -> ToolUse:
    action = payload.get("action")
    query = ""
    if isinstance(action, dict):
        found = action.get("query") or action.get("queries") or action.get("url") or ""
        query = " | ".join(found) if isinstance(found, list) else str(found)
    summary = summary_of("web_search", None, None, query)
    return ToolUse(name="web_search", action=SEARCH, summary=summary, id=call_id)


def _other(name: str, args: dict[str, Any], call_id: str | None, ptype: Any) -> ToolUse:
    action = ""
    paths: tuple[str, ...] = ()
    if name == "view_image" and isinstance(args.get("path"), str):
        action, paths = READ, (args["path"],)
    elif ptype == "tool_search_call":
        action = SEARCH
    elif name == "write_stdin":
        action = RUN  # more of a command already running
    detail = detail_of(args, _DETAIL_KEYS)
    if name == "write_stdin" and "session_id" in args:
        detail = f"session {args['session_id']}"
    return ToolUse(
        name=name,
        action=action,
        file_paths=paths,
        summary=summary_of(name, None, None, detail),
        id=call_id,
    )


def output_text(output: Any) -> str:
    """A call's output as text: a string, or content items (images become `[image]`)."""
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        return output_text(output.get("content", output.get("output", "")))
    if not isinstance(output, list):
        return "" if output is None else str(output)
    parts: list[str] = []
    for item in output:
        if isinstance(item, dict):
            if isinstance(item.get("text"), str):
                parts.append(item["text"])
            elif item.get("type") in ("input_image", "image"):
                parts.append("[image]")
        elif isinstance(item, str):
            parts.append(item)
    return "\n".join(p for p in parts if p)


_EXIT = re.compile(r"(?:Process exited with code|^Exit code:) *(-?\d+)", re.M)
_FAILED = re.compile(r"^[\w .-]{0,40}\bfailed\b", re.I)


def failed(text: str) -> bool:
    """Whether an output says its call failed: a nonzero exit code (`Process exited with code
    N`, `Exit code: N`, or `{"metadata": {"exit_code": N}}`), or `... failed` first."""
    head = text[:2000]
    if head.startswith("{") and '"exit_code"' in head:
        m = re.search(r'"exit_code"\s*:\s*(-?\d+)', head)
        if m:
            return m.group(1) != "0"
    # Both forms hold "xit": a search of text without it would only fail, and slowly (the
    # pattern begins with no one literal).
    m = _EXIT.search(head) if "xit" in head else None
    if m:
        return m.group(1) != "0"
    return bool(_FAILED.match(head)) or head.startswith("apply_patch verification failed")
