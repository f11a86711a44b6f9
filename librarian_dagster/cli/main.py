"""The `librarian` command: one subcommand per module, each imported only when it runs.

Every subcommand module in this package exposes `register(add_parser)`, which adds its parser and
sets `handler` (a callable taking the parsed args and returning an exit code). Heavy libraries
(dagster, mcp, google-genai) are imported inside the handlers, so `librarian parse` or
`librarian redact` start in well under a second.
"""

import argparse
import importlib
import sys

from librarian_dagster.core.commandline import Parser, report, user_errors

# Module names under librarian_dagster.cli, in the order their commands appear in --help.
COMMAND_MODULES = (
    "run",
    "backfill",
    "skip",
    "forget",
    "query",
    "evaluate",
    "parse",
    "redact",
    "library",
    "connect",
    "push",
    "tokens",
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="librarian",
        description="Memory that survives across sessions for AI coding agents.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"librarian_dagster.cli.{name}")
        module.register(subparsers.add_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM where a command turns it into one (ingest)
        print(f"librarian {args.command}: interrupted", file=sys.stderr)
        return 130
    except user_errors() as exc:  # evaluated when something is raised: see user_errors()
        return report(f"librarian {args.command}", exc)


if __name__ == "__main__":
    sys.exit(main())
