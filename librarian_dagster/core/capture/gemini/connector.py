"""Gemini CLI: hooks and the MCP server in `settings.json`, the user's (`~/.gemini`) or a
repository's (`.gemini/`, read only in a folder the user trusted).

Its events differ from Claude Code's, its output does not: recall at `BeforeAgent` (its context
joins the prompt's request), and file history at `AfterTool` of its file tools (its context is
appended to the tool's result). `BeforeTool` takes no context (the CLI reads only a decision
from it), so the history comes after a read or an edit, as Claude Code's reaches the model with
the tool's result too.

For a server elsewhere (`--server`) each hook's command names it (`run-hook.sh --server=URL`),
and the MCP server's header names the token's variable (`$LIBRARIAN_MCP_TOKEN`, which Gemini CLI
expands as it reads its settings): the token is never in the file.
"""

import json
from pathlib import Path

from librarian_dagster.core.connect.agent import SERVER, Connector, Where, mcp_problems, run_hook
from librarian_dagster.core.connect.files import Target, json_config, json_target

AGENT = "gemini"
FILE_TOOLS = "^(read_file|read_many_files|write_file|replace)$"
"""The file tools, by name: Gemini CLI tests a tool's name with the matcher as a JavaScript
RegExp, unanchored (`read_file` alone would match an MCP server's `mcp_fs_read_file` too)."""
TIMEOUT_MS = 10_000
"""Gemini CLI's bound on a hook, in milliseconds (60 s when unset); the hooks keep to their
deadlines (under a second) well within."""


def _settings(where: Where) -> Path:
    return (where.repo if where.repo else where.home) / ".gemini" / "settings.json"


def _entries(where: Where) -> list[tuple[tuple[str, ...], object]]:
    def hook(script: str) -> dict[str, object]:
        command = run_hook(where, script, AGENT)
        return {"type": "command", "name": "librarian", "command": command, "timeout": TIMEOUT_MS}

    server: dict[str, object] = {"httpUrl": where.mcp_url}
    if where.sends_token:  # Gemini CLI expands $VAR in its settings as it reads them
        server["headers"] = {"Authorization": "Bearer $LIBRARIAN_MCP_TOKEN"}
    return [
        (("hooks", "BeforeAgent[]"), {"hooks": [hook("user_prompt_submit.py")]}),
        (("hooks", "AfterTool[]"), {"matcher": FILE_TOOLS, "hooks": [hook("pre_tool_use.py")]}),
        (("mcpServers", SERVER), server),
    ]


def targets(where: Where) -> list[Target]:
    return [json_target(_settings(where), _entries(where))]


def check(where: Where) -> list[str]:
    path = _settings(where)
    settings, unread = json_config(path, "Gemini CLI reads no hook from it")
    if unread:
        return [unread]
    problems = []
    hooks = settings.get("hooks", {})
    for keys, value in _entries(where)[:2]:
        listed = hooks.get(keys[1][:-2], []) if isinstance(hooks, dict) else []
        if not isinstance(listed, list) or value not in listed:
            problems.append(f"not connected: {path} does not run Librarian's {keys[1][:-2]} hook")
    switches = settings.get("hooksConfig")
    if isinstance(switches, dict) and switches.get("enabled") is False:
        problems.append(f"{path} turns Gemini CLI's hooks off (hooksConfig.enabled = false)")
    server = (settings.get("mcpServers") or {}).get(SERVER)
    problems += mcp_problems(path, server, where, url_key="httpUrl")
    if where.repo and not _trusted(where):
        problems.append(f"Gemini CLI reads {path} only in a folder you trusted: trust it there")
    return problems


def _trusted(where: Where) -> bool:
    """Whether the user trusted the repository in Gemini CLI (~/.gemini/trustedFolders.json)."""
    try:
        folders = json.loads((where.home / ".gemini" / "trustedFolders.json").read_bytes())
    except (OSError, ValueError):
        return False
    if not isinstance(folders, dict) or where.repo is None:
        return False
    repo = str(where.repo)
    return any(
        level in ("TRUST_FOLDER", "TRUST_PARENT") and (repo == f or repo.startswith(f + "/"))
        for f, level in folders.items()
    )


CONNECTOR = Connector(
    agent=AGENT,
    targets=targets,
    check=check,
    folder=lambda where: where.home / ".gemini",
    command="gemini",
)
