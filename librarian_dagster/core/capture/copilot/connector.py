"""Copilot CLI: hooks in `hooks/librarian.json` and the MCP server in `mcp-config.json`, both in
$COPILOT_HOME (`~/.copilot`), or a repository's (`.github/hooks/`, `.mcp.json` or
`.github/mcp.json`, read only in a folder the user trusted).

Recall at `userPromptSubmitted` (its context ends the prompt the model is sent, in a
`<system_reminder>`), file history at `preToolUse` of its file tools (its context is a message
right after the tool's result). Copilot's payloads are camelCase and it reads a flat
`{"additionalContext"}`: the hook scripts take `copilot` as their argument
(hooks/librarian_agents.py).

A repository's hooks and MCP servers are read only in a folder the user trusted in Copilot
(`trustedFolders` in the Copilot home's config.json, which the CLI keeps when the user answers
its trust prompt); connecting never trusts a folder for the user, and `--check` says when it is
not. Of a repository's two MCP files Copilot reads `.mcp.json` when there is one, and
`.github/mcp.json` only when there is not (@github/copilot 1.0.102, seen live).

For a server elsewhere (`--server`) each hook's command names it (`run-hook.sh --server=URL`),
and the MCP server's header names the token's variable (`${LIBRARIAN_MCP_TOKEN}`): never the token.
"""

import json
import os
from pathlib import Path
from typing import Any

from librarian_dagster.core.connect.agent import SERVER, Connector, Where, mcp_problems, run_hook
from librarian_dagster.core.connect.files import Target, json_target

AGENT = "copilot"
TIMEOUT_S = 10
"""Copilot's bound on a hook (`timeoutSec`); the hooks keep to their deadlines (under a second)
well within."""
FILE_TOOLS = "^(view|edit|create)$"
"""What the preToolUse hook is asked about: Copilot's tools that read or change a named file. A
regex on the tool's name, anchored whatever way Copilot applies it (an MCP tool may be named
`server-view`)."""
EVENTS = ("userPromptSubmitted", "preToolUse")


def copilot_home(where: Where) -> Path:
    named = (where.env.get("COPILOT_HOME") or "").strip()
    return Path(named).expanduser() if named else where.home / ".copilot"


def _hooks_json(where: Where) -> Path:
    folder = where.repo / ".github" if where.repo else copilot_home(where)
    return folder / "hooks" / "librarian.json"


def _mcp_json(where: Where) -> Path:
    if where.repo is None:
        return copilot_home(where) / "mcp-config.json"
    shared = where.repo / ".mcp.json"
    return shared if shared.exists() else where.repo / ".github" / "mcp.json"


def _hooks(where: Where) -> dict[str, dict[str, Any]]:
    def hook(script: str, matcher: str | None = None) -> dict[str, Any]:
        entry: dict[str, Any] = {"type": "command", "bash": run_hook(where, script, AGENT)}
        if matcher:
            entry["matcher"] = matcher
        entry["timeoutSec"] = TIMEOUT_S
        return entry

    return {
        "userPromptSubmitted": hook("user_prompt_submit.py"),
        "preToolUse": hook("pre_tool_use.py", FILE_TOOLS),
    }


def _server(where: Where, path: Path) -> dict[str, Any]:
    server: dict[str, Any] = {"type": "http", "url": where.mcp_url}
    if where.sends_token:
        # Copilot expands ${VAR} in a header from its own environment: no token in the file.
        server["headers"] = {"Authorization": "Bearer ${LIBRARIAN_MCP_TOKEN}"}
    if path.name != ".mcp.json":  # the file Claude Code reads too keeps to what both know
        server["tools"] = ["*"]
    return server


def targets(where: Where) -> list[Target]:
    hooks_path, mcp_path = _hooks_json(where), _mcp_json(where)
    hook_entries = [(("version",), 1)] + [
        (("hooks", event + "[]"), entry) for event, entry in _hooks(where).items()
    ]
    mcp_entries = [(("mcpServers", SERVER), _server(where, mcp_path))]
    return [json_target(hooks_path, hook_entries), json_target(mcp_path, mcp_entries)]


def _jsonc(path: Path) -> Any:
    """A JSON file Copilot may have written with `//` comment lines (its config.json starts with
    two); None when it is not there, ValueError when it is not JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("//")]
    return json.loads("\n".join(lines)) if any(line.strip() for line in lines) else {}


def check(where: Where) -> list[str]:
    problems = []
    hooks_path = _hooks_json(where)
    try:
        hooks = _jsonc(hooks_path)
    except (OSError, ValueError):
        return [f"{hooks_path} is not JSON: Copilot CLI reads no hook from it"]
    listed = hooks.get("hooks") if isinstance(hooks, dict) else None
    for event, entry in _hooks(where).items():
        entries = listed.get(event) if isinstance(listed, dict) else None
        if not isinstance(entries, list) or entry not in entries:
            problems.append(f"not connected: {hooks_path} does not run Librarian's {event} hook")
    settings = [copilot_home(where) / "settings.json"]
    if where.repo:
        settings += [
            where.repo / ".github" / "copilot" / n for n in ("settings.json", "settings.local.json")
        ]
    for path in settings:
        try:
            values = _jsonc(path)
        except (OSError, ValueError):
            continue
        if isinstance(values, dict) and values.get("disableAllHooks") is True:
            problems.append(f"{path} turns Copilot CLI's hooks off (disableAllHooks: true)")
    mcp_path = _mcp_json(where)
    try:
        servers = (_jsonc(mcp_path) or {}).get("mcpServers")
    except (ValueError, AttributeError):
        servers = None
    server = servers.get(SERVER) if isinstance(servers, dict) else None
    problems += mcp_problems(mcp_path, server, where)
    if where.repo and not _trusted(where):
        problems.append(
            f"Copilot CLI reads {where.repo}/.github/hooks and the repository's MCP servers only "
            "in a folder you trusted: start copilot there once and trust it"
        )
    return problems


def _trusted(where: Where) -> bool:
    """Whether the user trusted the repository (or a folder above it) in Copilot CLI."""
    try:
        config = _jsonc(copilot_home(where) / "config.json")
    except (OSError, ValueError):
        return False
    if not isinstance(config, dict) or where.repo is None:
        return False
    folders = [*(config.get("trustedFolders") or []), *(config.get("trusted_folders") or [])]
    repo = os.path.realpath(where.repo)
    for folder in folders:
        if isinstance(folder, str) and folder:
            trusted = os.path.realpath(os.path.expanduser(folder))
            if repo == trusted or repo.startswith(trusted.rstrip(os.sep) + os.sep):
                return True
    return False


CONNECTOR = Connector(
    agent=AGENT, targets=targets, check=check, folder=copilot_home, command="copilot"
)
