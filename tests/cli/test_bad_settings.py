"""Bad settings and arguments: one line on stderr naming what is wrong, a non-zero exit, and
never a traceback. Each case runs the real command in a fresh process, as a user would."""

import os
import subprocess
import sys

import pytest

from tests.conftest import TRANSCRIPTS
from tests.helpers import tmpfs

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


LIBRARIAN = [sys.executable, "-m", "librarian_dagster.cli.main"]
MCP_SERVER = [sys.executable, "-m", "mcp_server"]


def _run(command: list[str], tmp_path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    base["LIBRARIAN_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        command,
        env={**base, **env},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,  # importing mcp alone took 20 s on a loaded machine
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_an_unreachable_database_url_is_one_line_naming_the_setting(tmp_path):
    # Port 1 on loopback: nothing listens there, so the connection is refused at once.
    done = _run(
        [*LIBRARIAN, "status"], tmp_path, LIBRARIAN_DATABASE_URL="postgresql://me:pw@127.0.0.1:1/x"
    )
    assert done.returncode == 1
    line = _one_line(done)
    assert line.startswith("librarian status: cannot reach LIBRARIAN_DATABASE_URL")
    assert "127.0.0.1:1" in line and "pw" not in line  # the password never shows


def test_a_home_that_cannot_be_a_folder_is_one_line_naming_the_setting(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder", encoding="utf-8")
    done = _run([*LIBRARIAN, "status"], tmp_path, LIBRARIAN_HOME=str(blocker / "home"))
    assert done.returncode == 1
    assert _one_line(done) == (
        f"librarian status: LIBRARIAN_HOME={blocker / 'home'} is not a writable folder "
        "(Not a directory)"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_a_read_only_home_is_one_line_naming_the_setting(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o500)
    try:
        done = _run([*LIBRARIAN, "status"], tmp_path, LIBRARIAN_HOME=str(home))
    finally:
        home.chmod(0o700)
    assert done.returncode == 1
    assert "LIBRARIAN_HOME" in _one_line(done) and "not a writable folder" in done.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["ingest", str(TRANSCRIPTS / "obra__episodic-memory" / "tiny-conversation.jsonl")],
    ],
    ids=["status", "ingest"],
)
def test_a_home_on_a_read_only_filesystem_is_one_line_naming_the_setting(tmp_path, command):
    # As root too (where the test above is skipped): a read-only mount refuses everyone.
    home = tmp_path / "home"
    with tmpfs(home, read_only=True):
        done = _run([*LIBRARIAN, *command], tmp_path, LIBRARIAN_HOME=str(home))
    assert done.returncode == 1
    assert _one_line(done) == (
        f"librarian {command[0]}: LIBRARIAN_HOME={home} is not a writable folder "
        "(Read-only file system)"
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("LIBRARIAN_SETTLE_SECONDS", "abc", "LIBRARIAN_SETTLE_SECONDS must be a number, got 'abc'"),
        ("LIBRARIAN_SETTLE_SECONDS", "nan", "must be a finite number, got 'nan'"),
        ("LIBRARIAN_MCP_PORT", "99999", "LIBRARIAN_MCP_PORT must be a port from 1 to 65535"),
        ("LIBRARIAN_MCP_PORT", "80.5", "LIBRARIAN_MCP_PORT must be a whole number"),
        ("LIBRARIAN_RECALL_THRESHOLD", "2", "must be between 0 and 1"),
        ("LIBRARIAN_INCLUDE_THINKING", "maybe", "must be true or false"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(tmp_path, name, value, message):
    done = _run([*LIBRARIAN, "status"], tmp_path, **{name: value})
    assert done.returncode == 2
    line = _one_line(done)
    assert line.startswith("librarian status: ") and message in line


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ([*LIBRARIAN, "mcp", "--port", "99999"], "--port: 99999 is out of range (1 to 65535)"),
        ([*LIBRARIAN, "mcp", "--port", "0"], "--port: 0 is out of range (1 to 65535)"),
        ([*LIBRARIAN, "mcp", "--port", "http"], "--port: not a port number: 'http'"),
        ([*LIBRARIAN, "up", "--ui-port", "70000"], "--ui-port: 70000 is out of range"),
        ([*LIBRARIAN, "up", "--mcp-port", "-1"], "--mcp-port: -1 is out of range"),
        ([*MCP_SERVER, "--port", "99999"], "--port: 99999 is out of range"),
        (
            [*LIBRARIAN, "search", "x", "--domain", "bogus"],
            "--domain must be one of technical, business, reflections, core, content, private",
        ),
        ([*LIBRARIAN, "search", "x", "--since", "soon"], "not an ISO date or time: 'soon'"),
        ([*LIBRARIAN, "skip", "--before", "soon"], "--before: not an ISO date or time: 'soon'"),
        ([*LIBRARIAN, "backfill", "--since", "2026-13-01"], "--since: not an ISO date"),
        ([*LIBRARIAN, "nonsense"], "invalid choice: 'nonsense'"),
    ],
)
def test_a_bad_argument_is_refused_in_one_line_before_anything_starts(tmp_path, command, message):
    done = _run(command, tmp_path)
    assert done.returncode == 2
    assert message in _one_line(done)
    # Refused before the server would have been announced or the database started.
    assert "MCP server on" not in done.stderr
    assert not (tmp_path / "home" / "pgdata").exists()


def test_the_mcp_server_alone_reports_a_bad_setting_in_one_line(tmp_path):
    done = _run(MCP_SERVER, tmp_path, LIBRARIAN_SETTLE_SECONDS="abc")
    assert done.returncode == 2
    assert _one_line(done) == (
        "python -m mcp_server: LIBRARIAN_SETTLE_SECONDS must be a number, got 'abc'"
    )
