"""`librarian up | ingest | status | mcp`: run the product."""

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from librarian_dagster.core.commandline import AddParser, imports_uncollected, port
from librarian_dagster.core.service.terminal import say

if TYPE_CHECKING:
    import psutil

    from librarian_dagster.core.service.watch import Watch
    from librarian_dagster.core.settings import Settings

DEFAULT_UI_PORT = 3000
_STOP_GRACE_SECONDS = 5


def register(add_parser: AddParser) -> None:
    up = add_parser("up", help="start the database, Dagster (UI, sensor) and the MCP server")
    up.add_argument("--ui-port", type=port, default=DEFAULT_UI_PORT)
    up.add_argument("--mcp-port", type=port, default=None, help="default: LIBRARIAN_MCP_PORT/3201")
    up.add_argument("--no-mcp", action="store_true", help="do not start the MCP server")
    up.add_argument(
        "--verbose",
        action="store_true",
        help="show Dagster's and the MCP server's logs here too (default: LIBRARIAN_VERBOSE; "
        "they always go to LIBRARIAN_HOME/logs)",
    )
    up.set_defaults(handler=cmd_up)

    ingest = add_parser(
        "ingest", help="ingest transcript files or folders now, through the same assets"
    )
    ingest.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    ingest.set_defaults(handler=cmd_ingest)

    status = add_parser("status", help="sessions, chunks, last ingest, database")
    status.set_defaults(handler=cmd_status)

    mcp = add_parser("mcp", help="serve search_chunks/get_digest/list_sessions")
    mcp.add_argument("--transport", choices=("http", "stdio"), default="http")
    mcp.add_argument("--host", default=None, help="default: LIBRARIAN_MCP_HOST or 127.0.0.1")
    mcp.add_argument("--port", type=port, default=None, help="default: LIBRARIAN_MCP_PORT or 3201")
    mcp.set_defaults(handler=cmd_mcp)


def cmd_ingest(args: argparse.Namespace) -> int:
    from librarian_dagster.cli.progress import Progress
    from librarian_dagster.core.settings import Settings

    with imports_uncollected():
        from librarian_dagster.ingest import ingest_paths

    missing = [p for p in args.paths if not p.exists()]
    if missing:
        print(f"librarian ingest: no such file or folder: {missing[0]}", file=sys.stderr)
        return 2
    settings = Settings.from_env()
    end_with_the_embedded_server(settings, "ingest")
    progress = Progress(sys.stderr)
    outcomes = ingest_paths(
        args.paths, settings, on_start=progress.start, on_outcome=progress.update
    )
    progress.close()
    if not outcomes:
        print("no session transcripts found", file=sys.stderr)
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


def end_with_the_embedded_server(settings: "Settings", command: str) -> None:
    """The command ends at once, saying so, if the embedded database stops under it."""
    from librarian_dagster.core.commandline import exit_now
    from librarian_dagster.core.store.database import on_embedded_server_stop, unreachable

    on_embedded_server_stop(
        settings, lambda reason: exit_now(command, str(unreachable(settings, RuntimeError(reason))))
    )


def cmd_status(args: argparse.Namespace) -> int:
    from librarian_dagster.core.assembly.providers import describe
    from librarian_dagster.core.assembly.store import open_store
    from librarian_dagster.core.capture.readers import label
    from librarian_dagster.core.recall.answer import REEMBED_HOW, other_spaces
    from librarian_dagster.core.settings import Settings
    from librarian_dagster.core.store.database import describe_location

    settings = Settings.from_env()
    with open_store(settings) as store:
        stats, spaces = store.memories.stats(), store.search.embedding_spaces()
        agents = store.memories.agents(include_private=True)
        people = store.memories.people(include_private=True)
        machines = store.pushes.machines()
    last = stats.last_ingest
    providers = describe(settings)
    print(f"database:    {describe_location(settings)}")
    for line in _folder_lines(settings, "sessions:   "):
        print(line)
    print(f"sessions:    {stats.sessions} in {stats.projects} project(s)")
    if agents:
        print("by agent:    " + ", ".join(f"{label(a.agent)} {a.sessions}" for a in agents))
    if people:
        print("by person:   " + ", ".join(f"{p.person} {p.sessions}" for p in people))
    for machine in machines:
        when = machine.last_push.isoformat(timespec="seconds")
        print(f"pushes:      {machine.person}'s {machine.machine}, last at {when}")
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


def _embedding_space(settings: "Settings") -> tuple[str, int]:
    """The configured embedder's model and dimension, without loading or calling it."""
    from librarian_dagster.core.models.minilm import LocalMiniLMEmbedder

    if settings.embed_provider == "local":
        return LocalMiniLMEmbedder.model_name, LocalMiniLMEmbedder.dimension
    return settings.embed_model, settings.embed_dimension


def cmd_mcp(args: argparse.Namespace) -> int:
    from librarian_dagster.core.settings import Settings

    with imports_uncollected():
        from mcp_server.serving import serve

    serve(Settings.from_env(), args.transport, args.host, args.port)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    from librarian_dagster.core.assembly.store import migrated_url
    from librarian_dagster.core.service.dagster_processes import DagsterProcesses
    from librarian_dagster.core.service.watch import alert_here
    from librarian_dagster.core.settings import Settings

    settings = Settings.from_env()
    logs = _ChildLogs(settings.log_dir, echo=args.verbose or settings.verbose)
    children: list[tuple[str, subprocess.Popen]] = []
    stops_asked = 0

    def request_stop(signum, frame):
        nonlocal stops_asked
        stops_asked += 1
        if stops_asked > 1:  # asked again while stopping: no more grace
            _kill_groups(children, signal.SIGKILL)

    # Before anything starts: a signal that came between two children would otherwise leave the
    # first running in its own session, holding the database, with nobody to stop it.
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    stopping = threading.Event()
    env: dict[str, str] = {}
    watches: tuple[Watch, ...] = ()
    dagster: DagsterProcesses | None = None
    try:
        # This process holds a handle on the embedded server for as long as `up` runs, so the
        # server outlives every child's own start and stop, and stops when `up` exits.
        url = migrated_url(settings)
        env = _child_env(settings, args)
        _print_journal(settings, stopping)
        dagster = DagsterProcesses.create(args.ui_port)
        start = _Starter(dict(_child_commands(args, dagster)), env, logs, dagster,
                         lambda: stops_asked > 0)  # fmt: skip
        for name in start.commands:
            if stops_asked:
                return 0
            children.append((name, start(name)))

        _say_where(settings, args)
        watch, home, folders = _watches(settings, url, stopping)
        watches = (watch, home, *folders)
        alert = lambda t: alert_here(settings, t)  # noqa: E731
        supervisor = _Supervisor(children, start, alert)
        return _supervise(watch, home, supervisor, lambda: stops_asked > 0)
    finally:
        stopping.set()
        # The runs going are ended as canceled through the database, when it can take writes.
        if (
            children
            and env
            and not any(w.down or w.lost for w in watches)
            and _runs_going(children)
        ):
            _stop_runs(settings, env["DAGSTER_HOME"], children)
        else:
            _stop_children(children)
        if dagster is not None:
            dagster.close()


def _child_env(settings: "Settings", args: argparse.Namespace) -> dict[str, str]:
    """The environment of `up`'s children: DAGSTER_HOME under LIBRARIAN_HOME, and run links to
    this UI (unless set)."""
    from librarian_dagster.core.service.dagster_home import prepare_dagster_home

    env = {**os.environ, **prepare_dagster_home(settings)}
    # Run links in failure alerts point at the UI this `up` serves, unless told otherwise.
    env.setdefault("LIBRARIAN_UI_URL", f"http://127.0.0.1:{args.ui_port}")
    return env


def _print_journal(settings: "Settings", stopping: threading.Event) -> None:
    """Show the journal's events from now on (core/service/journal.py), until `stopping`."""
    from librarian_dagster.core.service.journal import journal_path
    from librarian_dagster.core.service.terminal import print_journal

    journal = journal_path(settings.log_dir)
    threading.Thread(
        target=print_journal, args=(journal, stopping, _show), name="journal", daemon=True
    ).start()


def _say_where(settings: "Settings", args: argparse.Namespace) -> None:
    from librarian_dagster.core.store.database import describe_location

    print(f"database  {describe_location(settings)}", file=sys.stderr)
    for line in _folder_lines(settings, "sessions "):
        print(line, file=sys.stderr)
    print(f"dagster   http://127.0.0.1:{args.ui_port}", file=sys.stderr)
    if not args.no_mcp:
        served = f"http://127.0.0.1:{args.mcp_port or settings.mcp_port}"
        print(f"mcp       {served}/mcp", file=sys.stderr)
        print(f"page      {served}/  (search, read and forget the memory)", file=sys.stderr)
    print("Ctrl-C stops everything.", file=sys.stderr)


def _folder_lines(settings: "Settings", head: str) -> list[str]:
    """Each agent's sessions folder, one line each under `head`, and whether it is there."""
    from librarian_dagster.core.capture.agents import AGENTS

    width = max(len(agent.label) for agent in AGENTS.values())
    lines = []
    for agent in AGENTS.values():
        folder = agent.folder.path(settings)
        there = "" if folder.is_dir() else "  (not there)"
        lines.append(
            f"{head if not lines else ' ' * len(head)} {agent.label:<{width}}  {folder}{there}"
        )
    return lines


def _supervise(
    watch: "Watch", home: "Watch", supervisor: "_Supervisor", stopped: Callable[[], bool]
) -> int:
    """Until a stop is asked (0), or the database, the home or a child is lost for good (1,
    with one line that says which)."""
    while not stopped():
        lost = [w.lost for w in (watch, home) if w.lost]
        if lost:
            if home.down and not home.lost:  # a full disk is why the database could not start
                lost.append(f"{home.what} ({home.where}) {home.trouble}")
            print(f"librarian up: {'; '.join(lost)}", file=sys.stderr)
            return 1
        if watch.healed.is_set():
            watch.healed.clear()
            # Their connections (and Dagster's daemon threads) died with the database.
            say("alert", "the database is back: restarting dagster and mcp")
            supervisor.restart_all()
        failed = supervisor.check(blame=not watch.down)
        if failed:
            print(f"librarian up: {failed}", file=sys.stderr)
            return 1
        time.sleep(0.2)
    return 0


class _ChildLogs:
    """Where each child's output goes: `<name>.log` under the log folder, rotated
    (core/service/terminal.py), and the terminal too when `echo`."""

    def __init__(self, folder: Path, echo: bool) -> None:
        self.folder, self.echo = folder, echo

    def start(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen:
        from librarian_dagster.core.service.dagster_processes import log_name
        from librarian_dagster.core.service.terminal import keep_output

        # A new session per child: its group is stopped whole (the code server's run workers).
        proc = subprocess.Popen(
            command,
            env=env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        keep_output(proc.stdout, self.folder / f"{log_name(name)}.log", self.echo)
        return proc


class _Starter:
    """Starts a child by name: Dagster's code server is waited for (until it listens) before the
    webserver and the daemon that use it start."""

    def __init__(self, commands: dict[str, list[str]], env, logs: _ChildLogs, dagster,
                 stop: Callable[[], bool]) -> None:  # fmt: skip
        self.commands, self.env, self.logs, self.dagster, self.stop = (
            commands, env, logs, dagster, stop)  # fmt: skip

    def __call__(self, name: str) -> subprocess.Popen:
        self.dagster.before_start(name)
        proc = self.logs.start(name, self.commands[name], self.env)
        self.dagster.after_start(name, proc, self.stop)
        return proc

    def log(self, name: str) -> Path:
        from librarian_dagster.core.service.dagster_processes import log_name

        return self.logs.folder / f"{log_name(name)}.log"


def _show(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


CHILD_RESTARTS = 3
"""Restarts of one child within CHILD_RESTART_WINDOW_S before `up` gives up and exits."""
CHILD_RESTART_WINDOW_S = 600.0


class _Supervisor:
    """`up`'s children kept running: one that exits is restarted (and said), up to
    CHILD_RESTARTS times in CHILD_RESTART_WINDOW_S; past that `up` exits non-zero, naming it."""

    def __init__(self, children, start: _Starter, alert) -> None:
        self.children: list[tuple[str, subprocess.Popen]] = children
        self.start, self.alert = start, alert
        self.restarts: dict[str, list[float]] = {}

    def check(self, blame: bool) -> str | None:
        """Restart the children that exited; what makes `up` exit, if anything does."""
        for i, (name, proc) in enumerate(self.children):
            if proc.poll() is None:
                continue
            now = time.monotonic()
            recent = [t for t in self.restarts.get(name, []) if now - t < CHILD_RESTART_WINDOW_S]
            if blame:  # while the database is down, its users' failures are not theirs
                recent.append(now)
            self.restarts[name] = recent
            if len(recent) > CHILD_RESTARTS:
                why = (
                    f"{name} exited with {proc.returncode} {len(recent)} times in "
                    f"{CHILD_RESTART_WINDOW_S / 60:.0f} min; stopping"
                )
                self.alert(f"Librarian: {why}.")
                return why
            said = f"{name} exited with {proc.returncode}"
            log = self.start.log(name)
            if blame:
                self.alert(f"Librarian: {said}; started it again (its log: {log}).")
            else:
                say("alert", f"{said}; starting it again (its log: {log})")
            self.children[i] = (name, self.start(name))
        return None

    def restart_all(self) -> None:
        _stop_children(self.children)
        self.children[:] = [(n, self.start(n)) for n, _ in self.children]


def _watches(settings: "Settings", url: str, stopping: threading.Event):
    """The watches of the database, LIBRARIAN_HOME and every agent's folder
    (core/service/watch.py), each running in a thread until `stopping`."""
    from librarian_dagster.core.service.watch import Watch, alert_here, database_watch

    def alert(text: str) -> None:
        alert_here(settings, text)

    database = database_watch(settings, url)
    every = settings.watch_interval_seconds
    watched = folder_watches(settings, alert)
    # A full disk stops the database's writes (and Dagster's, and the staged files) while
    # `SELECT 1` still answers; nothing here can free it, so after a minute `up` exits saying so.
    home = Watch("LIBRARIAN_HOME", str(settings.home), lambda: _full(settings.home), None, alert,
                 every, trouble="is short of space",
                 wait_s=settings.home_full_wait_seconds)  # fmt: skip
    for watch in (database, home, *watched):
        threading.Thread(target=watch.run, args=(stopping,), daemon=True).start()
    return database, home, watched


def folder_watches(settings: "Settings", alert: Callable[[str], object]) -> list["Watch"]:
    """A watch of each agent's folder: one that cannot be listed is said in seconds (the
    sensor's own alert comes after ten minutes without a good tick, from the daemon); one not
    made yet is no trouble."""
    from librarian_dagster.core.capture.agents import folders
    from librarian_dagster.core.capture.ingest_plan import unreadable
    from librarian_dagster.core.capture.readers import label
    from librarian_dagster.core.service.watch import Watch, recorder

    def watch(agent: str, folder: Path) -> Watch:
        what = f"{label(agent)}'s folder"
        return Watch(what, str(folder), partial(unreadable, folder), None, alert,
                     settings.watch_interval_seconds, trouble="cannot be read",
                     on_healed=recorder(settings, what))  # fmt: skip

    return [watch(agent, folder) for agent, folder in folders(settings).items()]


MIN_FREE_BYTES = 64 * 1024 * 1024
"""Free space LIBRARIAN_HOME needs: a few of PostgreSQL's 16 MB WAL segments and a run's files."""


def _full(home: Path) -> str | None:
    try:
        free = shutil.disk_usage(home).free
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return f"{free / 2**20:.0f} MB free" if free < MIN_FREE_BYTES else None


def _runs_going(children: list[tuple[str, subprocess.Popen]]) -> bool:
    """Whether the code server has a run worker (its child, under the DefaultRunLauncher) that
    may be running a run: else a stop has no run to cancel, and skips importing Dagster for it,
    which `up` no longer holds (decision 0043): a second or two of every stop."""
    import psutil  # here, not at the top: every `librarian` command imports this module

    from librarian_dagster.core.service.dagster_processes import CODE_SERVER

    try:
        return any(psutil.Process(p.pid).children() for name, p in children if name == CODE_SERVER)
    except psutil.Error:
        return True  # unknown: cancel what the database says is going


def _stop_runs(settings: "Settings", dagster_home: str, children) -> None:
    """Stop the children, the runs they were going with ended as canceled, not failed: nothing
    failed, so nothing is alerted, and each is run again at the next start (dead_runs.py)."""
    import dagster as dg

    from librarian_dagster.dead_runs import cancel_for_stop, end_stopped_runs

    ended = 0
    # The embedded database is this machine's alone: its untagged runs were launched here.
    ran_here = settings.database_url is None
    try:
        with dg.DagsterInstance.from_config(dagster_home) as instance:
            began = time.time()
            going = cancel_for_stop(instance, untagged_ran_here=ran_here)
            _stop_children(children)
            if ran_here:
                ended = end_stopped_runs(instance, going, began)
    except Exception as exc:  # the database went first: the next start marks them failed
        say("alert", f"could not cancel the runs going at the stop: {type(exc).__name__}: {exc}")
        return
    finally:
        _stop_children(children)
    if ended:
        say("stopped", f"{ended} run(s) canceled with the stop: run again at the next start")


def _child_commands(args: argparse.Namespace, dagster) -> list[tuple[str, list[str]]]:
    """Dagster's code server, webserver and daemon (core/service/dagster_processes.py), then the
    recall server."""
    commands = dagster.commands()
    if not args.no_mcp:
        # `up` watches the database for all its children.
        mcp_cmd = [sys.executable, "-m", "mcp_server", "--transport", "http", "--no-database-watch"]
        if args.mcp_port:
            mcp_cmd += ["--port", str(args.mcp_port)]
        commands.append(("mcp", mcp_cmd))
    return commands


def _stop_children(children: list[tuple[str, subprocess.Popen]]) -> None:
    """SIGTERM every child's process group, give them a short grace, SIGKILL what is left.

    Whole groups, not just the children: the code server's run workers are in its group, and
    they hold database handles until they are gone. The
    grace is short so that everything, the embedded server's stop included, is over within 10 s
    (decision 0015): on a busy machine the Dagster processes take 10 to 20 s to finish on their
    own, and their state lives in PostgreSQL, which a kill leaves consistent. A run killed this
    way stays STARTED until the next `up` or `ingest` marks it failed (dead_runs.py).
    """
    _kill_groups(children, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_SECONDS
    while any(_group_alive(proc.pid) for _name, proc in children) and time.monotonic() < deadline:
        _reap(children)
        time.sleep(0.1)
    _kill_groups(children, signal.SIGKILL)
    killed_by = time.monotonic() + 3
    while any(_group_alive(proc.pid) for _name, proc in children) and time.monotonic() < killed_by:
        _reap(children)
        time.sleep(0.05)
    for _name, proc in children:
        proc.wait()


def _kill_groups(children: list[tuple[str, subprocess.Popen]], signum: int) -> None:
    for _name, proc in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signum)


def _reap(children: list[tuple[str, subprocess.Popen]]) -> None:
    """Collect the exit status of children that ended, so they do not linger as zombies."""
    for _name, proc in children:
        proc.poll()


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (a zombie leader counts as gone)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    import psutil  # here, not at the top: every `librarian` command imports this module

    # killpg(0) also succeeds while only zombies are left (a container without an init never
    # reaps orphans): look at the members.
    members = [p for p in psutil.process_iter(["status"]) if _in_group(p, pgid)]
    return any(p.info["status"] != psutil.STATUS_ZOMBIE for p in members)


def _in_group(process: "psutil.Process", pgid: int) -> bool:
    try:
        return os.getpgid(process.pid) == pgid
    except (ProcessLookupError, PermissionError):
        return False
