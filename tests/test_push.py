"""A laptop and a server as two LIBRARIAN_HOMEs on this machine: the real `librarian push` (a
process of its own) against a real recall server (real PostgreSQL), the server's real sensor and
ingest job. Two people push; every session is remembered once, with the right person."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
import pytest

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.agents import folders
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.service import tokens
from librarian_dagster.core.service.journal import journal_path
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.definitions import defs as load_defs
from librarian_dagster.defs.partitions import session_id_of
from librarian_dagster.ingest import open_instance
from mcp_server.app import Served, build_server, http_app
from mcp_server.auth import TokenFileVerifier
from mcp_server.push_api import Intake
from tests.conftest import AGENTS_AWAY
from tests.helpers import (
    age,
    append_prompt,
    free_port,
    sensor_tick,
    serve_http,
    settings_in_env,
    tmpfs,
    transcript_line,
    write_transcript,
)

pytestmark = pytest.mark.process

FIXTURES = Path(__file__).parent / "fixtures" / "agents"
CODEX_ID = "019e0000-1111-7000-8000-000000000001"
CODEX_FILE = "2026/05/01/rollout-2026-05-01T10-00-00-019e0000-1111-7000-8000-000000000001.jsonl"
ALICE_CLAUDE = "a11ce000-0000-4000-8000-000000000001"
BOB_CLAUDE = "b0b00000-0000-4000-8000-000000000002"
SCRATCH = "5c7a0000-0000-4000-8000-000000000003"
EDITED = "ed17ed00-0000-4000-8000-000000000004"
# A GitHub token's shape: the leak-check's rule for it must keep it off the wire.
SECRET = "ghp_" + "Zq8Lm2Np4Rt6Vx8Bz1Cd3Fg5Hj7Kl9Mn0Pq2"


class Server:
    """The recall server on 127.0.0.1 with two people's tokens, and its side's ingest."""

    def __init__(self, settings, url: str, people: dict[str, str], instance, definitions):
        self.settings, self.url, self.tokens = settings, url, people
        self.instance, self.definitions = instance, definitions
        self.cursor: str | None = None

    def ingest(self) -> list[str]:
        """One sensor tick and the runs it asks for; the sessions they were for."""
        result = sensor_tick(self.definitions, self.instance, self.cursor)
        self.cursor = getattr(result, "cursor", None) or self.cursor
        requests = getattr(result, "run_requests", None) or []
        for request in getattr(result, "dynamic_partitions_requests", None) or []:
            self.instance.add_dynamic_partitions(
                request.partitions_def_name, list(request.partition_keys)
            )
        job = self.definitions.resolve_job_def("ingest_session")
        for request in requests:
            outcome = job.execute_in_process(
                partition_key=request.partition_key, instance=self.instance
            )
            assert outcome.success
        return sorted(session_id_of(r.partition_key) for r in requests)

    def people(self) -> dict[str, tuple[str | None, str]]:
        with psycopg.connect(self.settings.database_url) as conn:
            rows = conn.execute("SELECT session_id, person, agent FROM memories").fetchall()
        return {sid: (person, agent) for sid, person, agent in rows}


@pytest.fixture
def server(tmp_path, database_url, monkeypatch):
    settings = settings_in_env(monkeypatch, tmp_path / "server", database_url, tmp_path / "none")
    people = {}
    for person in ("alice", "bob"):
        people[person], _ = tokens.add(settings.tokens_file, f"{person}-laptop", person=person)
    intake = Intake(settings.uploads, 5_000_000)
    store = Store(database_url)
    recall = build_server(
        Served.of(store, local_embedder()),
        verifier=TokenFileVerifier(settings.tokens_file),
        intake=intake,
        own_person="server-owner",
    )
    definitions = load_defs()
    instance = open_instance(settings)
    try:
        with serve_http(http_app(recall, "127.0.0.1"), free_port()) as url:
            yield Server(settings, url, people, instance, definitions)
    finally:
        dispose_instance(instance)
        store.close()


def laptop(root: Path, claude_id: str, prompt: str, codex: bool = True) -> dict[str, str]:
    """A laptop's home and agents' folders, with one Claude Code session and (`codex`) the
    Codex fixture session, settled; its environment for `librarian push`."""
    mirror = root / "claude"
    path = write_transcript(mirror / "-home-me-app", claude_id, prompt, "Done: rotated it.")
    age(path, 600)
    codex_root = root / "codex"
    if codex:
        target = codex_root / CODEX_FILE
        target.parent.mkdir(parents=True)
        shutil.copy(FIXTURES / "codex" / "sessions" / CODEX_FILE, target)
        age(target, 600)
    return {
        **AGENTS_AWAY,
        "PATH": os.environ["PATH"],
        "HOME": str(root),
        "LIBRARIAN_HOME": str(root / "home"),
        "LIBRARIAN_MIRROR": str(mirror),
        "LIBRARIAN_CODEX_SESSIONS": str(codex_root),
    }


PUSH = [sys.executable, "-m", "librarian_dagster.cli.main", "push"]


def push(env: dict[str, str], url: str, token: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PUSH, url, "--machine", "lap", *extra],
        env={**env, "LIBRARIAN_MCP_TOKEN": token},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def every_byte(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file())


def test_two_people_push_and_each_session_is_remembered_once_as_theirs(server, tmp_path):
    alice = laptop(tmp_path / "alice", ALICE_CLAUDE, f"rotate the deploy token {SECRET} please")
    assert SECRET.encode() in every_byte(tmp_path / "alice" / "claude")

    first = push(alice, server.url, server.tokens["alice"])
    assert first.returncode == 0, first.stderr
    assert first.stderr.count("pushed   ") == 2, first.stderr
    assert "2 pushed, 0 unchanged, 0 refused" in first.stderr
    assert SECRET.encode() not in every_byte(server.settings.uploads)
    assert b"[REDACTED:" in every_byte(server.settings.uploads)

    assert server.ingest() == sorted([ALICE_CLAUDE, CODEX_ID])
    assert server.people() == {
        ALICE_CLAUDE: ("alice", "claude-code"),
        CODEX_ID: ("alice", "codex"),
    }
    said = journal_path(server.settings.log_dir).read_text(encoding="utf-8")
    assert "alice's codex" in said and "alice's claude-code" in said

    # The same bytes again, even with the laptop's record of them gone: nothing new anywhere.
    again = push(alice, server.url, server.tokens["alice"])
    assert again.returncode == 0 and "0 pushed" in again.stderr, again.stderr
    shutil.rmtree(Path(alice["LIBRARIAN_HOME"]) / "push")
    forgot = push(alice, server.url, server.tokens["alice"])
    assert "0 pushed, 2 unchanged" in forgot.stderr, forgot.stderr
    assert server.ingest() == []

    # Bob's laptop holds a copy of Alice's Codex session: never staged over hers.
    bob = laptop(tmp_path / "bob", BOB_CLAUDE, "why does the billing test fail on CI?")
    pushed = push(bob, server.url, server.tokens["bob"])
    assert pushed.returncode == 1
    assert "refused" in pushed.stderr and "another person" in pushed.stderr, pushed.stderr
    assert "1 pushed, 0 unchanged, 1 refused" in pushed.stderr
    assert server.ingest() == [BOB_CLAUDE]
    assert server.people()[BOB_CLAUDE] == ("bob", "claude-code")
    assert server.people()[CODEX_ID] == ("alice", "codex")

    # Alice's session goes on: pushed again whole, remembered again once.
    transcript = Path(alice["LIBRARIAN_MIRROR"]) / "-home-me-app" / f"{ALICE_CLAUDE}.jsonl"
    append_prompt(transcript, ALICE_CLAUDE, "and the staging one too", "u9")
    age(transcript, 600)
    grown = push(alice, server.url, server.tokens["alice"])
    assert "1 pushed, 0 unchanged" in grown.stderr, grown.stderr
    assert server.ingest() == [ALICE_CLAUDE]
    assert len(server.people()) == 3
    versions = (server.settings.uploads / "versions" / "claude-code").glob(f"{ALICE_CLAUDE}.*")
    assert len(list(versions)) == 1  # the old version is gone


def test_a_revoked_token_pushes_nothing_more_and_a_forgotten_session_is_not_taken_again(
    server, tmp_path
):
    from librarian_dagster.core.assembly.forgetting import forget_sessions

    alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "hello", codex=True)
    assert push(alice, server.url, server.tokens["alice"]).returncode == 0
    assert server.ingest() == sorted([ALICE_CLAUDE, CODEX_ID])
    store = Store(server.settings.database_url)
    try:
        forget_sessions([CODEX_ID], server.settings, store, history=None)
    finally:
        store.close()
    assert not list((server.settings.uploads / "versions" / "codex").iterdir())
    shutil.rmtree(Path(alice["LIBRARIAN_HOME"]) / "push")  # the laptop sends all again
    again = push(alice, server.url, server.tokens["alice"])
    assert "forgotten on the server" in again.stderr, again.stderr
    assert not list((server.settings.uploads / "versions" / "codex").iterdir())
    tokens.revoke(server.settings.tokens_file, "alice-laptop")
    transcript = Path(alice["LIBRARIAN_MIRROR"]) / "-home-me-app" / f"{ALICE_CLAUDE}.jsonl"
    append_prompt(transcript, ALICE_CLAUDE, "one more thing", "u7")
    age(transcript, 600)
    refused = push(alice, server.url, server.tokens["alice"])
    assert refused.returncode == 1 and "refused the token" in refused.stderr
    assert set(server.people()) == {ALICE_CLAUDE}  # what it pushed stays


def test_a_slow_upload_holds_up_no_other(server, tmp_path):
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(server.url)
    slow = socket.create_connection((where.hostname, where.port), timeout=30)
    try:
        slow.sendall(
            b"POST /push HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {server.tokens['bob']}\r\n".encode()
            + b"Content-Type: application/json\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: 4000000\r\n\r\n\x1f\x8b"
        )  # a body that has barely begun, and will not go on while the other pushes
        alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "hello there")
        done = push(alice, server.url, server.tokens["alice"])
        assert "2 pushed" in done.stderr, done.stderr
    finally:
        slow.close()
    assert server.ingest() == sorted([ALICE_CLAUDE, CODEX_ID])


def test_a_bad_token_pushes_nothing_and_says_why(server, tmp_path):
    alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "hello", codex=False)
    refused = push(alice, server.url, "lbr_not-a-token")
    assert refused.returncode == 1
    assert "refused the token" in refused.stderr
    assert not (server.settings.uploads / "sessions").exists()


def test_a_server_without_push_is_said_to_be_too_old(tmp_path, database_url):
    store = Store(database_url)
    try:
        recall = build_server(Served.of(store, local_embedder()))  # no intake: no /push
        with serve_http(http_app(recall, "127.0.0.1"), free_port()) as url:
            alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "hello", codex=False)
            refused = push(alice, url, "")
    finally:
        store.close()
    assert refused.returncode == 1
    assert "too old" in refused.stderr, refused.stderr


def test_a_private_project_is_pushed_private_and_an_excluded_one_never_leaves(server, tmp_path):
    alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "hello there", codex=False)
    scratch = Path(alice["LIBRARIAN_MIRROR"]) / "-work-scratch" / f"{SCRATCH}.jsonl"
    scratch.parent.mkdir(parents=True)
    scratch.write_bytes(
        transcript_line(SCRATCH, "user", "try the scratch idea", "u1", cwd="/work/scratch")
        + transcript_line(SCRATCH, "assistant", "tried it", "a1", cwd="/work/scratch")
    )
    age(scratch, 600)
    env = {**alice, "LIBRARIAN_PRIVATE_PROJECTS": "app", "LIBRARIAN_PUSH_EXCLUDE": "scratch"}
    done = push(env, server.url, server.tokens["alice"])
    assert "1 pushed" in done.stderr, done.stderr
    assert SCRATCH.encode() not in every_byte(server.settings.uploads)
    assert server.ingest() == [ALICE_CLAUDE]
    with psycopg.connect(server.settings.database_url) as conn:
        rows = conn.execute("SELECT session_id, person, private FROM memories").fetchall()
    assert rows == [(ALICE_CLAUDE, "alice", True)]


def test_push_state_names_what_was_sent(server, tmp_path):
    alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "hello", codex=False)
    assert push(alice, server.url, server.tokens["alice"]).returncode == 0
    (state,) = (Path(alice["LIBRARIAN_HOME"]) / "push").glob("*.json")
    sessions = json.loads(state.read_text())["sessions"]
    assert set(sessions) == {f"claude-code/{ALICE_CLAUDE}"}


def _post(server, token: str, doc: dict | bytes) -> httpx.Response:
    import gzip

    body = doc if isinstance(doc, bytes) else gzip.compress(json.dumps(doc).encode())
    return httpx.post(
        server.url + "/push",
        content=body,
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        },
        timeout=60,
    )


def _doc(**changed) -> dict:
    from librarian_dagster.core.capture.uploads import StagedFile
    from librarian_dagster.core.push.bundle import content_sha256

    line = transcript_line(ALICE_CLAUDE, "user", "hello", "u1")
    doc = {
        "format": 1, "machine": "lap", "agent": "claude-code", "session_id": ALICE_CLAUDE,
        "project": "app", "files": [{"name": f"-work-app/{ALICE_CLAUDE}.jsonl",
                                     "text": line.decode(), "mtime": 1.0}],
    } | changed  # fmt: skip
    files = [StagedFile(f["name"], f["text"].encode(), 1.0) for f in doc["files"]]
    doc.setdefault("sha256", content_sha256(doc["agent"], doc["session_id"], files))
    return doc


@pytest.mark.parametrize(
    ("doc", "status", "said"),
    [
        (b"not gzip", 400, "gzip"),
        (_doc(agent="cursor"), 400, "unknown agent"),
        (_doc(files=[{"name": "../../etc/cron.d/x", "text": "{}", "mtime": 1.0}]), 400,
         "relative path"),
        (_doc(files=[{"name": "/etc/passwd", "text": "{}", "mtime": 1.0}]), 400, "relative"),
        (_doc(files=[{"name": "a/notes.jsonl", "text": "not a transcript", "mtime": 1.0}]),
         422, "not a Claude Code transcript"),
        (_doc(sha256="0" * 64), 400, "not the bytes"),
        (_doc(format=2), 400, "Librarian-Push-Format 1"),
        (_doc(session_id="../x"), 400, "session id"),
    ],
)  # fmt: skip
def test_bad_input_gets_a_clear_status_and_changes_nothing(server, doc, status, said):
    refused = _post(server, server.tokens["alice"], doc)
    assert refused.status_code == status, refused.text
    assert said in refused.json()["error"]
    assert not (server.settings.uploads / "sessions").exists() or not any(
        (server.settings.uploads / "sessions").rglob("*")
    )
    with psycopg.connect(server.settings.database_url) as conn:
        assert conn.execute("SELECT count(*) FROM pushed_sessions").fetchone() == (0,)


def test_a_session_too_large_is_refused_and_a_full_disk_stops_the_push(server, tmp_path):
    big = _doc(files=[{"name": f"-work-app/{ALICE_CLAUDE}.jsonl", "mtime": 1.0,
                       "text": transcript_line(ALICE_CLAUDE, "user", "x" * 6_000_000, "u1")
                       .decode()}])  # fmt: skip
    refused = _post(server, server.tokens["alice"], big)
    assert refused.status_code == 413 and "more than 5 MB" in refused.json()["error"]
    with tmpfs(server.settings.uploads, size="1m"):
        alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "y" * 2_000_000, codex=False)
        full = push(alice, server.url, server.tokens["alice"])
        assert full.returncode == 1
        assert "the server's disk is full" in full.stderr, full.stderr
        assert not any((server.settings.uploads / "sessions").rglob("*"))


def _git_checkout(folder: Path, remote: str) -> Path:
    import subprocess

    folder.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    subprocess.run(["git", "-C", str(folder), "remote", "add", "origin", remote], check=True)
    return folder


def _edit_session(path: Path, session_id: str, cwd: Path, file: str) -> None:
    """A Claude Code session in `cwd` that edited `file` (relative to it)."""
    edit = {
        "type": "assistant", "uuid": "a2", "sessionId": session_id, "cwd": str(cwd),
        "timestamp": "2026-11-03T10:00:10Z",
        "message": {"id": "msg_2", "role": "assistant", "model": "claude-test", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Edit",
             "input": {"file_path": str(cwd / file), "old_string": "a", "new_string": "b"}}]},
    }  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        transcript_line(session_id, "user", "round the invoice totals in billing", "u1",
                        timestamp="2026-11-03T10:00:00Z", cwd=str(cwd))
        + json.dumps(edit).encode() + b"\n"
    )  # fmt: skip
    age(path, 600)


def test_a_teammate_s_file_history_names_the_first_person_s_session_across_folder_names(
    server, tmp_path
):
    """Alice's checkout is `cli`, with a credential in its remote; Bob's is `20260205-cli`.
    Alice's session is pushed with its repository's remote (no credential crosses), remembered
    in project `cli`; Bob, opening the file in his folder, is told of it by name."""
    alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "hello", codex=False)
    checkout = _git_checkout(tmp_path / "alice" / "src" / "cli",
                             "https://alice:ghp_sEcReT@github.com/acme/cli.git")  # fmt: skip
    transcript = Path(alice["LIBRARIAN_MIRROR"]) / "-src-cli" / f"{EDITED}.jsonl"
    _edit_session(transcript, EDITED, checkout, "src/billing.ts")
    assert push(alice, server.url, server.tokens["alice"]).returncode == 0
    assert b"ghp_sEcReT" not in every_byte(server.settings.uploads)
    server.ingest()
    with psycopg.connect(server.settings.database_url) as conn:
        row = conn.execute(
            "SELECT project, repository, person FROM memories WHERE session_id = %s", (EDITED,)
        ).fetchone()
    assert row == ("cli", "github.com/acme/cli", "alice")
    bob = tmp_path / "bob" / "20260205-cli"
    asked = {"path": str(bob / "src" / "billing.ts"), "cwd": str(bob), "root": str(bob),
             "remote": "git@github.com:acme/cli.git"}  # fmt: skip
    headers = {"Authorization": f"Bearer {server.tokens['bob']}"}
    found = httpx.post(server.url + "/history", json=asked, headers=headers, timeout=30).json()
    assert [(r["session_id"], r["person"], r["edits"]) for r in found["results"]] == [
        (EDITED, "alice", 1)
    ]
    del asked["remote"]  # by its folder's name alone, Bob's checkout is another repository
    alone = httpx.post(server.url + "/history", json=asked, headers=headers, timeout=30).json()
    assert alone["results"] == []


def test_a_session_both_here_and_pushed_is_read_here_once(server, tmp_path):
    """The server's own mirror holds the session a laptop pushes too (a machine pushing to
    itself): one source, so one ingest, and no tick after it asks again."""
    alice = laptop(tmp_path / "alice", ALICE_CLAUDE, "hello there", codex=False)
    here = folders(server.settings)["claude-code"] / "-home-me-app"
    here.mkdir(parents=True)
    source = Path(alice["LIBRARIAN_MIRROR"]) / "-home-me-app" / f"{ALICE_CLAUDE}.jsonl"
    shutil.copy2(source, here / source.name)
    assert push(alice, server.url, server.tokens["alice"]).returncode == 0
    assert server.ingest() == [ALICE_CLAUDE]
    assert server.ingest() == []
    assert server.ingest() == []
