"""Serving the recall server as a process: `librarian mcp`, `python -m mcp_server` and the child of
`librarian up`. The store and the embedder the settings name, the tokens HTTP demands, the warm-up
that loads the model and the postings while the server starts, and, served alone, the watch of
its database (core/service/watch.py)."""

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import uvicorn
from mcp.server.auth.provider import TokenVerifier

from librarian_dagster.core.assembly.forgetting import Forgotten, forget_sessions
from librarian_dagster.core.assembly.providers import configured_embedder
from librarian_dagster.core.assembly.store import Store, migrated_url, open_store
from librarian_dagster.core.consolidation.pending import Pending
from librarian_dagster.core.models.embeddings import Embedder
from librarian_dagster.core.recall.ranking import Boosts
from librarian_dagster.core.service.tokens import TokenFileError
from librarian_dagster.core.service.watch import Watch, database_watch
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.pool import SEARCH_CONNECTIONS
from mcp_server.app import build_server, http_app
from mcp_server.auth import LOOPBACK_HOSTS, verifier_for
from mcp_server.push_api import Intake
from mcp_server.served import Served

Transport = Literal["http", "stdio"]

logger = logging.getLogger(__name__)

# How long a stop waits for the warm-up's first embedding (the model's load) to finish.
ENCODER_WARM_UP_WAIT_S = 30.0


@dataclass(frozen=True)
class _WarmUp:
    """The warm-up's progress, for whoever stops the server: started, and past the encoder."""

    started: threading.Event
    encoded: threading.Event

    def wait(self) -> None:
        """A process that exits while a thread is inside the encoder's native code is aborted by
        its runtime ("terminate called without an active exception", exit -6, seen when a stop
        came during the model's load): let that step end first. The postings' load after it is
        Python's own and may be left to the exit. Waited for by the lifespan's end and again
        after the server returns: a legacy SSE stream cut at shutdown can keep the lifespan
        from ending."""
        if self.started.is_set():
            self.encoded.wait(ENCODER_WARM_UP_WAIT_S)


def _warm_up(served: Served, progress: _WarmUp) -> None:
    try:
        try:
            served.embedder.embed_query("warm up")
        finally:
            progress.encoded.set()
        served.search.warm_up()
    except Exception:  # the first real question will meet the same error, and report it
        logger.warning("could not warm up the recall server", exc_info=True)


@contextmanager
def _open(
    url: str, postings_dir: Path, embedder: Embedder, warm: _WarmUp | None
) -> Iterator[Served]:
    """The store at `url`, open for as long as the server runs, with connections kept for a
    search at once (`SEARCH_CONNECTIONS`) and its BM25 postings kept in `postings_dir`; with
    `warm`, the model and the postings loaded in the background as it starts."""
    with Store(url, min_connections=SEARCH_CONNECTIONS, postings_dir=postings_dir) as store:
        served = Served.of(store, embedder)
        if warm is not None and not warm.started.is_set():
            # Both load in the background while the server starts: the first question need not
            # wait.
            warm.started.set()
            threading.Thread(target=_warm_up, args=(served, warm), daemon=True).start()
        try:
            yield served
        finally:
            if warm is not None:
                warm.wait()


def serve(
    settings: Settings,
    transport: Transport = "http",
    host: str | None = None,
    port: int | None = None,
    watch_database: bool = True,
) -> None:
    """Serve the memory the settings point at until stopped; host/port default to the settings.

    Raises SystemExit with one line when HTTP would serve an address other than loopback with
    no token configured, or the token file is unreadable: before the store is opened. A store
    that cannot serve, or an embedder that cannot be made, fails before the server starts too;
    the store's connections are opened as it starts and closed as it stops.
    """
    host = host or settings.mcp_host
    port = port or settings.mcp_port
    verifier = _http_verifier(settings, host) if transport == "http" else None
    url, embedder = migrated_url(settings), configured_embedder(settings)
    warm = _WarmUp(threading.Event(), threading.Event()) if transport == "http" else None
    server = build_server(
        lambda: _open(url, settings.postings_dir, embedder, warm),
        settings.recall_threshold,
        Boosts.of(settings),
        verifier=verifier,
        issuer_url=f"http://{_url_host(host)}:{port}",
        # Over stdio the user's own process started it: local and trusted. No token travels over
        # a pipe, so the private domain is returned only if LIBRARIAN_STDIO_PRIVATE says so.
        private_without_token=transport == "stdio" and settings.stdio_private,
        forget=_forgetting(settings),
        dagster_url=settings.ui_url,
        intake=Intake(settings.uploads, int(settings.push_max_mb * 1e6)),
        own_person=settings.own_person,
        waiting=Pending(settings.library_dir / "pending").all,
    )
    if transport == "stdio":
        with server.served.opened():
            server.run("stdio")
        return
    _say_served(settings, host, port, verifier)
    app = http_app(server, host)
    # Served alone, the server watches its database as `librarian up` does (which watches it
    # for its children, and so starts this one with `watch_database=False`).
    watch = database_watch(settings, url) if watch_database else None
    stopping = threading.Event()
    if watch is not None:
        threading.Thread(target=_watch, args=(watch, stopping), daemon=True).start()
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        # uvicorn raises the signal that stopped it again as it returns: a Ctrl-C comes out of
        # `run` as KeyboardInterrupt, and the warm-up must still be waited for on the way out.
        stopping.set()
        if warm is not None:
            warm.wait()
    if watch is not None and watch.lost:
        raise SystemExit(f"librarian mcp: {watch.lost}")


def _forgetting(settings: Settings) -> "Callable[[Sequence[str]], Forgotten]":
    """The page's forget: the store's part at once, Dagster's records at the sessions sensor's
    next tick (core/assembly/forgetting.py); the server imports no Dagster."""

    def forget(session_ids: Sequence[str]) -> Forgotten:
        with open_store(settings) as store:
            return forget_sessions(session_ids, settings, store, history=None)

    return forget


def _http_verifier(settings: Settings, host: str) -> TokenVerifier | None:
    """The tokens HTTP demands (None: none configured); SystemExit with one line when the
    token file cannot be read, or when `host` is not loopback and no token is configured."""
    try:
        verifier = verifier_for(settings)
    except TokenFileError as exc:
        raise SystemExit(f"librarian mcp: {exc}") from None
    if verifier is None and host not in LOOPBACK_HOSTS:
        raise SystemExit(
            f"librarian mcp: refusing to serve {host} without tokens: anyone who can reach "
            "it could read the memory; make one with `librarian token add NAME` "
            "(or set LIBRARIAN_MCP_TOKEN), or serve 127.0.0.1"
        )
    return verifier


def _say_served(settings: Settings, host: str, port: int, verifier: TokenVerifier | None) -> None:
    print(
        f"MCP server on http://{_url_host(host)}:{port}/mcp (legacy SSE at /sse; the page for "
        "people at /)",
        file=sys.stderr,
    )
    if verifier is None:
        print(
            "no tokens configured: open to every process on this machine (loopback only); "
            "the private domain is not served",
            file=sys.stderr,
        )
    else:
        print(f"bearer tokens required ({settings.tokens_file})", file=sys.stderr)


def _watch(watch: Watch, stopping: threading.Event) -> None:
    """Watch the database; when it is lost, stop the server as a user's stop would (uvicorn
    ends its connections), and `serve` exits saying why."""
    watch.run(stopping)
    if watch.lost:
        os.kill(os.getpid(), signal.SIGTERM)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
