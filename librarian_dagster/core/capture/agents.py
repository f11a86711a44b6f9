"""Every agent Librarian reads and hands memory to, one line each (core/capture/agent.py says
what a line holds). Adding an agent is a folder under core/capture/ with its `AGENT`, and a line
here; everything that names the agents asks this list.

The order is the one people see the agents listed in, and the one a file is offered to their
readers in (each claims only its own agent's first records).
"""

from pathlib import Path
from typing import TYPE_CHECKING

from librarian_dagster.core.capture import claude_code, codex, copilot, gemini, opencode, pi
from librarian_dagster.core.capture.agent import Agent
from librarian_dagster.core.connect.agent import Connector

if TYPE_CHECKING:  # as readers.py, standard library only
    from librarian_dagster.core.settings import Settings

__all__ = ["AGENTS", "CONNECTORS", "folders"]

AGENTS: dict[str, Agent] = {
    agent.name: agent
    for agent in (
        claude_code.AGENT,
        codex.AGENT,
        gemini.AGENT,
        opencode.AGENT,
        copilot.AGENT,
        pi.AGENT,
    )
}


CONNECTORS: dict[str, Connector] = {name: agent.connector for name, agent in AGENTS.items()}
"""What `librarian connect` configures, agent by agent."""


def folders(settings: "Settings") -> dict[str, Path]:
    """Each agent's name -> the folder it writes its sessions to, as `settings` say."""
    return {name: agent.folder.path(settings) for name, agent in AGENTS.items()}
