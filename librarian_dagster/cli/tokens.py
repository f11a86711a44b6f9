"""`librarian token add | list | revoke`: the recall server's bearer tokens."""

import argparse
import sys

from librarian_dagster.core.commandline import AddParser
from librarian_dagster.core.service import tokens


def register(add_parser: AddParser) -> None:
    token = add_parser("token", help="make, list and revoke the recall server's bearer tokens")
    actions = token.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser(
        "add", help="make a token; it is printed once, as the last line, and never again"
    )
    add.add_argument("name", help="who or what will use it, e.g. laptop or claude-code")
    add.add_argument(
        "--scope",
        choices=tokens.SCOPES,
        help="private: also the private domain; forget: that, and forgetting sessions from the "
        "recall server's page (default read: every domain but private)",
    )
    add.add_argument(
        "--person",
        help="whose token it is: the sessions it pushes are that person's, and it reads that "
        "person's private sessions (default: the server's own person)",
    )
    add.set_defaults(handler=cmd_add)
    listing = actions.add_parser("list", help="names, scopes and dates (never the tokens)")
    listing.set_defaults(handler=cmd_list)
    revoke = actions.add_parser("revoke", help="delete a token; a running server refuses it next")
    revoke.add_argument("name")
    revoke.set_defaults(handler=cmd_revoke)


def cmd_add(args: argparse.Namespace) -> int:
    from librarian_dagster.core.settings import Settings

    path = Settings.from_env().tokens_file
    try:
        token, entry = tokens.add(path, args.name, args.scope, args.person)
    except (tokens.TokenFileError, OSError) as exc:
        return _fail(exc)
    of = f" of {entry.person}" if entry.person else ""
    print(
        f"token {entry.name!r}{of} with scopes {', '.join(entry.scopes)} saved (hashed) in {path}"
    )
    print("It is shown once, below: the file keeps only a hash of it.")
    print(token)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from librarian_dagster.core.settings import Settings

    path = Settings.from_env().tokens_file
    try:
        entries = tokens.load(path)
    except tokens.TokenFileError as exc:
        return _fail(exc)
    if not entries:
        print(f"no tokens in {path}")
        return 0
    width = max(len(e.name) for e in entries)
    people = max(len(e.person or "-") for e in entries)
    for e in entries:
        created = e.created.isoformat(timespec="seconds")
        person = e.person or "-"
        print(f"{e.name:<{width}}  {person:<{people}}  {','.join(e.scopes):<12}  {created}")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    from librarian_dagster.core.settings import Settings

    path = Settings.from_env().tokens_file
    try:
        tokens.revoke(path, args.name)
    except (tokens.TokenFileError, OSError) as exc:
        return _fail(exc)
    print(f"revoked {args.name!r}")
    return 0


def _fail(exc: Exception) -> int:
    message = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    print(f"librarian token: {message}", file=sys.stderr)
    return 1
