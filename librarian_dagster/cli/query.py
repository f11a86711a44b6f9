"""`librarian search`: ask the memory from a terminal, as an agent would over MCP."""

import argparse
import json
import sys

from librarian_dagster.core.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    search = subparsers.add_parser("search", help="search remembered sessions")
    search.add_argument("query")
    search.add_argument("--project")
    search.add_argument("--domain")
    search.add_argument("--tag", action="append", default=[], help="repeatable: all must match")
    search.add_argument("--limit", type=int, default=5)
    search.add_argument("--json", action="store_true", help="machine-readable output")
    search.set_defaults(handler=cmd_search)


def cmd_search(args: argparse.Namespace) -> int:
    from librarian_dagster.core.embeddings import local_embedder
    from librarian_dagster.core.store import SearchFilters, open_store

    if not 1 <= args.limit <= 50:
        print("librarian search: --limit must be between 1 and 50", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    store = open_store(settings)
    embedder = local_embedder()
    filters = SearchFilters(project=args.project, domain=args.domain, tags=tuple(args.tag))
    hits = store.search(
        args.query, embedder.embed_query(args.query), embedder.model_name, filters, args.limit
    )
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "session_id": h.session_id,
                        "score": h.score,
                        "section": h.section,
                        "text": h.text,
                        "project": h.project,
                        "date": h.date.isoformat() if h.date else None,
                        "summary": h.summary,
                    }
                    for h in hits
                ],
                indent=2,
            )
        )
        return 0
    if not hits:
        print("no matching memories")
        return 0
    for rank, h in enumerate(hits, 1):
        date = h.date.date().isoformat() if h.date else "?"
        print(f"{rank}. [{h.project} {date} {h.section}] {h.text}")
        print(f"   session {h.session_id}: {h.summary}")
    return 0
