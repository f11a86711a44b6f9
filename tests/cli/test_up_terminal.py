"""`librarian up` as a person sees it: after the address block, one line per session remembered
or skipped and nothing else, Dagster's own logs in `LIBRARIAN_HOME/logs` (and in the terminal
with `--verbose`); a stop in the middle of a run cancels it, alerts nothing, and the next start
runs it again, remembering the session once (that next start is the one run with `--verbose`:
one scenario, `stop_and_start_again`, for the two tests)."""

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
from tests.helpers import age, free_port, write_transcript
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
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

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
        time.sleep(0.2)  # the reader's last lines
        return self.lines[self.lines.index(ADDRESS_END) + 1 :]

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


def _sessions(mirror: Path, count: int) -> list[str]:
    ids = [f"7e57{i:04d}-0000-4000-8000-00000000000{i}" for i in range(count)]
    for i, sid in enumerate(ids):
        path = write_transcript(mirror / "-work-app", sid, f"Make the parser strict, part {i}",
                                f"Done: the parser now refuses repeated flags ({i}).")  # fmt: skip
        age(path, 600)
    return ids


def _said(lines: list[str], kind: str) -> list[str]:
    return [line for line in lines if EVENT.match(line) and line[10:].startswith(kind)]


def test_the_terminal_says_what_was_remembered_and_nothing_more(tmp_path, fresh_pgdata):
    fresh_pgdata(tmp_path / "home")
    _sessions(tmp_path / "mirror", 2)
    summary_only = tmp_path / "mirror" / "-work-app" / "5e55a000-0000-4000-8000-000000000009.jsonl"
    summary_only.write_text('{"type": "summary", "summary": "an old title", "leafUuid": "x"}\n')
    age(summary_only, 600)
    up = _Up(_env(tmp_path))
    try:
        up.wait_for(lambda ls: ADDRESS_END in ls, START_BOUND_S)
        up.wait_for(
            lambda ls: len(_said(ls, "remembered")) == 2 and _said(ls, "skipped"), INGEST_BOUND_S
        )
        after = up.stop()
    finally:
        up.kill()
    assert after and all(EVENT.match(line) for line in after), after
    remembered = _said(after, "remembered")
    assert len(remembered) == 2 and all("app · claude-code · " in r for r in remembered), after
    assert "5e55a000-0000-4000-8000-000000000009: nothing to remember" in "\n".join(after)
    assert not any("DEBUG" in line or "Warning" in line for line in up.lines)
    # What Dagster and the recall server said went to their logs, warnings of theirs included.
    logs = tmp_path / "home" / "logs"
    dagster_log = (logs / "dagster.log").read_text(encoding="utf-8")
    assert "DEBUG" in dagster_log and "mirror_sensor" in dagster_log
    assert "Warning" not in dagster_log  # the two every start gave are gone, not just moved
    assert "MCP server on" in (logs / "mcp.log").read_text(encoding="utf-8")


@dataclass
class _StopAndStartAgain:
    """What a stop in the middle of a run and the next start (with `--verbose`) showed."""

    stopped: list[str]  # the terminal after the address block, up to the stop
    runs_at_stop: list[tuple[dg.DagsterRunStatus, dict[str, str]]]
    again: list[str]  # the next start's whole terminal
    again_after: list[str]  # the same after the address block
    telegram: list[str]
    runs: list[tuple[dg.DagsterRunStatus, dict[str, str]]]
    session: str


@pytest.fixture(scope="module")
def stop_and_start_again(tmp_path_factory, fresh_pgdata) -> _StopAndStartAgain:
    """`librarian up` stopped while its run waits in the digest step for a Messages API
    stand-in, then started again with `--verbose` once the digests are let go. The next start
    is the one `--verbose` is seen in too: a start of its own was a whole `librarian up` more."""
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
            runs_at_stop = _runs(tmp_path / "home")

            gate.set()
            again = _Up(env, "--verbose")
            try:
                again.wait_for(lambda ls: _said(ls, "remembered"), START_BOUND_S + INGEST_BOUND_S)
                again_after = again.stop(signal.SIGTERM)
            finally:
                again.kill()
        finally:
            gate.set()
        texts = list(telegram.texts)
    return _StopAndStartAgain(
        stopped, runs_at_stop, again.lines, again_after, texts, _runs(tmp_path / "home"), session
    )


# One worker runs the two: they look at one scenario (`stop_and_start_again`).
@pytest.mark.xdist_group("stop_and_start_again")
def test_verbose_shows_dagsters_logs_in_the_terminal(stop_and_start_again):
    lines = stop_and_start_again.again  # `up --verbose`, stopped with SIGTERM, exit 0
    assert any("Serving dagster-webserver" in line for line in lines)
    assert ADDRESS_END in lines
    assert any("MCP server on" in line for line in lines)


@pytest.mark.xdist_group("stop_and_start_again")
def test_a_stop_during_a_run_is_no_failure_and_the_next_start_runs_it_again(
    stop_and_start_again,
):
    seen = stop_and_start_again
    assert _said(seen.stopped, "stopped") and not _said(seen.stopped, "failed"), seen.stopped
    [(status, tags)] = seen.runs_at_stop
    assert status == dg.DagsterRunStatus.CANCELED and tags[STOPPED_TAG] == "true"

    after = seen.again_after
    assert len(_said(after, "remembered")) == 1 and not _said(after, "failed"), after
    assert not [t for t in seen.telegram if "failed" in t], seen.telegram
    runs = seen.runs
    assert [s for s, _ in runs] == [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.CANCELED]
    assert all(tags["dagster/partition"].endswith(seen.session) for _, tags in runs)
    # Asked again by the mirror sensor, within its first tick of the next start.
    assert runs[0][1].get("dagster/sensor_name") == "mirror_sensor", runs[0][1]


def _runs(home: Path) -> list[tuple[dg.DagsterRunStatus, dict[str, str]]]:
    """The runs Dagster holds under `home`, newest first (status, tags), read in a process of
    their own, which joins the embedded server and leaves it."""
    code = (
        "import json\n"
        "import dagster as dg\n"
        "from librarian_dagster.core.settings import Settings\n"
        "from librarian_dagster.core.assembly.store import migrated_url\n"
        "from librarian_dagster.core.ops.dagster_home import prepare_dagster_home\n"
        "settings = Settings.from_env()\n"
        "migrated_url(settings)\n"
        "home = prepare_dagster_home(settings)['DAGSTER_HOME']\n"
        "with dg.DagsterInstance.from_config(home) as instance:\n"
        "    runs = [(r.status.value, dict(r.tags)) for r in instance.get_runs()]\n"
        "print(json.dumps(runs))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env | {"LIBRARIAN_HOME": str(home)},
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    return [
        (dg.DagsterRunStatus(status), tags) for status, tags in json.loads(out.splitlines()[-1])
    ]
