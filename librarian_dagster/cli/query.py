"""`librarian search` and `librarian history`: ask the memory from a terminal, as an agent would
over MCP."""

import argparse
import sys
from typing import TYPE_CHECKING

from librarian_dagster.core.capture.readers import AGENTS
from librarian_dagster.core.commandline import AddParser, iso_date

if TYPE_CHECKING:
    from librarian_dagster.core.settings import Settings
    from librarian_dagster.core.store.queries import SearchFilters
    from librarian_dagster.core.store.rows import SearchResult


def register(add_parser: AddParser) -> None:
    search = add_parser("search", help="search remembered sessions")
    search.add_argument("query")
    search.add_argument("--project")
    search.add_argument(
        "--agent", help=f"only sessions of this coding agent: one of {', '.join(AGENTS)}"
    )
    search.add_argument("--person", help="only sessions of this person (who pushed them)")
    search.add_argument("--domain", help="only sessions of this domain, e.g. technical")
    search.add_argument("--tag", action="append", default=[], help="repeatable: all must match")
    search.add_argument(
        "--any-tag", action="append", default=[], help="repeatable: at least one must match"
    )
    search.add_argument("--branch", help="only sessions on this git branch")
    search.add_argument("--since", type=iso_date, help="only sessions that ended at or after (ISO)")
    search.add_argument(
        "--until", type=iso_date, help="only sessions that began at or before (ISO)"
    )
    search.add_argument("--limit", type=int, default=5)
    search.add_argument(
        "--include-private",
        action="store_true",
        help="also sessions of the private domain (left out by default)",
    )
    search.add_argument(
        "--json", action="store_true", help="the MCP tool search_chunks' result, as JSON"
    )
    search.add_argument(
        "--local",
        action="store_true",
        help="search in this process even when a recall server is running (by default one "
        "at LIBRARIAN_MCP_HOST:LIBRARIAN_MCP_PORT answers, with the postings it holds)",
    )
    search.set_defaults(handler=cmd_search)

    history = add_parser(
        "history", help="the earlier sessions that changed a file, and why (file_history)"
    )
    history.add_argument("path", help="the file, absolute or relative to this folder")
    history.add_argument("--task", help="what you are doing: the sessions nearest it come next")
    history.add_argument("--limit", type=int, default=3)
    history.add_argument(
        "--include-private",
        action="store_true",
        help="also sessions of the private domain (left out by default)",
    )
    history.add_argument("--json", action="store_true", help="the MCP tool's result, as JSON")
    history.add_argument(
        "--local",
        action="store_true",
        help="look it up in this process even when a recall server is running",
    )
    history.set_defaults(handler=cmd_history)


def cmd_search(args: argparse.Namespace) -> int:
    # Imported here, not at parser build: pydantic and the digest cost every command ~0.4 s.
    from librarian_dagster.core.assembly.providers import configured_embedder
    from librarian_dagster.core.assembly.store import open_store
    from librarian_dagster.core.capture.readers import UnknownAgent, check_agent
    from librarian_dagster.core.digest.schema import DOMAINS, PRIVATE_DOMAIN
    from librarian_dagster.core.recall.answer import (
        MAX_RESULTS,
        EmbeddingSpaceMismatch,
        recall,
    )
    from librarian_dagster.core.recall.ranking import Boosts
    from librarian_dagster.core.settings import Settings
    from librarian_dagster.core.store.queries import SearchFilters

    if not 1 <= args.limit <= MAX_RESULTS:
        print(f"librarian search: --limit must be between 1 and {MAX_RESULTS}", file=sys.stderr)
        return 2
    if args.domain is not None and args.domain not in DOMAINS:
        print(f"librarian search: --domain must be one of {', '.join(DOMAINS)}", file=sys.stderr)
        return 2
    if args.domain == PRIVATE_DOMAIN and not args.include_private:
        print("librarian search: --domain private needs --include-private", file=sys.stderr)
        return 2
    try:
        agent = check_agent(args.agent) if args.agent is not None else None
    except UnknownAgent as exc:
        print(f"librarian search: --agent: {exc}", file=sys.stderr)
        return 2
    filters = SearchFilters(
        project=args.project,
        agent=agent,
        person=args.person,
        domain=args.domain,
        tags=tuple(args.tag),
        any_tags=tuple(args.any_tag),
        git_branch=args.branch,
        since=args.since,
        until=args.until,
        include_private=args.include_private,
    )
    settings = Settings.from_env()
    result = None if args.local else _from_server(settings, args.query, filters, args.limit)
    if result is not None:
        return _print(result, args.json, settings.own_person)
    try:
        with open_store(settings) as store:
            result = recall(
                store.search,
                configured_embedder(settings),
                args.query,
                filters,
                args.limit,
                min_relevance=settings.recall_threshold,
                boosts=Boosts.of(settings),
            )
    except EmbeddingSpaceMismatch as exc:
        print(f"librarian search: {exc}", file=sys.stderr)
        return 1
    return _print(result, args.json, settings.own_person)


def _from_server(
    settings: "Settings", query: str, filters: "SearchFilters", limit: int
) -> "SearchResult | None":
    """The running recall server's answer; None when there is none, or it cannot answer this
    search as this process would (said on stderr when it refused)."""
    from librarian_dagster.core.recall.remote import ServerRefused, ask_server, served

    if not served(filters, limit):
        return None
    try:
        return ask_server(settings, query, filters, limit)
    except ServerRefused as exc:
        print(
            f"librarian search: the recall server did not answer ({exc}); searching here",
            file=sys.stderr,
        )
        return None


def _print(result: "SearchResult", as_json: bool, own_person: str) -> int:
    from librarian_dagster.core.recall.cards import render_cards

    if as_json:
        print(result.model_dump_json(indent=2))
    elif not result.results:
        print(result.note or "nothing relevant")
    else:
        print(render_cards(result.results, own_person))
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    import os
    import subprocess

    from librarian_dagster.core.assembly.providers import configured_embedder
    from librarian_dagster.core.assembly.store import open_store
    from librarian_dagster.core.recall.cards import render_history
    from librarian_dagster.core.recall.history import (
        GIT_TIMEOUT_S,
        MAX_SESSIONS,
        BadFileQuestion,
        FileQuestion,
        file_history,
    )
    from librarian_dagster.core.recall.remote import ServerRefused, ask_history
    from librarian_dagster.core.settings import Settings

    if not 1 <= args.limit <= MAX_SESSIONS:
        print(f"librarian history: --limit must be between 1 and {MAX_SESSIONS}", file=sys.stderr)
        return 2
    cwd = os.getcwd()
    path = os.path.abspath(args.path)
    found = subprocess.run(
        ["git", "-C", os.path.dirname(path), "rev-parse", "--show-toplevel"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    root = found.stdout.strip() if found.returncode == 0 else None
    question = FileQuestion(
        path=path, cwd=cwd, root=root, task=args.task, limit=args.limit,
        include_private=args.include_private,
    )  # fmt: skip
    settings = Settings.from_env()
    result = None
    if not (args.local or args.include_private):
        try:
            result = ask_history(settings, question)
        except ServerRefused as exc:
            print(
                f"librarian history: the recall server did not answer ({exc}); looking here",
                file=sys.stderr,
            )
    if result is None:
        try:
            with open_store(settings) as store:
                embedder = configured_embedder(settings) if args.task else None
                # A terminal can wait for git longer than a hook (a big repository's history).
                result = file_history(
                    store.files, embedder, question, git_timeout=10 * GIT_TIMEOUT_S
                )
        except BadFileQuestion as exc:
            print(f"librarian history: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(result.model_dump_json(indent=2))
    elif not result.results:
        print(f"{result.path}: {result.note}")
    else:
        print(render_history(result, settings.own_person))
    return 0
