"""Test helpers shared across folders: settings in a temp home, a live MCP server over HTTP."""

import contextlib
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import dagster as dg
import psycopg
import pytest
from psycopg import sql

from librarian_dagster.core.settings import Settings
from tests.conftest import AGENTS_AWAY


def make_settings(tmp_path: Path, database_url: str, mirror: Path | None = None) -> Settings:
    return Settings.from_env(
        {
            **AGENTS_AWAY,
            "LIBRARIAN_HOME": str(tmp_path / "home"),
            "LIBRARIAN_MIRROR": str(mirror or tmp_path / "mirror"),
            "LIBRARIAN_DATABASE_URL": database_url,
            "LIBRARIAN_SETTLE_SECONDS": "120",
        }
    )


def settings_in_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, database_url: str, mirror: Path
) -> Settings:
    """`make_settings`, with its home, mirror and database set in the environment too, for what
    reads `Settings.from_env()` itself (the CLI, `sensor_tick`)."""
    settings = make_settings(tmp_path, database_url, mirror)
    monkeypatch.setenv("LIBRARIAN_HOME", str(settings.home))
    monkeypatch.setenv("LIBRARIAN_MIRROR", str(mirror))
    monkeypatch.setenv("LIBRARIAN_DATABASE_URL", database_url)
    return settings


def librarian(
    args: Sequence[str], env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch, capfd
) -> subprocess.CompletedProcess[str]:
    """`librarian ARGS` called in this process with `env` as its whole environment: its exit
    code and what it wrote to stdout and stderr (file descriptors 1 and 2, so a library's own
    handlers are caught too), as `subprocess.run` would give them, without a second interpreter
    importing Dagster again.

    For a test of what a command does. A test of the process itself (a signal, the exit of a real
    exec, what a fresh interpreter prints) runs it as a subprocess.
    """
    from librarian_dagster.cli.main import main

    for name in set(os.environ) - set(env):
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # Set by the commands that open Dagster's instance; gone with the test, as with a process.
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    capfd.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's refusals
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["librarian", *args], code, out, err)


def age(path: Path, seconds: float) -> None:
    """Make a file look last written `seconds` ago (so the sensor sees it as settled)."""
    then = time.time() - seconds
    os.utime(path, (then, then))


class Terminal:
    """What a process prints on one of its pipes, read line by line as it comes: a pipe left
    unread fills (`--verbose` fills one fast) and the process then blocks on it."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._reader.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def to_the_end(self) -> list[str]:
        """Every line, once the pipe has closed (the process exited)."""
        self._reader.join(timeout=10)
        return self.lines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_http(app, port: int):
    """Run an ASGI app with uvicorn on 127.0.0.1:port in a thread, for the test's duration."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("MCP test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def sensor_tick(definitions, instance, cursor):
    """Evaluate the sessions sensor once, with the resources bound from the environment."""
    import dagster as dg

    from librarian_dagster.defs.resources import build_resources

    sensor = definitions.resolve_sensor_def("sessions_sensor")
    with dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        definitions=definitions,
        resources=build_resources(Settings.from_env()),
    ) as context:
        return sensor(context)


def write_transcript(folder: Path, session_id: str, prompt: str, reply: str) -> Path:
    """A minimal real-format Claude Code transcript: one typed prompt and one reply."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    records = [
        {
            "type": "user",
            "sessionId": session_id,
            "uuid": "u1",
            "cwd": "/work/app",
            "timestamp": "2026-11-01T10:00:00Z",
            "message": {"role": "user", "content": prompt},
        },
        {
            "type": "assistant",
            "sessionId": session_id,
            "uuid": "a1",
            "timestamp": "2026-11-01T10:00:05Z",
            "message": {
                "id": "msg_1",
                "role": "assistant",
                "model": "claude-test",
                "content": [{"type": "text", "text": reply}],
            },
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def transcript_line(
    session_id: str,
    role: str,
    text: str,
    uuid: str,
    *,
    timestamp: str = "2026-11-01T10:00:00Z",
    cwd: str | None = "/work/app",
) -> bytes:
    """One real-format record, a typed prompt (`user`) or a text reply, as a JSONL line in bytes:
    for tests that cut, corrupt, splice or append lines."""
    import json

    message = (
        {"role": "user", "content": text}
        if role == "user"
        else {"id": f"msg_{uuid}", "role": "assistant", "model": "claude-test",
              "content": [{"type": "text", "text": text}]}
    )  # fmt: skip
    record = {
        "type": role,
        "uuid": uuid,
        "sessionId": session_id,
        **({"cwd": cwd} if cwd is not None else {}),
        "timestamp": timestamp,
        "message": message,
    }
    return json.dumps(record).encode() + b"\n"


def append_prompt(
    path: Path, session_id: str, text: str, uuid: str, timestamp: str = "2026-11-01T10:00:00Z"
) -> None:
    """The session goes on (resumed): one more typed prompt at the end of its transcript. No
    cwd of its own, so the session's project stays what its earlier records say."""
    with path.open("ab") as out:
        out.write(transcript_line(session_id, "user", text, uuid, timestamp=timestamp, cwd=None))


@contextlib.contextmanager
def tmpfs(folder: Path, size: str = "2m", read_only: bool = False, or_skip: bool = True):
    """A small real filesystem at `folder` (created): a full disk or a read-only one, for real.

    Mounting needs root (or CAP_SYS_ADMIN); where it is refused, the test is skipped saying so,
    or (`or_skip=False`) `folder` stays a plain folder and the context gives why, a str, for a
    test that has more to do than fill it.
    """
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    options = f"size={size},mode=0755" + (",ro" if read_only else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        why = f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'not permitted'})"
        if or_skip:
            pytest.skip(why)
        yield why
        return
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Fill the filesystem of `folder` to the last byte; remove the file returned to free it."""
    import errno

    filler = folder / "filler"
    with filler.open("wb", buffering=0) as out:
        block = b"\0" * 65536
        while True:
            try:
                out.write(block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    # Smaller writes until not even one byte fits.
    with filler.open("ab", buffering=0) as out:
        for size in (4096, 1):
            while True:
                try:
                    out.write(b"\0" * size)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return filler


STORED_TABLES = ("memories", "indexed_chunks", "session_sources")


def rows_per_session(database_url: str) -> dict[str, dict[str, int]]:
    """What the store holds, counted: rows per session in each of `STORED_TABLES`."""
    with psycopg.connect(database_url) as conn:
        query = sql.SQL("SELECT session_id, count(*) FROM {} GROUP BY session_id")
        return {
            table: dict(conn.execute(query.format(sql.Identifier(table))).fetchall())
            for table in STORED_TABLES
        }


@dg.asset(pool="llm")
def pooled_step() -> int:
    """Stands for the digest: a step in the `llm` pool."""
    return 1


def assert_shared_instance_config(instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """What core/service/dagster_instance.yaml sets (the embedded instance and deploy/dagster.yaml
    share it) is in effect in `instance`: the queue, the `llm` pool, run retries. Runs
    `pooled_step`, so the pool is shown taken, not only written; returns that run."""
    assert isinstance(instance.run_coordinator, dg.QueuedRunCoordinator)
    # What the daemon's queue reads: `concurrency:` merged over the coordinator's own config.
    concurrency = instance.get_concurrency_config()
    queue = concurrency.run_queue_config
    assert queue is not None
    assert queue.max_concurrent_runs == 2
    assert {"key": "dagster/backfill", "limit": 1} in queue.tag_concurrency_limits
    assert concurrency.pool_config.default_pool_limit == 1
    granularity = concurrency.pool_config.pool_granularity
    assert granularity is not None and granularity.value == "op"

    assert instance.run_retries_enabled
    assert instance.run_retries_max_retries == 2
    # A failed step (a leak check, a bad digest) is not run again; a dead worker is.
    assert not instance.run_retries_retry_on_asset_or_op_failure

    result = dg.materialize([pooled_step], instance=instance)
    assert result.success
    # The pool met its first step and took the default limit of one slot.
    assert instance.event_log_storage.get_concurrency_info("llm").slot_count == 1
    return result


def connections_made(url: str, *, settled: bool = False) -> int:
    """Connections ever made to the database at `url` (PostgreSQL's count, this one's included).

    A server process adds its connection to the count when it first reports its statistics,
    which a busy server may put off for seconds. With `settled`, the count once every
    connection made so far is in it: read again until it grows by no more than each reading's
    own connection in a second's wait."""
    while True:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
        made = int(row[0]) if row else 0
        if not settled:
            return made
        time.sleep(1.0)
        again = connections_made(url)
        if again - made <= 1:
            return again


def connections_open(url: str, *, until_none: float = 0.0) -> int:
    """Connections open to the database at `url` but this one's. With `until_none`, asked again
    for up to that many seconds until none is left: a server process leaves the server's list a
    moment after its client hung up."""
    deadline = time.monotonic() + until_none
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
            others = row[0] if row else 0
            if others == 0 or time.monotonic() >= deadline:
                return others
            time.sleep(0.1)


REPO = Path(__file__).resolve().parents[1]


def linked_packages(root: Path) -> Path:
    """The packages (and pyproject.toml, by which Dagster finds defs/) under `root` as links to
    this checkout's files: a file `edit` changes is written in place of its link, so the
    checkout itself is never touched."""
    for package in ("librarian_dagster", "mcp_server"):
        shutil.copytree(REPO / package, root / package, copy_function=os.symlink,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    (root / "pyproject.toml").symlink_to(REPO / "pyproject.toml")
    return root


def edit(path: Path, change) -> None:
    """Write `change(text)` in place of the link `path` is (see `linked_packages`)."""
    text = path.read_text(encoding="utf-8")
    path.unlink()
    path.write_text(change(text), encoding="utf-8")
