"""What an agent is to Librarian: one record, `Agent`, in the agent's own folder under
core/capture/ (its `AGENT`), listed once in core/capture/agents.py. Its reader (how its
transcripts are read), the folder it writes its sessions to (a setting, with its default), and
its connector (how `librarian connect` hands it memory). Everything that names the agents (the
settings, the help, the MCP instructions, `up`, `status`, the page, the tests) asks the list.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from librarian_dagster.core.capture.reader import Reader
from librarian_dagster.core.connect.agent import Connector

if TYPE_CHECKING:  # the readers stay standard library only: settings bring pydantic
    from librarian_dagster.core.settings import Settings

__all__ = ["Agent", "Folder"]


@dataclass(frozen=True)
class Folder:
    """Where an agent writes its sessions, as a setting: its variable, else `aliases`, else the
    agent's own home variable with the folder under it, else the default."""

    variable: str
    """LIBRARIAN_..._SESSIONS."""
    default: str
    about: str
    """What the folder holds, for docs/settings.md."""
    home: tuple[str, str] | None = None
    """The agent's own variable for its home, and the folder under it (`CODEX_HOME`,
    `sessions`), taken when `variable` is unset."""
    aliases: tuple[str, ...] = ()
    """Older names of `variable`, still read."""

    def path(self, settings: "Settings") -> Path:
        given = (settings.variable(name) for name in (self.variable, *self.aliases))
        value = next((v for v in given if v), None)
        if value is None and self.home and (home := settings.variable(self.home[0])):
            value = str(Path(home) / self.home[1])
        return Path(value or self.default).expanduser().absolute()


@dataclass(frozen=True)
class Agent:
    """One agent, stated in its own `__init__.py` in this same shape, the values its own: the
    records `duplicates` pairs across the agents' folders are kept, as data, not logic."""

    reader: Reader
    folder: Folder
    connector: Connector

    @property
    def name(self) -> str:
        """The agent's name in the store, the partition key, filters and every answer."""
        return self.reader.agent

    @property
    def label(self) -> str:
        """How people name the agent."""
        return self.reader.label
