"""Faults during `librarian push` (issue 54): the push killed at random points, the recall server
killed mid-push, a server that answers 500 or hangs. Each ends with every session staged once on
the server and, after its sensor and ingest, remembered exactly once.

The server is the real one (real PostgreSQL, its real `POST /push`), here in a thread behind a
stand-in that injects the faults (`Faults`), or as a process of its own that is SIGKILLed; the
laptop's push is the real command as a process (what a kill needs) or, where a test needs a
client timeout shorter than the command's, its client in this process."""

import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.uploads import SESSIONS, VERSIONS
from librarian_dagster.core.models.calls import RetryBounds
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.push.client import PUSH_PATH, PushClient, PushStopped
from librarian_dagster.core.push.pusher import PushState, pending, push_sessions, state_file
from librarian_dagster.core.service import tokens
from librarian_dagster.core.settings import Settings
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.definitions import defs as load_defs
from librarian_dagster.ingest import open_instance
from mcp_server.app import Served, build_server, http_app
from mcp_server.auth import TokenFileVerifier
from mcp_server.push_api import Intake
from tests.conftest import AGENTS_AWAY, TRANSCRIPTS
from tests.helpers import age, append_prompt, free_port, serve_http, settings_in_env
from tests.test_push import FIXTURES, PUSH, Server

pytestmark = pytest.mark.process

CLAUDE = TRANSCRIPTS / "daaain__claude-code-log"
CLAUDE_IDS = [
    "03eb5929-52b3-4b13-ada3-b93ae35806b8",
    "fe869ecb-c176-478f-9734-7e4b8ef12cff",
    "ef958aa1-0e93-49f0-bb71-150f63befcd1",  # with its subagents' files
]
CODEX_IDS = [
    "019e0000-1111-7000-8000-000000000001",  # with its review and helper threads' files
    "019f0000-4444-7000-8000-000000000004",
]
PI_ID = "019e0a11-c801-71e1-96ba-8bf69044a10c"
SESSIONS_PUSHED = {
    **dict.fromkeys(CLAUDE_IDS, "claude-code"),
    **dict.fromkeys(CODEX_IDS, "codex"),
    PI_ID: "pi",
}
KILL_TRIALS = 24


class Faults:
    """An ASGI stand-in before the server: each `POST /push` meets the next fault planned (none
    once the plan is done). `500`: answered 500 unseen by the server; `500 after`: the server
    stages it, the laptop hears 500; `hang`/`hang after`: no answer for `hang_s`, before or after
    the server took it; `kill`/`kill after`: the pushing process SIGKILLed as its request
    arrives, or as the server's answer leaves."""

    def __init__(self, app) -> None:
        self.app = app
        self.plan: list[str] = []
        self.victim: int | None = None
        self.hang_s = 0.0
        self.seen = self.busy = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] != PUSH_PATH:
            await self.app(scope, receive, send)
            return
        self.seen += 1
        self.busy += 1
        try:
            await self._faulty(self.plan.pop(0) if self.plan else "", scope, receive, send)
        finally:
            self.busy -= 1

    def settled(self) -> None:
        """Wait until no push is in the server, a hung one included."""
        deadline = time.monotonic() + 30
        while self.busy and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not self.busy

    async def _faulty(self, fault: str, scope, receive, send) -> None:
        if fault == "500":
            await _answer_500(send)
            return
        if fault in ("hang", "kill"):
            await self._hang_or_kill(fault)
        if fault.endswith(" after"):
            answer: list[dict] = []

            async def held(message) -> None:
                answer.append(message)

            await self.app(scope, receive, held)
            await self._hang_or_kill(fault.removesuffix(" after"))
            if fault == "500 after":
                await _answer_500(send)
                return
            for message in answer:
                await send(message)
            return
        await self.app(scope, receive, send)

    async def _hang_or_kill(self, fault: str) -> None:
        if fault == "hang":
            await asyncio.sleep(self.hang_s)
        elif fault == "kill" and self.victim is not None:
            os.kill(self.victim, signal.SIGKILL)


async def _answer_500(send) -> None:
    # Retry-After 0: the command's own backoff (seconds) would only slow the test down; the
    # backoff itself is what the in-process tests use with bounds of their own.
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"0")]
    await send({"type": "http.response.start", "status": 500, "headers": headers})
    await send({"type": "http.response.body", "body": b'{"error": "stand-in failure"}'})


class FaultyServer(Server):
    faults: Faults


@pytest.fixture
def server(tmp_path, database_url, monkeypatch) -> Iterator[FaultyServer]:
    settings = settings_in_env(monkeypatch, tmp_path / "server", database_url, tmp_path / "none")
    token, _ = tokens.add(settings.tokens_file, "alice-laptop", person="alice")
    store = Store(database_url)
    recall = build_server(
        Served.of(store, local_embedder()),
        verifier=TokenFileVerifier(settings.tokens_file),
        intake=Intake(settings.uploads, 5_000_000),
        own_person="server-owner",
    )
    faults = Faults(http_app(recall, "127.0.0.1"))
    instance = open_instance(settings)
    try:
        with serve_http(faults, free_port()) as url:
            served = FaultyServer(settings, url, {"alice": token}, instance, load_defs())
            served.faults = faults
            yield served
    finally:
        dispose_instance(instance)
        store.close()


def laptop(root: Path) -> dict[str, str]:
    """A laptop of three real Claude Code sessions, two of Codex and one of Pi, settled; its
    environment for `librarian push`."""
    mirror = root / "claude" / "-home-me-app"
    mirror.mkdir(parents=True)
    for session_id in CLAUDE_IDS:
        shutil.copy(CLAUDE / f"{session_id}.jsonl", mirror)
        if (CLAUDE / session_id).is_dir():
            shutil.copytree(CLAUDE / session_id, mirror / session_id)
    shutil.copytree(FIXTURES / "codex" / "sessions", root / "codex")
    shutil.copytree(FIXTURES / "pi" / "sessions", root / "pi")
    for path in root.rglob("*"):
        if path.is_file():
            age(path, 3600)
    return {
        **AGENTS_AWAY,
        "PATH": os.environ["PATH"],
        "HOME": str(root),
        "LIBRARIAN_HOME": str(root / "home"),
        "LIBRARIAN_MIRROR": str(root / "claude"),
        "LIBRARIAN_CODEX_SESSIONS": str(root / "codex"),
        "LIBRARIAN_PI_SESSIONS": str(root / "pi"),
    }


def start_push(env: dict[str, str], url: str, token: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*PUSH, url, "--machine", "lap"],
        env={**env, "LIBRARIAN_MCP_TOKEN": token},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def push_to_the_end(env: dict[str, str], url: str, token: str) -> str:
    process = start_push(env, url, token)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert "0 refused, 0 not read now" in err, err
    return err


def staged_once(uploads: Path) -> dict[str, str]:
    """{session id: the SHA-256 staged}, checking that each session pushed has exactly one
    version, named by its link, and that nothing half-written is left beside them."""
    staged = {}
    for session_id, agent in SESSIONS_PUSHED.items():
        versions = sorted((uploads / VERSIONS / agent).glob(f"{session_id}.*"))
        assert len(versions) == 1, (session_id, versions)
        link = uploads / SESSIONS / agent / session_id
        assert os.readlink(link).endswith(versions[0].name)
        staged[session_id] = versions[0].name.rsplit(".", 1)[-1]
    leftovers = [p.name for p in (uploads / VERSIONS).glob("*/.*")]
    leftovers += [p.name for p in (uploads / SESSIONS).glob("*/.*")]
    assert leftovers == []
    return staged


def recorded(database_url: str) -> dict[str, str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT session_id, sha256 FROM pushed_sessions").fetchall()
    return dict(rows)  # type: ignore[arg-type]


def memories_per_session(database_url: str) -> dict[str, int]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute("SELECT session_id, count(*) FROM memories GROUP BY 1").fetchall()
    return dict(rows)  # type: ignore[arg-type]


def remembered_once(server: Server) -> None:
    """One sensor tick ingests every session pushed, once; a second finds nothing new."""
    assert server.ingest() == sorted(SESSIONS_PUSHED)
    assert server.ingest() == []
    assert memories_per_session(server.settings.database_url) == dict.fromkeys(SESSIONS_PUSHED, 1)


def test_a_push_killed_at_random_points_leaves_every_session_once(server, tmp_path):
    env = laptop(tmp_path / "laptop")
    token, faults = server.tokens["alice"], server.faults
    rng = random.Random(54)
    grown = CLAUDE_IDS[0]
    transcript = tmp_path / "laptop" / "claude" / "-home-me-app" / f"{grown}.jsonl"
    # A whole push, timed, so that a kill by the clock lands anywhere inside one.
    began = time.monotonic()
    push_to_the_end(env, server.url, token)
    whole = time.monotonic() - began
    kinds, said = [], ""
    for trial in range(KILL_TRIALS):
        if rng.random() < 0.5:
            # The session goes on between pushes: a new version is what is cut.
            said = f"and one more thing, take {trial}"
            append_prompt(transcript, grown, said, f"k{trial}")
            age(transcript, 3600)
        # What was sent is forgotten (a SIGKILL keeps a finished push's record only): every
        # session is sent again, so the k-th request to be cut is there.
        shutil.rmtree(Path(env["LIBRARIAN_HOME"]) / "push", ignore_errors=True)
        kind = rng.choice(["clock", "kill", "kill after"])
        faults.seen, faults.plan = 0, [""] * rng.randrange(len(SESSIONS_PUSHED)) + [kind]
        process = start_push(env, server.url, token)
        faults.victim = process.pid
        if kind == "clock":
            faults.plan = []
            time.sleep(rng.uniform(0.0, 0.9 * whole))
            process.kill()
        process.wait(timeout=60)
        assert process.stderr is not None
        process.stderr.close()
        kinds.append((kind, process.returncode, faults.seen, len(faults.plan)))
    faults.plan, faults.victim = [], None
    # Most trials were cut: a kill by the clock may come after a push that had little to do.
    assert sum(k[1] == -signal.SIGKILL for k in kinds) >= 20, kinds
    push_to_the_end(env, server.url, token)
    staged = staged_once(server.settings.uploads)
    assert recorded(server.settings.database_url) == staged
    (last,) = (server.settings.uploads / SESSIONS / "claude-code" / grown).rglob(f"{grown}.jsonl")
    assert last.read_text().endswith(f'{said}"}}}}\n')  # the newest version, whole
    remembered_once(server)


def test_a_server_failing_then_healthy_stages_each_session_once(server, tmp_path):
    env = laptop(tmp_path / "laptop")
    token, faults = server.tokens["alice"], server.faults

    faults.plan = ["500"] * 40
    failed = start_push(env, server.url, token)
    _, err = failed.communicate(timeout=60)
    assert failed.returncode == 1
    assert "gave up after 4 tries; last: the server answered 500: stand-in failure" in err, err
    assert faults.seen == 4  # within its bounds, and no session after the one that failed
    assert not (server.settings.uploads / SESSIONS).exists()
    assert recorded(server.settings.database_url) == {}

    # Healthy again, but each of the first sessions meets a failure before it passes: 500 (the
    # server never saw it), or 500 once the server had staged it (it answers `unchanged` next).
    faults.plan = ["500", "", "500 after", "", "500", "500 after", "500", ""]
    err = push_to_the_end(env, server.url, token)
    assert f"{len(SESSIONS_PUSHED) - 2} pushed, 2 unchanged" in err, err
    assert faults.plan == []
    # Staged and recorded once is what the sensor ingests once (the tests above ingest it).
    assert recorded(server.settings.database_url) == staged_once(server.settings.uploads)


def test_a_hanging_server_is_waited_for_within_bounds_then_each_session_staged_once(
    server, tmp_path
):
    settings = Settings.from_env(laptop(tmp_path / "laptop"))
    bounds = RetryBounds(attempts=3, backoff_seconds=0.05, max_wait_seconds=1.0, env_prefix=None)
    faults = server.faults
    faults.hang_s = 1.5

    def push(client_timeout: float) -> list[str]:
        client = PushClient(server.url, server.tokens["alice"], "lap",
                            timeout=client_timeout, bounds=bounds)  # fmt: skip
        state = PushState(state_file(settings, server.url))
        try:
            candidates = pending(settings, state, time.time())
            done = push_sessions(settings, client, state, candidates, lambda _: None)
        finally:
            client.close()
        return [d.status for d in done]

    # Every answer too late: three tries, then the push stops saying so.
    faults.plan = ["hang"] * 3
    with pytest.raises(PushStopped, match=r"gave up after 3 tries; last: .* not answer in time"):
        push(0.3)
    # Answers late twice: before the server took it, and after (it has it staged: `unchanged`).
    faults.plan = ["hang", "", "hang after", ""]
    statuses = push(0.3)
    assert statuses.count("pushed") == len(SESSIONS_PUSHED) - 1, statuses
    assert faults.plan == []
    # The hung requests reach the server late, after their laptop gave up on them: nothing
    # of them is staged twice or left half-written.
    faults.settled()
    assert recorded(server.settings.database_url) == staged_once(server.settings.uploads)


def start_recall_server(home: Path, database_url: str, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    env.update({**AGENTS_AWAY, "LIBRARIAN_HOME": str(home), "LIBRARIAN_DATABASE_URL": database_url})
    process = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "--port", str(port), "--no-database-watch"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "the recall server exited as it started"
        try:
            httpx.post(f"http://127.0.0.1:{port}{PUSH_PATH}", timeout=1)
            return process
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError("the recall server did not start")


def test_the_recall_server_killed_mid_push_then_started_again(tmp_path, database_url, monkeypatch):
    settings = settings_in_env(monkeypatch, tmp_path / "server", database_url, tmp_path / "none")
    token, _ = tokens.add(settings.tokens_file, "alice-laptop", person="alice")
    env = laptop(tmp_path / "laptop")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    recall = start_recall_server(settings.home, database_url, port)
    pushing = start_push(env, url, token)
    restarted = None
    instance = open_instance(settings)
    try:
        # Killed as soon as it is writing the first session (or, if too quick to be seen, has
        # staged one): the rest of the push meets no server, then the new one.
        versions = settings.uploads / VERSIONS
        while not any(versions.glob("*/*")) and pushing.poll() is None:
            time.sleep(0.002)
        recall.kill()
        recall.wait(timeout=10)
        restarted = start_recall_server(settings.home, database_url, port)
        pushing.communicate(timeout=120)  # done on a retry, or gave up: either way, again
        push_to_the_end(env, url, token)
        assert recorded(database_url) == staged_once(settings.uploads)
        remembered_once(Server(settings, url, {}, instance, load_defs()))
    finally:
        dispose_instance(instance)
        for process in (recall, restarted, pushing):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(timeout=10)
