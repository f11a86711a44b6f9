"""Handing memory to each agent: its hooks (or plugin) and MCP server in its own configuration,
shown, kept aside and taken back.

One module per agent defines its `CONNECTOR` (agent.py says what one is); connectors.py lists
them; files.py changes the files.
"""
