"""`librarian connect AGENT`: memory handed to an agent through its own extension points (its
hooks or plugin, and its MCP servers), per user or per repository; `--undo` takes it out again,
`--check` says for each agent found here whether memory reaches it."""

import argparse
import os
import sys
from pathlib import Path

from librarian_dagster.core.commandline import AddParser

PLUGIN = Path(__file__).resolve().parents[2]
"""This checkout: the Claude Code plugin (.claude-plugin/) and the hooks every agent runs."""


def register(add_parser: AddParser) -> None:
    from librarian_dagster.core.connect.connectors import CONNECTORS

    parser = add_parser(
        "connect",
        help="hand memory to an agent: its hooks or plugin, and MCP",
        description=__doc__,
    )
    parser.add_argument("agent", nargs="?", choices=sorted(CONNECTORS), help="the agent")
    parser.add_argument(
        "--repo",
        type=Path,
        metavar="PATH",
        help="connect in this repository's own settings (shared with whoever clones it) rather "
        "than in yours",
    )
    parser.add_argument("--undo", action="store_true", help="take Librarian out again")
    parser.add_argument(
        "--check", action="store_true", help="say whether memory reaches each agent"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would change, and change nothing"
    )
    parser.set_defaults(handler=handle)


def _where(args: argparse.Namespace):
    from librarian_dagster.core.connect.agent import Where
    from librarian_dagster.core.settings import Settings

    settings = Settings.from_env()
    repo = args.repo.resolve() if args.repo else None
    host = "127.0.0.1" if settings.mcp_host in ("0.0.0.0", "::", "") else settings.mcp_host
    url = f"http://{host}:{settings.mcp_port}/mcp"
    return Where(Path.home(), repo, PLUGIN, url, dict(os.environ)), settings


def handle(args: argparse.Namespace) -> int:
    from librarian_dagster.core.connect import files
    from librarian_dagster.core.connect.connectors import CONNECTORS

    if args.check:
        return _check(args)
    if args.agent is None:
        print("librarian connect: name an agent (" + ", ".join(CONNECTORS) + "), or --check",
              file=sys.stderr)  # fmt: skip
        return 2
    where, settings = _where(args)
    connector = CONNECTORS[args.agent]
    folder = settings.home / "connect"
    name = args.agent + ("" if where.repo is None else "-" + files.sha_of(str(where.repo))[:12])
    targets = connector.targets(where)
    try:
        if args.undo:
            done = files.undo(targets, folder, name)
        elif args.dry_run:
            done = files.pending(targets)
        else:
            done = files.apply(targets, folder, name)
    except files.ConfigError as exc:
        print(f"librarian connect: {exc}", file=sys.stderr)
        return 1
    for change in done:
        if change.how != "unchanged":
            sys.stdout.write(files.diff(change.path, change.before, change.after))
    for target in targets:
        for note in target.notes:
            print("note: " + note)
    changed = [c for c in done if c.how != "unchanged"]
    verb = "would change" if args.dry_run else "changed"
    if args.undo:
        print(f"{args.agent}: Librarian taken out of {len(changed)} files" if changed
              else f"{args.agent}: nothing of Librarian's to take out")  # fmt: skip
    elif changed:
        print(f"{args.agent}: {verb} {len(changed)} files (backups in {folder})")
    else:
        print(f"{args.agent}: already connected, nothing changed")
    return 0


def _check(args: argparse.Namespace) -> int:
    from librarian_dagster.core.connect.connectors import CONNECTORS

    where, _ = _where(args)
    agents = [args.agent] if args.agent else list(CONNECTORS)
    missing = 0
    for agent in agents:
        connector = CONNECTORS[agent]
        if args.agent is None and not connector.found(where):
            print(f"{agent}: not on this machine")
            continue
        problems = connector.check(where)
        if problems:
            missing += 1
            print(f"{agent}: memory does not reach it")
            for problem in problems:
                print("  - " + problem)
        else:
            print(f"{agent}: memory reaches it")
    return 1 if missing else 0
