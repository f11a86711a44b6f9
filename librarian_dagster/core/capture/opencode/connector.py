"""OpenCode: Librarian's plugin (plugins/opencode/librarian.js in this checkout) and its MCP
server, both in `opencode.json`: the user's (`~/.config/opencode/`, under $XDG_CONFIG_HOME when
that is set) or a repository's (at its top, shared with whoever clones it).

OpenCode has no command hooks: a plugin, a JavaScript module it imports, gets its events in
process. Librarian's asks the recall server at `chat.message` (its context joins the prompt's
message as a synthetic part) and after a file tool ran (`tool.execute.after`: the file's
history is appended to the tool's output). The plugin is named by its file URL in "plugin", a
list OpenCode concatenates over every config file it reads; the MCP server is a "remote" one
under "mcp". The token, when there is one, is left to OpenCode to read from the environment
(`{env:LIBRARIAN_MCP_TOKEN}`): never written into the file. For a server elsewhere
(`--server`) the plugin's entry carries it as the plugin's option (`[file URL, {"server": URL}]`),
which the plugin asks in place of LIBRARIAN_MCP_URL.

OpenCode reads the user's `config.json`, `opencode.json` and `opencode.jsonc` in that folder,
merged (it writes an `opencode.jsonc` of its own on its first start when there is none of
them): Librarian writes `opencode.json`, the one of them that is plain JSON.
"""

from pathlib import Path

from librarian_dagster.core.connect.agent import SERVER, Connector, Where, mcp_problems
from librarian_dagster.core.connect.files import Target, json_config, json_target

AGENT = "opencode"
PLUGIN = Path("plugins") / "opencode" / "librarian.js"
"""The plugin, in Librarian's checkout."""


def config_dir(where: Where) -> Path:
    """OpenCode's folder of the user's settings: `$XDG_CONFIG_HOME/opencode`, else
    `~/.config/opencode` (xdg-basedir's rule: a relative XDG_CONFIG_HOME is ignored)."""
    named = (where.env.get("XDG_CONFIG_HOME") or "").strip()
    base = Path(named) if named and Path(named).is_absolute() else where.home / ".config"
    return base / "opencode"


def _config(where: Where) -> Path:
    return (where.repo if where.repo else config_dir(where)) / "opencode.json"


def plugin_url(where: Where) -> str:
    return (where.plugin / PLUGIN).as_uri()


def plugin_entry(where: Where) -> object:
    """The plugin as "plugin" lists it: its file URL; for a server elsewhere, with that server
    as the plugin's option (OpenCode hands a `[spec, options]` entry's options to the plugin)."""
    if where.remote:
        return [plugin_url(where), {"server": where.mcp_url}]
    return plugin_url(where)


def _entries(where: Where) -> list[tuple[tuple[str, ...], object]]:
    server: dict[str, object] = {"type": "remote", "url": where.mcp_url}
    if where.sends_token:
        server["headers"] = {"Authorization": "Bearer {env:LIBRARIAN_MCP_TOKEN}"}
    return [(("plugin[]",), plugin_entry(where)), (("mcp", SERVER), server)]


def targets(where: Where) -> list[Target]:
    return [json_target(_config(where), _entries(where))]


def check(where: Where) -> list[str]:
    problems = []
    if not (where.plugin / PLUGIN).is_file():
        problems.append(f"{where.plugin} holds no OpenCode plugin ({PLUGIN})")
    path = _config(where)
    config, unread = json_config(path, "Librarian cannot tell what OpenCode reads in it")
    if unread:
        return [*problems, unread]
    plugins = config.get("plugin")
    if not isinstance(plugins, list) or plugin_entry(where) not in plugins:
        whose = f" with the server {where.mcp_url}" if where.remote else ""
        problems.append(f"not connected: {path} does not load Librarian's plugin{whose}")
    servers = config.get("mcp")
    server = servers.get(SERVER) if isinstance(servers, dict) else None
    problems += mcp_problems(path, server, where)
    if isinstance(server, dict) and server.get("enabled") is False:
        problems.append(f"{path} turns the MCP server {SERVER!r} off (enabled = false)")
    return problems


CONNECTOR = Connector(
    agent=AGENT, targets=targets, check=check, folder=config_dir, command="opencode"
)
