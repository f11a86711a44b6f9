"""What the settings build: the digester and embedder they name, the opened store.

The one place that puts the layers below together; the Dagster resources, the command line and
the MCP server take their objects from here.
"""
