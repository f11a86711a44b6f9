"""What the `librarian` command and `python -m mcp_server` share: argument types, how a
setting or a resource that cannot be used is reported (one line on stderr, never a traceback),
and how a process of ours imports its heavy libraries (`imports_uncollected`).

In core, not in cli/, because the MCP server must not import the `librarian` command.
"""

import argparse
import gc
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import NoReturn

# Where the classes of "cannot use what you gave me" errors live. Looked up only once one is
# raised (sys.modules), so that a command that never opened a database never imports psycopg,
# and `librarian --help` never imports pydantic (through the settings).
_SETTINGS_ERROR = ("librarian_dagster.core.settings", "SettingsError")
_USER_ERRORS = (
    _SETTINGS_ERROR,
    ("librarian_dagster.core.store.database", "DatabaseError"),
    ("librarian_dagster.core.store.pool", "StoreError"),
    ("psycopg", "OperationalError"),
)


AddParser = Callable[..., argparse.ArgumentParser]
"""How a command module adds its parser: the `add_parser` of `add_subparsers()`, a public call
(the object it belongs to has a private class, which would break silently on a Python upgrade)."""


class Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (and where to read more) instead of the usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def port(text: str) -> int:
    """A TCP port, refused by argparse when it is out of range."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is out of range (1 to 65535)")
    return value


def iso_date(text: str) -> datetime:
    """An ISO date (or time), refused by argparse when it is none; without a zone, UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO date or time: {text!r}") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def user_errors() -> tuple[type[BaseException], ...]:
    """The errors that mean a setting, a path or the database cannot be used, not a bug.

    OSError covers a LIBRARIAN_HOME or a file that cannot be read or written, a full disk, a
    port already taken. Everything else is a bug and keeps its traceback.
    """
    return (OSError, *_loaded(_USER_ERRORS))


def _loaded(names: tuple[tuple[str, str], ...]) -> list[type[BaseException]]:
    found = []
    for module_name, name in names:
        module = sys.modules.get(module_name)
        if module is not None:
            found.append(getattr(module, name))
    return found


def describe(exc: BaseException) -> str:
    """One line for a user error: the message's first line, the file an OSError is about."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def report(prog: str, exc: BaseException) -> int:
    """Print the one line and return the exit code: 2 for a bad setting, 1 otherwise."""
    print(f"{prog}: {describe(exc)}", file=sys.stderr)
    return 2 if isinstance(exc, tuple(_loaded((_SETTINGS_ERROR,)))) else 1


def exit_now(command: str, message: str) -> NoReturn:
    """End the process at once with one line, from any thread: for a resource lost under a
    command (its embedded database stopped), where waiting on would only wait out retries of
    writes that cannot succeed. Nothing is half written: a memory is stored in one transaction,
    and the next command ends the run this one leaves "started" (decision 0020).

    The line is the last thing on stderr: the other threads (a connection pool's warnings)
    write to /dev/null from the moment before it is written."""
    sys.stdout.flush()
    sys.stderr.flush()
    ours = os.dup(2)
    nowhere = os.open(os.devnull, os.O_WRONLY)
    os.dup2(nowhere, 2)
    os.write(ours, f"librarian {command}: {message}\n".encode())
    os._exit(1)


@contextmanager
def imports_uncollected() -> Iterator[None]:
    """Around a process's imports of Dagster, of the definitions or of the recall server: Python's
    cyclic garbage collector off, then what they made frozen (`gc.freeze`: later collections pass
    over it) and the collector on again.

    Those imports make about a million objects that live as long as the process. The collector,
    run every 700 new objects, went over them again and again and freed nothing: a third to a
    half of the CPU those imports took, in every process that makes them (the code server, each
    run worker, `librarian ingest`, the recall server; benchmarks/process_start.py, decision
    0045). Nested, or where the collector is off already, it does nothing.

    Only a process's first use freezes: a later one (`librarian ingest` called in a test's
    process, say) would also freeze whatever garbage was waiting, for good, and hide it from
    `gc.get_referrers`."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
        gc.enable()
