"""`librarian connect AGENT`: memory handed to an agent through its own extension points (its
hooks or plugin, and its MCP servers), per user or per repository; `--server URL` points them at
a team's server instead of this machine's, the token read from LIBRARIAN_MCP_TOKEN wherever the
agent runs, never written; `--undo` takes it out again, `--check` says for each agent found here
whether memory reaches it."""

import argparse
import os
import sys
from pathlib import Path

from librarian_dagster.core.commandline import AddParser

PLUGIN = Path(__file__).resolve().parents[2]
"""This checkout: the Claude Code plugin (.claude-plugin/) and the hooks every agent runs."""


def register(add_parser: AddParser) -> None:
    from librarian_dagster.core.capture.agents import CONNECTORS

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
    parser.add_argument(
        "--server",
        metavar="URL",
        help="a recall server elsewhere (https://host:3201): the hooks, plugins and MCP ask it, "
        "with the token in LIBRARIAN_MCP_TOKEN where the agent runs",
    )
    parser.add_argument("--undo", action="store_true", help="take Librarian out again")
    parser.add_argument(
        "--check", action="store_true", help="say whether memory reaches each agent"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="show what would change, and change nothing"
    )
    parser.set_defaults(handler=handle)


def _where(args: argparse.Namespace, server: str | None):
    from librarian_dagster.core.connect.agent import Where
    from librarian_dagster.core.settings import Settings

    settings = Settings.from_env()
    repo = args.repo.resolve() if args.repo else None
    host = "127.0.0.1" if settings.mcp_host in ("0.0.0.0", "::", "") else settings.mcp_host
    url = server or f"http://{host}:{settings.mcp_port}/mcp"
    return Where(Path.home(), repo, PLUGIN, url, dict(os.environ), remote=server is not None)


def _server(args: argparse.Namespace) -> str | None:
    """The MCP URL of `--server`, checked; SystemExit(2) saying why it cannot be one."""
    from librarian_dagster.core.connect.server import mcp_url_of

    if args.server is None:
        return None
    try:
        return mcp_url_of(args.server)
    except ValueError as exc:
        print(f"librarian connect: --server {args.server}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


class _Connection:
    """One agent's connection (per user or per repository): its manifest's name and folder, and
    the server it was made to (a line file beside the manifest; none for this machine's)."""

    def __init__(self, folder: Path, agent: str, repo: Path | None) -> None:
        from librarian_dagster.core.connect import files

        self.folder = folder
        self.name = agent + ("" if repo is None else "-" + files.sha_of(str(repo))[:12])
        self.record = folder / f"{self.name}.server"

    def made(self) -> bool:
        return (self.folder / f"{self.name}.json").is_file()

    def server(self) -> str | None:
        try:
            return self.record.read_text(encoding="utf-8").strip() or None
        except FileNotFoundError:
            return None

    def remember(self, server: str | None) -> None:
        if server is None:
            self.record.unlink(missing_ok=True)
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.record.write_text(server + "\n", encoding="utf-8")


def handle(args: argparse.Namespace) -> int:
    from librarian_dagster.core.capture.agents import CONNECTORS
    from librarian_dagster.core.connect import files
    from librarian_dagster.core.settings import Settings

    if args.check:
        return _check(args)
    if args.agent is None:
        print("librarian connect: name an agent (" + ", ".join(CONNECTORS) + "), or --check",
              file=sys.stderr)  # fmt: skip
        return 2
    server = _server(args)
    connection = _Connection(Settings.from_env().home / "connect", args.agent, args.repo and
                             args.repo.resolve())  # fmt: skip
    connector = CONNECTORS[args.agent]
    try:
        if args.undo:  # what was connected, unless --server says
            where = _where(args, server or connection.server())
            targets = connector.targets(where)
            done = files.undo(targets, connection.folder, connection.name)
            connection.remember(None)
        else:
            where = _where(args, server)
            targets = connector.targets(where)
            done = _connect(args, connection, where, targets)
    except files.ConfigError as exc:
        print(f"librarian connect: {exc}", file=sys.stderr)
        return 1
    _report(args, connection.folder, done, targets)
    if server and not args.undo:
        _remote_notes(where)
    return 0


def _connect(args: argparse.Namespace, connection: _Connection, where, targets: list) -> list:
    """Apply (or show) `targets`, the connection to `where`; one made to another server is taken
    out first, so that an agent never asks two (its hooks twice, its MCP entry left as it was)."""
    from librarian_dagster.core.capture.agents import CONNECTORS
    from librarian_dagster.core.connect import files

    connector = CONNECTORS[args.agent]
    server = where.mcp_url if where.remote else None
    before = connection.server()
    if args.dry_run:
        if connection.made() and before != server:
            print(f"note: the connection to {before or 'this machine'} would be taken out first")
        return files.pending(targets)
    taken: list = []
    if connection.made() and before != server:
        print(f"{args.agent}: taking out the connection to {before or 'this machine'} first")
        old = _where(args, before)
        taken = files.undo(connector.targets(old), connection.folder, connection.name)
    done = files.apply(targets, connection.folder, connection.name)
    connection.remember(server)
    return taken + done


def _report(args: argparse.Namespace, folder: Path, done: list, targets: list) -> None:
    from librarian_dagster.core.connect import files

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


def _remote_notes(where) -> None:
    """What the person connecting to a server elsewhere should know: where the token comes from,
    and that a prompt leaves this machine as a query."""
    from urllib.parse import urlsplit

    from librarian_dagster.core.connect.server import TOKEN_VARIABLE

    if not where.env.get(TOKEN_VARIABLE):
        print(f"note: {TOKEN_VARIABLE} is not set here: the agent sends it from its environment "
              "(a token of the server's: `librarian token add NAME --person P` there)")  # fmt: skip
    host = urlsplit(where.mcp_url).hostname or ""
    if where.mcp_url.startswith("http://") and host not in ("127.0.0.1", "localhost", "::1"):
        print(f"note: prompts and the token go to {host} unencrypted: give an https:// URL")


def _check(args: argparse.Namespace) -> int:
    from librarian_dagster.core.capture.agents import CONNECTORS
    from librarian_dagster.core.connect.server import TOKEN_VARIABLE, ask
    from librarian_dagster.core.settings import Settings

    given = _server(args)
    folder = Settings.from_env().home / "connect"
    repo = args.repo.resolve() if args.repo else None
    agents = [args.agent] if args.agent else list(CONNECTORS)
    missing, asked = 0, {}
    for agent in agents:
        connector = CONNECTORS[agent]
        where = _where(args, given or _Connection(folder, agent, repo).server())
        if args.agent is None and not connector.found(where):
            print(f"{agent}: not on this machine")
            continue
        problems = connector.check(where)
        if where.remote:  # the server itself, asked once as the hooks ask it
            if where.mcp_url not in asked:
                asked[where.mcp_url] = ask(where.mcp_url, where.env.get(TOKEN_VARIABLE, ""))
            problems += [asked[where.mcp_url]] if asked[where.mcp_url] else []
        via = f" via {where.mcp_url}" if where.remote else ""
        if problems:
            missing += 1
            print(f"{agent}: memory does not reach it{via}")
            for problem in problems:
                print("  - " + problem)
        else:
            print(f"{agent}: memory reaches it{via}")
    return 1 if missing else 0
