"""`python -m mcp_server [--transport http|stdio] [--host H] [--port P] [--no-database-watch]`:
the recall server alone.

The same server as `librarian mcp`, started without the `librarian` command.
"""

import sys
import warnings
from typing import get_args

# Before the embedded server's package is imported: its platformdirs fallback warning (no
# XDG_RUNTIME_DIR) is harmless, and `librarian` silences it the same way (cli/main.py).
warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")

from librarian_dagster.core.commandline import (  # noqa: E402
    Parser,
    imports_uncollected,
    port,
    report,
    user_errors,
)

with imports_uncollected():
    from librarian_dagster.core.settings import Settings
    from mcp_server.serving import Transport, serve


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m mcp_server", description=__doc__)
    parser.add_argument("--transport", choices=get_args(Transport), default="http")
    parser.add_argument("--host", help="default: LIBRARIAN_MCP_HOST or 127.0.0.1")
    parser.add_argument("--port", type=port, help="default: LIBRARIAN_MCP_PORT or 3201")
    parser.add_argument(
        "--no-database-watch",
        action="store_true",
        help="leave the database to the process that started this one (`librarian up`)",
    )
    args = parser.parse_args(argv)
    try:
        serve(
            Settings.from_env(), args.transport, args.host, args.port,
            watch_database=not args.no_database_watch,
        )  # fmt: skip
    except KeyboardInterrupt:
        return 130
    except user_errors() as exc:
        return report(parser.prog, exc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
