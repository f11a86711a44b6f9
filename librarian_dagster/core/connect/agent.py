"""What connecting an agent is: the files it reads its hooks (or plugin) and MCP servers from,
what Librarian adds there, and how to tell that memory reaches it. Each agent's folder under
core/capture/ defines its `CONNECTOR` (`connector.py`), part of its record there.

Standard library only.
"""

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from librarian_dagster.core.connect.files import Target

__all__ = ["SERVER", "Connector", "Where", "mcp_problems", "run_hook"]

SERVER = "librarian"
"""The name of Librarian's MCP server in every agent's configuration."""


@dataclass(frozen=True)
class Where:
    """Where a connection is made, and what it points at."""

    home: Path
    """The user's home folder (the agents' user settings are under it)."""
    repo: Path | None
    """A repository to connect in (its own settings, shared with whoever clones it); None for
    the user's settings, which every repository of theirs gets."""
    plugin: Path
    """Librarian's checkout: the Claude Code plugin's folder, with its hooks/."""
    mcp_url: str
    """The recall server's MCP endpoint."""
    env: Mapping[str, str]
    remote: bool = False
    """`mcp_url` is a server elsewhere (`--server`, core/connect/server.py): the hooks and
    plugins are told it in the configuration too (on this machine they find it themselves), and
    its MCP entry always sends the token, read from the environment at run time."""

    @property
    def hooks(self) -> Path:
        return self.plugin / "hooks"

    @property
    def sends_token(self) -> bool:
        """Whether the MCP entry carries an Authorization header read from LIBRARIAN_MCP_TOKEN: a
        team's server wants one even where this shell has none yet; this machine's only when
        tokens are in use."""
        return self.remote or bool(self.env.get("LIBRARIAN_MCP_TOKEN"))


def run_hook(where: Where, script: str, agent: str) -> str:
    """The command an agent's hook configuration runs: the plugin's own runner, which finds a
    Python once and passes the agent's name to the script; for a server elsewhere, `--server=`
    its URL first (the runner hands it to the hook as LIBRARIAN_MCP_URL). The URL holds nothing a
    shell would read (server.mcp_url_of), so the line runs the same split by a shell or not."""
    server = f"--server={where.mcp_url} " if where.remote else ""
    return f'sh "{where.hooks / "run-hook.sh"}" {server}{script} {agent}'


def mcp_problems(path: Path, server: object, where: Where, url_key: str = "url") -> list[str]:
    """Why the MCP server entry `server` read from `path` (None where there is none) would not
    reach `where`'s server, said the same way for every agent; `url_key`: the agent's word."""
    if not isinstance(server, dict):
        return [f"{path} names no MCP server {SERVER!r}"]
    if where.remote and server.get(url_key) != where.mcp_url:
        return [f"{path}: the MCP server {SERVER!r} is {server.get(url_key)}, not {where.mcp_url}"]
    return []


@dataclass(frozen=True)
class Connector:
    """Each agent's `connector.py` gives its `targets` and its `check` and ends with its
    `CONNECTOR`, in the same shape, the files and keys its own: the pairs `duplicates` finds
    among them are kept. What every check says alike is said once here (`mcp_problems`)."""

    agent: str
    """As core/capture/readers.py names it."""
    targets: Callable[[Where], list[Target]]
    """The files connecting changes, each with what is added to it."""
    check: Callable[[Where], list[str]]
    """Why memory would not reach the agent, as it is configured now; empty when it does."""
    folder: Callable[[Where], Path]
    """The agent's own folder of settings, there once it has run."""
    command: str
    """Its command, on PATH where it is installed."""

    def found(self, where: Where) -> bool:
        """Whether the agent is on this machine: its folder, or its command on PATH."""
        return self.folder(where).is_dir() or shutil.which(self.command) is not None
