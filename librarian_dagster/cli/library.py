"""`librarian library import MEMORY_BANK_DIR [--into PATH] [--dry-run]` and
`librarian library consolidate PROJECT [--repo PATH] [--before DATE] [--apply]`.

The import logic lives in `librarian_dagster.core.library.cline_import` (standard library only),
consolidation in `librarian_dagster.core.consolidation`; both are imported when the command runs,
so `librarian --help` stays fast.
"""

import argparse
import sys
from pathlib import Path

from librarian_dagster.core.commandline import AddParser, iso_date


def _run_import(args: argparse.Namespace) -> int:
    from librarian_dagster.core.library import cline_import as library

    return library.run_import(args)


def _run_consolidate(args: argparse.Namespace) -> int:
    from librarian_dagster.core.assembly.providers import digest_config, make_digester
    from librarian_dagster.core.assembly.store import open_store
    from librarian_dagster.core.consolidation.consolidate import propose
    from librarian_dagster.core.consolidation.wording import model_of
    from librarian_dagster.core.settings import Settings

    repo = Path(args.repo).resolve() if args.repo else None
    if repo is not None and not repo.is_dir():
        print(f"librarian library consolidate: --repo: no such folder: {repo}", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    answer = model_of(make_digester(digest_config(settings)))
    with open_store(settings) as store:
        proposal = propose(store.ledger, args.project, repo, args.before, answer=answer)
    if not proposal.read and not proposal.unread:
        print(f"librarian library consolidate: no session of {args.project!r} is remembered "
              "(`librarian status` names the projects)", file=sys.stderr)  # fmt: skip
        return 1
    where = proposal.library.parent if proposal.library else "no checkout of it here"
    said = (f"{proposal.read} sessions of {args.project} read"
            f"{f' ({proposal.unread} could not be)' if proposal.unread else ''},"
            f" {proposal.lines} lines supported, {proposal.archived} retired or superseded"
            f" ({where})")  # fmt: skip
    if proposal.library and not proposal.checked:
        print(f"librarian library consolidate: {where} holds none of the files the sessions "
              "changed: nothing is checked against the code", file=sys.stderr)  # fmt: skip
    diff = proposal.diff()
    if not diff:
        print(f"{said}: the library already says so, nothing to change", file=sys.stderr)
        return 0
    sys.stdout.write(diff)
    if not args.apply:
        print(f"{said}: the diff above; --apply writes it", file=sys.stderr)
    elif proposal.library is None:
        print(f"librarian library consolidate: {args.project} has no checkout here to write "
              "into: name one with --repo", file=sys.stderr)  # fmt: skip
        return 1
    else:
        print(f"{said}: wrote {', '.join(proposal.apply())}", file=sys.stderr)
    return 0


def _consolidate_parser(sub) -> None:
    parser = sub.add_parser(
        "consolidate",
        help="write what recurs in a project's sessions into its library, with their sources",
        description="Mine a project's remembered sessions for what several of them share (a "
        "failure and what passed after it, a command that passed) and propose each as a line "
        "of _memory_library/<folder>/recurring.md, in the deepest folder holding the files its "
        "sessions changed, citing them. Prints the diff; --apply writes it.",
    )
    parser.add_argument("project", metavar="PROJECT", help="the project, as the store names it")
    parser.add_argument(
        "--repo",
        metavar="PATH",
        help="the checkout whose _memory_library/ to write (default: the project's on this "
        "machine, from its newest session's folder)",
    )
    parser.add_argument(
        "--before",
        type=iso_date,
        metavar="DATE",
        help="use only the sessions that began before DATE (a replay)",
    )
    parser.add_argument("--apply", action="store_true", help="write the diff into the library")
    parser.set_defaults(handler=_run_consolidate)


def register(add_parser: AddParser) -> None:
    parser = add_parser(
        "library",
        help="manage the _memory_library/ notes kept by the hooks",
        description="Manage the _memory_library/ notes kept by the Librarian hooks.",
    )
    sub = parser.add_subparsers(dest="library_command", metavar="ACTION", required=True)
    importer = sub.add_parser(
        "import",
        help="import a Cline memory bank as library notes (never overwrites)",
        description="Turn a Cline memory bank into notes at the root of a library. Shows the "
        "plan; existing notes are never overwritten.",
    )
    # Same arguments as the standalone script, defined once in core.
    from librarian_dagster.core.library.cline_import import add_arguments

    add_arguments(importer)
    importer.set_defaults(handler=_run_import)
    _consolidate_parser(sub)
