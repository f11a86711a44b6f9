"""What the settings build: the digester and the embedder they name, and the opened store with
its retriever. The one place that puts the layers below together; the Dagster resources, the
command line and the MCP server take their objects from here."""
