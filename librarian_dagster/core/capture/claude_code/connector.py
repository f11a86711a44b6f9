"""Claude Code: this checkout is a plugin marketplace (.claude-plugin/); connecting names it in
Claude Code's settings (`extraKnownMarketplaces`, a `directory` source) and turns its plugin on
(`enabledPlugins`), which brings the hooks and the MCP server (.mcp.json) together.

For a server elsewhere (`--server`) the same settings set LIBRARIAN_MCP_URL in their `env`, which
Claude Code puts in its own environment: the hooks ask that server, and .mcp.json's
`${LIBRARIAN_MCP_URL}` names it. The token stays in the user's environment (`${LIBRARIAN_MCP_TOKEN}`
in .mcp.json, read by the hooks at run time)."""

import json
from pathlib import Path

from librarian_dagster.core.connect.agent import Connector, Where
from librarian_dagster.core.connect.files import Target, json_target

AGENT = "claude-code"
MARKETPLACE = "librarian"
PLUGIN = f"librarian@{MARKETPLACE}"


def _settings(where: Where) -> Path:
    return (where.repo if where.repo else where.home) / ".claude" / "settings.json"


def _entries(where: Where) -> list[tuple[tuple[str, ...], object]]:
    source = {"source": {"source": "directory", "path": str(where.plugin)}}
    entries: list[tuple[tuple[str, ...], object]] = [
        (("extraKnownMarketplaces", MARKETPLACE), source),
        (("enabledPlugins", PLUGIN), True),
    ]
    if where.remote:
        entries.append((("env", "LIBRARIAN_MCP_URL"), where.mcp_url))
    return entries


def targets(where: Where) -> list[Target]:
    return [json_target(_settings(where), _entries(where))]


def check(where: Where) -> list[str]:
    problems = []
    if not (where.plugin / ".claude-plugin" / "marketplace.json").is_file():
        problems.append(f"{where.plugin} holds no plugin marketplace (.claude-plugin/)")
    settings = [where.home / ".claude" / "settings.json"]
    if where.repo:
        settings.append(where.repo / ".claude" / "settings.json")
    path = _settings(where)
    target = targets(where)[0]
    if not any(t.is_file() and target.add(t.read_bytes()) == t.read_bytes() for t in settings):
        problems.append(f"not connected: {path} does not turn the plugin {PLUGIN} on")
    elif where.remote and _server_of(settings) != where.mcp_url:
        problems.append(f"{path} sends the hooks and MCP to {_server_of(settings)}, not "
                        f"{where.mcp_url} (env.LIBRARIAN_MCP_URL)")  # fmt: skip
    return problems


def _server_of(settings: list[Path]) -> object:
    """The server the settings name (env.LIBRARIAN_MCP_URL), the repository's over the user's."""
    named: object = None
    for path in settings:
        try:
            env = json.loads(path.read_bytes()).get("env")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(env, dict) and "LIBRARIAN_MCP_URL" in env:
            named = env["LIBRARIAN_MCP_URL"]
    return named


CONNECTOR = Connector(
    agent=AGENT,
    targets=targets,
    check=check,
    folder=lambda where: where.home / ".claude",
    command="claude",
)
