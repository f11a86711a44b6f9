"""The agents `librarian connect` configures, in the order people see them listed. Adding one is
a module beside this with its `CONNECTOR`, and a line here."""

from librarian_dagster.core.connect import claude_code, codex, copilot, gemini, opencode, pi
from librarian_dagster.core.connect.agent import Connector

__all__ = ["CONNECTORS"]

CONNECTORS: dict[str, Connector] = {
    connector.agent: connector
    for connector in (
        claude_code.CONNECTOR,
        codex.CONNECTOR,
        gemini.CONNECTOR,
        opencode.CONNECTOR,
        copilot.CONNECTOR,
        pi.CONNECTOR,
    )
}
