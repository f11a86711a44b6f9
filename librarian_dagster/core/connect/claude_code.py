"""Claude Code: this checkout is a plugin marketplace (.claude-plugin/); connecting names it in
Claude Code's settings (`extraKnownMarketplaces`, a `directory` source) and turns its plugin on
(`enabledPlugins`), which brings the hooks and the MCP server (.mcp.json) together."""

import shutil
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
    return [
        (("extraKnownMarketplaces", MARKETPLACE), source),
        (("enabledPlugins", PLUGIN), True),
    ]


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
    return problems


def found(where: Where) -> bool:
    return (where.home / ".claude").is_dir() or shutil.which("claude") is not None


CONNECTOR = Connector(agent=AGENT, targets=targets, check=check, found=found)
