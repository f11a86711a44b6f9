"""`librarian connect`: Librarian's hooks (or plugin) and MCP server written into each agent's
own configuration, shown, kept aside and taken back (files.py); one module per agent."""
