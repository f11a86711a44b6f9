"""`librarian skip`: keep sessions out of the memory, by id or by last activity before a date."""

import argparse
import sys
from typing import TYPE_CHECKING

from librarian_dagster.core.commandline import AddParser, iso_date

if TYPE_CHECKING:
    from librarian_dagster.core.store.ledger import Ledger
    from librarian_dagster.core.store.memories import Memories


def register(add_parser: AddParser) -> None:
    parser = add_parser(
        "skip",
        help="never ingest these sessions (or those last active before a date); list or undo",
    )
    parser.add_argument("session_ids", nargs="*", metavar="SESSION_ID")
    parser.add_argument(
        "--before",
        type=iso_date,
        metavar="DATE",
        help="skip every session whose files were last changed before this date (ISO, UTC)",
    )
    parser.add_argument("--list", action="store_true", help="print the skip list")
    parser.add_argument(
        "--undo",
        nargs="+",
        metavar="ENTRY",
        help="take entries off the list: a session id, or `before:DATE` as --list prints it",
    )
    parser.set_defaults(handler=cmd_skip)


def cmd_skip(args: argparse.Namespace) -> int:
    from librarian_dagster.core.assembly.store import open_store
    from librarian_dagster.core.capture.skips import valid_session_id
    from librarian_dagster.core.settings import Settings

    wanted = bool(args.session_ids) + (args.before is not None) + args.list + bool(args.undo)
    if wanted != 1:
        print(
            "librarian skip: give session ids, or one of --before DATE, --list, --undo ENTRY",
            file=sys.stderr,
        )
        return 2
    bad = [s for s in args.session_ids if not valid_session_id(s)]
    if bad:
        print(f"librarian skip: not a session id: {bad[0]!r}", file=sys.stderr)
        return 2
    with open_store(Settings.from_env()) as store:
        return _skip(args, store.ledger, store.memories)


def _skip(args: argparse.Namespace, ledger: "Ledger", memories: "Memories") -> int:
    if args.list:
        entries = ledger.skip_entries()
        if not entries:
            print("the skip list is empty")
        for entry in entries:
            print(f"{entry.entry}  added {entry.added_at:%Y-%m-%d %H:%M} UTC")
        return 0
    if args.undo:
        missing = [e for e in args.undo if not ledger.remove_skip(e)]
        for entry in args.undo:
            if entry not in missing:
                print(f"removed {entry}: the sensor and ingest take it again")
        for entry in missing:
            print(f"librarian skip: {entry!r} is not on the skip list", file=sys.stderr)
        return 1 if missing else 0
    if args.before is not None:
        entry = ledger.skip_before(args.before)
        print(f"added {entry}: sessions last active before then are not ingested")
        return 0
    known = memories.remembered(args.session_ids)
    ledger.skip_sessions(args.session_ids)
    for session_id in args.session_ids:
        note = "" if session_id in known else " (not seen yet: skipped when it appears)"
        print(f"added {session_id}{note}")
    if known:
        # Skipping stops new work; it does not forget what is stored.
        print(f"{len(known)} already remembered: their memories stay until deleted")
    return 0
