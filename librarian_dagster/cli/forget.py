"""`librarian forget`: take sessions out of the memory, everywhere the product keeps them."""

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING

from librarian_dagster.core.commandline import AddParser, iso_date

if TYPE_CHECKING:
    from collections.abc import Sequence

    from librarian_dagster.core.store.memories import Memories
    from librarian_dagster.core.store.rows import SessionInfo

_SHOWN = 20  # sessions listed before asking; the rest are counted


def register(add_parser: AddParser) -> None:
    parser = add_parser(
        "forget",
        help="remove sessions from the memory, the staged files and Dagster's runs, and skip "
        "them from now on",
        description="Remove sessions everywhere Librarian keeps them: the memory and its chunks, "
        "the staged files, the Dagster runs that materialized them and their partitions. They "
        "go on the skip list, so they are never ingested again (`librarian skip --undo ID` "
        "lets one back). A running recall server stops returning them at once.",
    )
    parser.add_argument("session_ids", nargs="*", metavar="SESSION_ID")
    parser.add_argument("--project", help="every session of this project")
    parser.add_argument(
        "--before", type=iso_date, metavar="DATE", help="every session that ended before DATE"
    )
    parser.add_argument(
        "--pending",
        action="store_true",
        help="only finish what forgetting from the page left: Dagster's runs and partitions of "
        "the sessions it forgot (`librarian up`'s sessions sensor does it at its next tick)",
    )
    parser.add_argument("--yes", action="store_true", help="do not ask first")
    parser.set_defaults(handler=cmd_forget)


def cmd_forget(args: argparse.Namespace) -> int:
    from librarian_dagster.core.assembly.store import open_store
    from librarian_dagster.core.capture.skips import valid_session_id
    from librarian_dagster.core.settings import Settings

    chosen_by = bool(args.session_ids) + (args.project is not None) + (args.before is not None)
    if chosen_by + args.pending != 1:
        print("librarian forget: give session ids, or one of --project P, --before DATE, "
              "--pending", file=sys.stderr)  # fmt: skip
        return 2
    if args.pending:
        from librarian_dagster.forget import forget_pending

        print(forget_pending(Settings.from_env()).said())
        return 0
    bad = [s for s in args.session_ids if not valid_session_id(s)]
    if bad:
        print(f"librarian forget: not a session id: {bad[0]!r}", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    with open_store(settings) as store:
        chosen = _chosen(args, store.memories)
        if not chosen:
            print("no remembered session matches: nothing to forget")
            return 0
    if not args.yes and not _confirmed(chosen, args.session_ids):
        return 1
    from librarian_dagster.forget import forget_everywhere

    done = forget_everywhere(chosen, settings)
    print(done.said())
    if done.others:
        print(done.others_said() + ": " + _listed(done.others))
    return 0


def _chosen(args: argparse.Namespace, memories: "Memories") -> list[str]:
    """The session ids to forget: as given (remembered or not: a given id is also skipped), or
    the remembered sessions of a project or ended before a date."""
    if args.session_ids:
        return list(dict.fromkeys(args.session_ids))
    from librarian_dagster.core.store.queries import SearchFilters

    chosen: list[str] = []
    cursor = None
    filters = SearchFilters(project=args.project, include_private=True)
    while True:
        page = memories.list_sessions(filters, 500, cursor)
        chosen += [s.session_id for s in page.sessions if _matches(s, args.before)]
        if page.next_cursor is None:
            return chosen
        cursor = page.next_cursor


def _matches(session: "SessionInfo", before: datetime | None) -> bool:
    if before is None:
        return True
    ended = session.ended_at or session.started_at
    return ended is not None and ended < before


def _listed(session_ids: "Sequence[str]") -> str:
    more = len(session_ids) - _SHOWN
    return ", ".join(session_ids[:_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _confirmed(chosen: list[str], given: list[str]) -> bool:
    if not given or len(chosen) > 1:
        print(f"{len(chosen)} session(s) to forget: {_listed(chosen)}")
    if not sys.stdin.isatty():
        print("librarian forget: add --yes to forget them (nothing was changed)", file=sys.stderr)
        return False
    answer = input(f"Forget {len(chosen)} session(s) everywhere? This cannot be undone [y/N] ")
    if answer.strip().lower() in ("y", "yes"):
        return True
    print("nothing was changed")
    return False
