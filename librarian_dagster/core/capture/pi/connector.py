"""Pi: Librarian's extension (plugins/pi/librarian.ts in this checkout), named in Pi's
`settings.json` "extensions": the user's (`~/.pi/agent/`, or $PI_CODING_AGENT_DIR) or a
repository's (`.pi/settings.json`, which Pi reads when it runs in that folder).

Pi has no command hooks: an extension, a TypeScript module Pi loads itself (jiti), gets its
events in process. Librarian's asks the recall server at `before_agent_start` (its context
comes as a custom message after the prompt) and after a file tool ran (`tool_result`: the
file's history ends the tool's result). Pi has no MCP client: the extension is all it gets.

For a server elsewhere (`--server`) the same settings name it under a key of Librarian's own,
`"librarian": {"server": URL}` (Pi keeps a key it does not know), which the extension reads, the
repository's over the user's; the token stays in the environment (LIBRARIAN_MCP_TOKEN).
"""

from pathlib import Path

from librarian_dagster.core.connect.agent import Connector, Where
from librarian_dagster.core.connect.files import Target, json_config, json_target

AGENT = "pi"
EXTENSION = Path("plugins") / "pi" / "librarian.ts"
"""The extension, in Librarian's checkout."""


def agent_dir(where: Where) -> Path:
    """Pi's folder of the user's settings: $PI_CODING_AGENT_DIR (`~` is the home), else
    `~/.pi/agent`."""
    named = (where.env.get("PI_CODING_AGENT_DIR") or "").strip()
    if not named:
        return where.home / ".pi" / "agent"
    if named == "~" or named.startswith("~/"):
        return where.home / named[2:]
    return Path(named)


def _settings(where: Where) -> Path:
    return (where.repo / ".pi" if where.repo else agent_dir(where)) / "settings.json"


def _entries(where: Where) -> list[tuple[tuple[str, ...], object]]:
    entries: list[tuple[tuple[str, ...], object]] = [
        (("extensions[]",), str(where.plugin / EXTENSION))
    ]
    if where.remote:
        entries.append((("librarian", "server"), where.mcp_url))
    return entries


def targets(where: Where) -> list[Target]:
    return [json_target(_settings(where), _entries(where))]


def check(where: Where) -> list[str]:
    problems = []
    if not (where.plugin / EXTENSION).is_file():
        problems.append(f"{where.plugin} holds no Pi extension ({EXTENSION})")
    path = _settings(where)
    settings, unread = json_config(path, "Pi reads no extension from it")
    if unread:
        return [*problems, unread]
    extensions = settings.get("extensions")
    if not isinstance(extensions, list) or str(where.plugin / EXTENSION) not in extensions:
        problems.append(f"not connected: {path} does not load Librarian's extension")
    named = settings.get("librarian")
    server = named.get("server") if isinstance(named, dict) else None
    if where.remote and server != where.mcp_url:
        problems.append(f"{path} sends the extension to {server}, not {where.mcp_url} "
                        "(librarian.server)")  # fmt: skip
    return problems


CONNECTOR = Connector(agent=AGENT, targets=targets, check=check, folder=agent_dir, command="pi")
