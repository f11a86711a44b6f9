"""`python -m mcp_server` = `librarian mcp`."""

import sys

from librarian_dagster.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["mcp", *sys.argv[1:]]))
