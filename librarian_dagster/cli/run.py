"""`librarian up | ingest | status | mcp`: run the product."""

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import librarian_dagster
from librarian_dagster.core.settings import Settings

DEFAULT_UI_PORT = 3000
_STOP_GRACE_SECONDS = 30


def register(subparsers: argparse._SubParsersAction) -> None:
    up = subparsers.add_parser(
        "up", help="start the database, Dagster (UI, sensor) and the MCP server"
    )
    up.add_argument("--ui-port", type=int, default=DEFAULT_UI_PORT)
    up.add_argument("--mcp-port", type=int, default=None, help="default: LIBRARIAN_MCP_PORT/3201")
    up.add_argument("--no-mcp", action="store_true", help="do not start the MCP server")
    up.set_defaults(handler=cmd_up)

    ingest = subparsers.add_parser(
        "ingest", help="ingest transcript files or folders now, through the same assets"
    )
    ingest.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    ingest.set_defaults(handler=cmd_ingest)

    status = subparsers.add_parser("status", help="sessions, chunks, last ingest, database")
    status.set_defaults(handler=cmd_status)

    mcp = subparsers.add_parser("mcp", help="serve search_chunks/get_digest/list_sessions")
    mcp.add_argument("--transport", choices=("http", "stdio"), default="http")
    mcp.add_argument("--host", default=None, help="default: LIBRARIAN_MCP_HOST or 127.0.0.1")
    mcp.add_argument("--port", type=int, default=None, help="default: LIBRARIAN_MCP_PORT or 3201")
    mcp.set_defaults(handler=cmd_mcp)


def cmd_ingest(args: argparse.Namespace) -> int:
    from librarian_dagster.ingest import ingest_paths

    missing = [p for p in args.paths if not p.exists()]
    if missing:
        print(f"librarian ingest: no such file or folder: {missing[0]}", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    outcomes = ingest_paths(args.paths, settings)
    if not outcomes:
        print("no session transcripts (*.jsonl) found", file=sys.stderr)
        return 1
    for o in outcomes:
        extra = f" ({o.chunks} chunks)" if o.status == "ingested" else ""
        print(f"{o.status:8} {o.session_id}{extra} {o.seconds:.1f}s  {o.detail}")
    counts = {
        s: sum(o.status == s for o in outcomes)
        for s in ("ingested", "skipped", "deferred", "failed")
    }
    print(", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if counts["failed"] else 0


def cmd_status(args: argparse.Namespace) -> int:
    from librarian_dagster.core.database import describe_location
    from librarian_dagster.core.providers import describe
    from librarian_dagster.core.recall import REEMBED_HOW, other_spaces
    from librarian_dagster.core.store import open_store

    settings = Settings.from_env()
    store = open_store(settings)
    stats = store.stats()
    last = stats.last_ingest
    providers = describe(settings)
    print(f"database:    {describe_location(settings)}")
    print(f"mirror:      {settings.mirror}")
    print(f"sessions:    {stats.sessions} in {stats.projects} project(s)")
    print(f"chunks:      {stats.chunks}")
    print(f"last ingest: {last.isoformat(timespec='seconds') if last else 'never'}")
    print(f"digests:     {providers['digests']}")
    print(f"embeddings:  {providers['embeddings']}")
    if providers["endpoint"]:
        print(f"endpoint:    {providers['endpoint']}")
    budget = settings.daily_token_budget
    print(
        f"llm tokens:  {stats.input_tokens:,} in, {stats.output_tokens:,} out, "
        f"{stats.llm_calls:,} call(s); today {stats.tokens_today:,}"
        + (f" of a daily budget of {budget:,}" if budget else "")
    )
    spaces = store.embedding_spaces()
    for space in spaces:
        print(
            f"vectors:     {space.chunks} chunk(s) of {space.sessions} session(s) with "
            f"{space.model} ({space.dimension}-d)"
        )
    model, dimension = _embedding_space(settings)
    unsearchable = other_spaces(spaces, model, dimension)
    if unsearchable:
        print(
            f"warning:     {unsearchable} session(s) were embedded with another model than "
            f"{model} ({dimension}-d) and are not searchable now: {REEMBED_HOW}"
        )
    return 0


def _embedding_space(settings: Settings) -> tuple[str, int]:
    """The configured embedder's model and dimension, without loading or calling it."""
    from librarian_dagster.core.embeddings import LocalMiniLMEmbedder

    if settings.embed_provider == "local":
        return LocalMiniLMEmbedder.model_name, LocalMiniLMEmbedder.dimension
    return settings.embed_model, settings.embed_dimension


def cmd_mcp(args: argparse.Namespace) -> int:
    from mcp_server.app import serve

    serve(Settings.from_env(), args.transport, args.host, args.port)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from librarian_dagster.core.dagster_home import prepare_dagster_home
    from librarian_dagster.core.database import describe_location
    from librarian_dagster.core.store import open_store

    settings = Settings.from_env()
    # This process holds a handle on the embedded server for as long as `up` runs, so the
    # server outlives every child's own start and stop, and stops when `up` exits.
    open_store(settings)
    env = {**os.environ, **prepare_dagster_home(settings)}
    settings.log_dir.mkdir(parents=True, exist_ok=True)

    children: list[tuple[str, subprocess.Popen]] = []
    workspace = Path(librarian_dagster.__file__).resolve().parents[1] / "workspace.yaml"
    dagster_cmd = [
        sys.executable,
        "-m",
        "dagster",
        "dev",
        "-h",
        "127.0.0.1",
        "-p",
        str(args.ui_port),
    ]
    dagster_cmd += (
        ["-w", str(workspace)] if workspace.exists() else ["-m", "librarian_dagster.definitions"]
    )
    # A new session per child: `dagster dev` ignores SIGTERM unless it leads its own group.
    children.append(("dagster", subprocess.Popen(dagster_cmd, env=env, start_new_session=True)))
    if not args.no_mcp:
        mcp_cmd = [sys.executable, "-m", "mcp_server", "--transport", "http"]
        if args.mcp_port:
            mcp_cmd += ["--port", str(args.mcp_port)]
        children.append(("mcp", subprocess.Popen(mcp_cmd, env=env, start_new_session=True)))

    print(f"database  {describe_location(settings)}", file=sys.stderr)
    print(f"mirror    {settings.mirror}", file=sys.stderr)
    print(f"dagster   http://127.0.0.1:{args.ui_port}", file=sys.stderr)
    if not args.no_mcp:
        print(
            f"mcp       http://127.0.0.1:{args.mcp_port or settings.mcp_port}/mcp", file=sys.stderr
        )
    print("Ctrl-C stops everything.", file=sys.stderr)

    stopping = False

    def request_stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    exit_code = 0
    while not stopping:
        for name, proc in children:
            if proc.poll() is not None:
                print(f"{name} exited with {proc.returncode}; stopping", file=sys.stderr)
                exit_code = 1
                stopping = True
        time.sleep(0.5)
    _stop_children(children)
    return exit_code


def _stop_children(children: list[tuple[str, subprocess.Popen]]) -> None:
    """SIGTERM each child's process group, wait for the whole group, SIGKILL what is left.

    Waiting for the group, not just the child: `dagster dev` exits before its webserver, daemon
    and code servers do, and those hold database handles until they are gone.
    """
    for _name, proc in children:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_SECONDS
    for _name, proc in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _group_alive(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_by = time.monotonic() + 5
        while _group_alive(proc.pid) and time.monotonic() < killed_by:
            time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
