"""What a Gemini CLI tool call did (`ToolUse`), and the text of its result.

Tool names and arguments are Gemini CLI's (packages/core/src/tools/definitions/
base-declarations.ts): `write_file` and `replace` change a file (`file_path`), `read_file`
reads one (`file_path`; `absolute_path` before), `read_many_files` several (`include`, `paths`
before), `run_shell_command` runs `command`, and `glob`, `grep_search` (`search_file_content`
before), `list_directory`, `google_web_search`, `web_fetch` search. A call whose status is
"error" failed; one "cancelled" (the user said no, or stopped it) did not happen either: both are
`is_error`, as Claude Code marks a refused tool use.

Standard library only: hooks and the MCP server import this without dagster.
"""

from collections.abc import Iterable, Mapping
from typing import Any

from librarian_dagster.core.capture.gemini.parts import as_parts, part_text, response_text
from librarian_dagster.core.capture.session import CHANGE, READ, RUN, SEARCH, ToolUse
from librarian_dagster.core.capture.tool_summary import detail_of, summary_of

__all__ = ["ERROR_STATUSES", "absolute_paths", "live_tool", "result_text", "tool_use"]

ERROR_STATUSES = frozenset({"error", "cancelled"})

_ACTIONS = {
    **dict.fromkeys(("write_file", "replace", "edit", "smart_edit"), CHANGE),
    **dict.fromkeys(("read_file", "read_many_files"), READ),
    **dict.fromkeys(("run_shell_command",), RUN),
    **dict.fromkeys(
        (
            "glob",
            "grep_search",
            "search_file_content",
            "grep",
            "list_directory",
            "ls",
            "google_web_search",
            "web_search",
            "web_fetch",
        ),
        SEARCH,
    ),
}
_FILE_KEYS = ("file_path", "absolute_path", "path")
_FOLDER_KEYS = ("dir_path", "path")
_LIST_KEYS = ("include", "paths")
_GLOB_CHARS = frozenset("*?[{")
_DETAIL_KEYS = ("pattern", "query", "url", "prompt", "description", "dir_path", "instruction")
_SUMMARY_WIDTH = 100


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str) and v]
    return []


def _displayed_path(display: Any) -> str | None:
    """The absolute path Gemini CLI showed for a file tool's result (`resultDisplay.filePath`)."""
    if isinstance(display, dict) and isinstance(display.get("filePath"), str):
        return display["filePath"] or None
    return None


def _paths(action: str, args: dict[str, Any], display: Any) -> list[str]:
    if action in (CHANGE, READ):
        paths = [p for key in _FILE_KEYS for p in _strings(args.get(key))]
        # read_many_files names files or globs: only the files are files worked on.
        paths += [
            p for key in _LIST_KEYS for p in _strings(args.get(key)) if not _GLOB_CHARS & set(p)
        ]
        shown = _displayed_path(display)
        if shown and len(paths) == 1 and shown.replace("\\", "/").endswith(paths[0].lstrip("./")):
            # The tool's own absolute spelling of the relative path it was given.
            paths = [shown]
        return list(dict.fromkeys(paths))
    if action == SEARCH:
        return list(dict.fromkeys(p for key in _FOLDER_KEYS for p in _strings(args.get(key))))
    return []


def tool_use(call: dict[str, Any]) -> ToolUse:
    """The session model's tool use of one of Gemini CLI's `toolCalls` (or a `functionCall`)."""
    name = str(call.get("name") or "?")
    args = call.get("args")
    args = args if isinstance(args, dict) else {}
    action = _ACTIONS.get(name, "")
    command = args.get("command") if isinstance(args.get("command"), str) else None
    paths = _paths(action, args, call.get("resultDisplay"))
    return ToolUse(
        name=name,
        action=action,
        file_paths=tuple(paths),
        command=command,
        summary=summary_of(
            name, command, paths[0] if paths else None, detail_of(args, _DETAIL_KEYS)
        ),
        is_error=call.get("status") in ERROR_STATUSES or _has_error(call.get("result")),
        id=call.get("id") if isinstance(call.get("id"), str) else None,
    )


def live_tool(name: str, tool_input: Mapping[str, Any], cwd: str | None = None) -> ToolUse:
    """A tool call as Gemini CLI's hooks show it (`tool_name`, `tool_input`: the call's args)."""
    return tool_use({"name": name, "args": dict(tool_input)})


def _has_error(result: Any) -> bool:
    for part in as_parts(result):
        if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
            response = part["functionResponse"].get("response")
            if isinstance(response, dict) and response.get("error"):
                return True
    return False


def result_text(result: Any, display: Any = None) -> str:
    """A tool call's result as the model read it; else what Gemini CLI showed, if a string."""
    texts: list[str] = []
    for part in as_parts(result):
        if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
            response = part["functionResponse"]
            texts.append(response_text(response.get("response")))
            texts.extend(part_text(p) for p in as_parts(response.get("parts")))
        else:
            texts.append(part_text(part))
    text = "\n".join(t for t in texts if t)
    if not text and isinstance(display, str):
        return display
    return text


def absolute_paths(call: dict[str, Any]) -> Iterable[str]:
    """Absolute paths a tool call names in its arguments and shown result: where the session
    ran is among their folders (core/capture/gemini/project.py)."""
    args = call.get("args")
    if isinstance(args, dict):
        for value in args.values():
            for text in _strings(value):
                if text.startswith("/") or text[1:3] in (":\\", ":/"):
                    yield text
    display = call.get("resultDisplay")
    if isinstance(display, dict):
        for key in ("filePath", "absolutePath"):
            if isinstance(display.get(key), str):
                yield display[key]
        for match in display.get("matches") or ():
            if isinstance(match, dict) and isinstance(match.get("absolutePath"), str):
                yield match["absolutePath"]
