"""`librarian push URL`: this machine's sessions, of every agent, sent to a Librarian server.

Light: no database, Dagster or model here. Each session is redacted on this machine before it
leaves (core/push/bundle.py), sent whole (core/push/client.py), and said: one line per session
pushed or refused, with a bar for a first push of many on a terminal.
"""

import argparse
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING

from librarian_dagster.core.commandline import AddParser

if TYPE_CHECKING:
    from librarian_dagster.core.push.client import PushClient
    from librarian_dagster.core.push.pusher import Pushed, PushState
    from librarian_dagster.core.settings import Settings

_BAR_FROM = 20
"""A first push of at least this many sessions shows a progress bar on a terminal."""


def register(add_parser: AddParser) -> None:
    parser = add_parser(
        "push",
        help="send every settled session of every agent here to a Librarian server, redacted",
    )
    parser.add_argument("url", metavar="URL", help="the server, e.g. https://memory.example:3201")
    parser.add_argument(
        "--watch",
        action="store_true",
        help="keep pushing as sessions settle, until stopped (what the login unit runs)",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="with --watch, how often to look for settled sessions (default 30)",
    )
    parser.add_argument(
        "--machine",
        default=None,
        help="this machine's name on the server (default: its host name)",
    )
    parser.set_defaults(handler=cmd_push)


class _Counted:
    """A session done, as the progress bar counts it (its line is said already)."""

    def __init__(self, session_id: str) -> None:
        self.session_id, self.status, self.detail = session_id, "done", ""


def _machine_name(given: str | None) -> str:
    from librarian_dagster.core.service.tokens import check_name

    name = given or socket.gethostname().split(".")[0] or "laptop"
    if given is None:
        name = "".join(c if c.isalnum() or c in "._-" else "-" for c in name)[:64].lstrip("._-")
    return check_name(name or "laptop", "machine name")


def cmd_push(args: argparse.Namespace) -> int:
    from librarian_dagster.core.push.client import PushClient
    from librarian_dagster.core.push.pusher import PushState, state_file
    from librarian_dagster.core.service.tokens import TokenFileError
    from librarian_dagster.core.settings import Settings

    if not args.url.startswith(("http://", "https://")):
        print(f"librarian push: not an http(s) URL: {args.url!r}", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    try:
        machine = _machine_name(args.machine)
    except TokenFileError as exc:
        print(f"librarian push: {exc}", file=sys.stderr)
        return 2
    client = PushClient(args.url, settings.mcp_token, machine)
    state = PushState(state_file(settings, args.url))
    said = _Said()
    try:
        if args.watch:
            from librarian_dagster.core.push.pusher import watch

            print(f"pushing to {args.url} as {machine}; Ctrl-C stops", file=sys.stderr)
            watch(
                settings, client, state, args.interval, said, said.stopped, stop=_stop_on_signal()
            )
            return 0
        return _push_once(settings, client, state, said)
    finally:
        client.close()


def _stop_on_signal() -> threading.Event:
    """Set by SIGINT or SIGTERM (Ctrl-C, or the login unit stopped): the watch then ends between
    two sessions, its state saved. Not KeyboardInterrupt: raised where a finalizer runs, Python
    prints and drops it, and the watch went on for good. A second signal stops at once."""
    stop = threading.Event()

    def asked(signum: int, _frame: object) -> None:
        stop.set()
        signal.signal(
            signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
        )

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, asked)
    return stop


class _Said:
    """What a push says: a line per session pushed or refused, a bar for many, the totals."""

    def __init__(self) -> None:
        from librarian_dagster.cli.progress import Progress

        self.progress = Progress(sys.stderr)
        self.counts = {"pushed": 0, "unchanged": 0, "refused": 0, "failed": 0}

    def __call__(self, done: "Pushed") -> None:
        self.counts[done.status] = self.counts.get(done.status, 0) + 1
        if done.status != "unchanged":
            line = f"{done.status:<9}{done.project} · {done.agent} · {done.session_id}"
            self.progress.say(f"{time.strftime('%H:%M:%S')}  {line}  {done.detail}".rstrip())
        if self.progress.total:
            # Said above already: the bar counts it alone.
            self.progress.update(_Counted(done.session_id))

    def stopped(self, reason: str) -> None:
        said = f"stopped  {reason}" if reason else "pushing again"
        self.progress.say(f"{time.strftime('%H:%M:%S')}  {said}")

    def totals(self) -> str:
        c = self.counts
        return (
            f"{c['pushed']} pushed, {c['unchanged']} unchanged, {c['refused']} refused, "
            f"{c['failed']} not read now"
        )


def _push_once(settings: "Settings", client: "PushClient", state: "PushState", said: _Said) -> int:
    from librarian_dagster.core.push.client import PushStopped
    from librarian_dagster.core.push.pusher import pending, push_sessions

    try:
        # Known to the server even with nothing to push, and a bad token said before any
        # session is read.
        client.hello()
    except PushStopped as exc:
        print(f"librarian push: {exc}", file=sys.stderr)
        return 1
    candidates = pending(settings, state, time.time())
    if len(candidates) >= _BAR_FROM:
        said.progress.start(len(candidates))
    try:
        push_sessions(settings, client, state, candidates, said)
    except PushStopped as exc:
        said.progress.close()
        print(f"librarian push: {exc}", file=sys.stderr)
        return 1
    said.progress.close()
    print(said.totals(), file=sys.stderr)
    return 1 if said.counts["refused"] or said.counts["failed"] else 0
