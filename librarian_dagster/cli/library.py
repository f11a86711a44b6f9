"""`librarian library import MEMORY_BANK_DIR [--into PATH] [--dry-run]`.

The import logic lives in `librarian_dagster.core.library.cline_import` (standard library only),
imported when the command runs, so `librarian --help` stays fast.
"""

import argparse

from librarian_dagster.core.commandline import AddParser


def _run_import(args: argparse.Namespace) -> int:
    from librarian_dagster.core.library import cline_import as library

    return library.run_import(args)


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
