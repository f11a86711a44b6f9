"""`librarian up` as a person sees it: after the address block, one line per session remembered
or skipped and nothing else, Dagster's own logs in `LIBRARIAN_HOME/logs` (`--verbose`, which also
shows them in the terminal, is tests/cli/test_up_database_watch.py's); a stop in the middle of a
run cancels it, alerts nothing, and the next start runs it again, remembering the session once.
One scenario, `stop_and_start_again`, for both tests."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from librarian_dagster.dead_runs import STOPPED_TAG
from tests.fake_anthropic import FakeAnthropic
from tests.helpers import Terminal, age, free_port, write_transcript
from tests.telegram_fake import CHAT_ID, TOKEN, fake_telegram

ADDRESS_END = "Ctrl-C stops everything."
EVENT = re.compile(r"^\d\d:\d\d:\d\d  (remembered|skipped|failed|alert|stopped) +\S")
# Not performance figures: they bound a hang (a start is 20-60 s here, a small ingest as long).
START_BOUND_S = 300
INGEST_BOUND_S = 300


class _Up:
    """A running `librarian up`, its terminal (stderr) read line by line as it comes."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "librarian_dagster.cli.main", "up", "--ui-port",
             str(free_port()), "--mcp-port", str(free_port()), *args],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        self.terminal = Terminal(self.proc.stdout)
        self.lines = self.terminal.lines

    def wait_for(self, wanted, bound_s: float) -> None:
        deadline = time.monotonic() + bound_s
        while not wanted(self.lines):
            assert self.proc.poll() is None, "\n".join(self.lines[-40:])
            assert time.monotonic() < deadline, "\n".join(self.lines[-40:])
            time.sleep(0.5)

    def stop(self, signum: int = signal.SIGINT) -> list[str]:
        """Stop it as Ctrl-C does; what it printed after the address block."""
        self.proc.send_signal(signum)
        assert self.proc.wait(timeout=90) == 0, "\n".join(self.lines[-40:])
        lines = self.terminal.to_the_end()
        return lines[lines.index(ADDRESS_END) + 1 :]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIBRARIAN_", "TELEGRAM_"))}
    missing = tmp_path / "no-such-folder"
    return env | {
        "LIBRARIAN_HOME": str(tmp_path / "home"),
        "LIBRARIAN_MIRROR": str(tmp_path / "mirror"),
        # This machine's own agents' folders are not the test's.
        **{f"LIBRARIAN_{name}": str(missing) for name in ("CODEX_SESSIONS", "GEMINI_SESSIONS",
           "OPENCODE_DATA", "COPILOT_SESSIONS", "PI_SESSIONS")},
        **extra,
    }  # fmt: skip


def _sessions(mirror: Path, count: int, first: int = 0) -> list[str]:
    ids = [f"7e57{i:04d}-0000-4000-8000-{i:012d}" for i in range(first, first + count)]
    for i, sid in enumerate(ids, start=first):
        path = write_transcript(mirror / "-work-app", sid, f"Make the parser strict, part {i}",
                                f"Done: the parser now refuses repeated flags ({i}).")  # fmt: skip
        age(path, 600)
    return ids


def _said(lines: list[str], kind: str) -> list[str]:
    return [line for line in lines if EVENT.match(line) and line[10:].startswith(kind)]


SUMMARY_ONLY = "5e55a000-0000-4000-8000-000000000009"


@dataclass
class _StopAndStartAgain:
    """What a stop in the middle of a run and the next start showed."""

    stopped: list[str]  # the first start's terminal after the address block, up to the stop
    runs_at_stop: list[tuple[dg.DagsterRunStatus, dict[str, str]]]
    again: list[str]  # the next start's whole terminal
    again_after: list[str]  # the same after the address block
    logs: dict[str, str]  # LIBRARIAN_HOME/logs/NAME: its text
    telegram: list[str]
    runs: list[tuple[dg.DagsterRunStatus, dict[str, str]]]
    session: str  # the one the stop caught in its digest step


@pytest.fixture(scope="module")
def stop_and_start_again(tmp_path_factory, fresh_pgdata) -> _StopAndStartAgain:
    """`librarian up` stopped while its run waits in the digest step for a Messages API
    stand-in; once the digests are let go, one more session and one with nothing to remember
    are written and `up` starts again. One scenario for both tests: a start of its own for
    each was a whole `librarian up` more (~25 s of CPU)."""
    tmp_path = tmp_path_factory.mktemp("stop-and-start")
    fresh_pgdata(tmp_path / "home")
    [session] = _sessions(tmp_path / "mirror", 1)
    gate = threading.Event()
    with FakeAnthropic() as fake, fake_telegram() as telegram:
        answer = fake.default

        def held(raw: bytes):  # the digests wait until the test lets them go
            gate.wait(300)
            return answer(raw)

        fake.default = held  # type: ignore[method-assign]
        env = _env(
            tmp_path,
            LIBRARIAN_DIGEST_PROVIDER="anthropic",
            ANTHROPIC_API_KEY="sk-ant-api03-FAKEFAKEFAKEFAKEFAKEFAKE",
            LIBRARIAN_ANTHROPIC_BASE_URL=fake.url,
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_CHAT_ID=CHAT_ID,
            LIBRARIAN_TELEGRAM_BASE_URL=telegram.url,
            LIBRARIAN_NOTIFY_DIGESTS="false",
        )
        try:
            up = _Up(env)
            try:
                up.wait_for(lambda ls: ADDRESS_END in ls, START_BOUND_S)
                deadline = time.monotonic() + INGEST_BOUND_S
                while not fake.calls():  # the run is in its digest step, waiting for the model
                    assert time.monotonic() < deadline and up.proc.poll() is None, up.lines[-40:]
                    time.sleep(0.5)
                stopped = up.stop()
            finally:
                up.kill()
            gate.set()
            _sessions(tmp_path / "mirror", 1, first=1)
            summary_only = tmp_path / "mirror" / "-work-app" / f"{SUMMARY_ONLY}.jsonl"
            summary_only.write_text('{"type": "summary", "summary": "an old title"}\n')
            age(summary_only, 600)
            again_started = time.time()
            again = _Up(env)
            try:
                again.wait_for(
                    lambda ls: len(_said(ls, "remembered")) == 2 and _said(ls, "skipped"),
                    START_BOUND_S + INGEST_BOUND_S,
                )
                again_after = again.stop(signal.SIGTERM)
            finally:
                again.kill()
        finally:
            gate.set()
        texts = list(telegram.texts)
    logs = {p.name: p.read_text(encoding="utf-8") for p in (tmp_path / "home" / "logs").iterdir()}
    # Read once, at the end (a process that joins the embedded server): those of the first start
    # are the runs made before the second.
    runs = _runs(tmp_path / "home")
    runs_at_stop = [(status, tags) for status, tags, made in runs if made < again_started]
    return _StopAndStartAgain(
        stopped, runs_at_stop, again.lines, again_after, logs, texts,
        [(status, tags) for status, tags, _ in runs], session,
    )  # fmt: skip


# One worker runs both: they look at one scenario (`stop_and_start_again`).
@pytest.mark.xdist_group("stop_and_start_again")
def test_the_terminal_says_what_was_remembered_and_nothing_more(stop_and_start_again):
    seen = stop_and_start_again
    for after in (seen.stopped, seen.again_after):
        assert after and all(EVENT.match(line) for line in after), after
    remembered = _said(seen.again_after, "remembered")
    assert len(remembered) == 2 and all("app · claude-code · " in r for r in remembered), remembered
    assert f"{SUMMARY_ONLY}: nothing to remember" in "\n".join(seen.again_after)
    assert not any("DEBUG" in line or "Warning" in line for line in seen.again)
    # What Dagster and the recall server said went to their logs, warnings of theirs included.
    dagster_log = seen.logs["dagster.log"]
    assert "DEBUG" in dagster_log and "sessions_sensor" in dagster_log
    assert "Warning" not in dagster_log  # the two every start gave are gone, not just moved
    assert "MCP server on" in seen.logs["mcp.log"]


@pytest.mark.xdist_group("stop_and_start_again")
def test_a_stop_during_a_run_is_no_failure_and_the_next_start_runs_it_again(
    stop_and_start_again,
):
    seen = stop_and_start_again
    assert _said(seen.stopped, "stopped") and not _said(seen.stopped, "failed"), seen.stopped
    [(status, tags)] = seen.runs_at_stop
    assert status == dg.DagsterRunStatus.CANCELED and tags[STOPPED_TAG] == "true"

    assert not _said(seen.again_after, "failed"), seen.again_after
    assert not [t for t in seen.telegram if "failed" in t], seen.telegram
    # The stopped session's runs: the canceled one, then one that remembered it, once.
    runs = [(s, t) for s, t in seen.runs if t["dagster/partition"].endswith(seen.session)]
    assert [s for s, _ in runs] == [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.CANCELED]
    # Asked again by the sessions sensor, within its first tick of the next start.
    assert runs[0][1].get("dagster/sensor_name") == "sessions_sensor", runs[0][1]


def _runs(home: Path) -> list[tuple[dg.DagsterRunStatus, dict[str, str], float]]:
    """The runs Dagster holds under `home`, newest first (status, tags, when it was made, as a
    Unix time), read in a process of their own, which joins the embedded server and leaves it."""
    code = (
        "import json\n"
        "import dagster as dg\n"
        "from librarian_dagster.core.settings import Settings\n"
        "from librarian_dagster.core.assembly.store import migrated_url\n"
        "from librarian_dagster.core.service.dagster_home import prepare_dagster_home\n"
        "settings = Settings.from_env()\n"
        "migrated_url(settings)\n"
        "home = prepare_dagster_home(settings)['DAGSTER_HOME']\n"
        "with dg.DagsterInstance.from_config(home) as instance:\n"
        "    runs = [(r.dagster_run.status.value, dict(r.dagster_run.tags),\n"
        "             r.create_timestamp.timestamp()) for r in instance.get_run_records()]\n"
        "print(json.dumps(runs))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env | {"LIBRARIAN_HOME": str(home)},
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    return [
        (dg.DagsterRunStatus(status), tags, made)
        for status, tags, made in json.loads(out.splitlines()[-1])
    ]
