"""`librarian up` as a person sees it: after the address block, one line per session remembered
or skipped and nothing else, Dagster's own logs in `LIBRARIAN_HOME/logs` (and in the terminal
with `--verbose`); a stop in the middle of a run cancels it, alerts nothing, and the next start
runs it again, remembering the session once."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
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


def test_verbose_shows_dagsters_logs_in_the_terminal(tmp_path, fresh_pgdata):
    fresh_pgdata(tmp_path / "home")
    up = _Up(_env(tmp_path), "--verbose")
    try:
        up.wait_for(
            lambda ls: any("Serving dagster-webserver" in line for line in ls), START_BOUND_S
        )
        up.wait_for(lambda ls: ADDRESS_END in ls, START_BOUND_S)
        up.stop(signal.SIGTERM)
    finally:
        up.kill()
    assert any("MCP server on" in line for line in up.lines)


@pytest.fixture
def held_digests():
    """A Messages API stand-in whose digests wait until the test lets them go."""
    gate = threading.Event()
    with FakeAnthropic() as fake:
        answer = fake.default

        def held(raw: bytes):
            gate.wait(300)
            return answer(raw)

        fake.default = held  # type: ignore[method-assign]
        yield fake, gate
        gate.set()


def test_a_stop_during_a_run_is_no_failure_and_the_next_start_runs_it_again(
    tmp_path, held_digests, fresh_pgdata
):
    fake, gate = held_digests
    fresh_pgdata(tmp_path / "home")
    [session] = _sessions(tmp_path / "mirror", 1)
    with fake_telegram() as telegram:
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
        up = _Up(env)
        try:
            up.wait_for(lambda ls: ADDRESS_END in ls, START_BOUND_S)
            deadline = time.monotonic() + INGEST_BOUND_S
            while not fake.calls():  # the run is in its digest step, waiting for the model
                assert time.monotonic() < deadline and up.proc.poll() is None, up.lines[-40:]
                time.sleep(0.5)
            after = up.stop()
        finally:
            up.kill()
        assert _said(after, "stopped") and not _said(after, "failed"), after
        [(status, tags)] = _runs(tmp_path / "home")
        assert status == dg.DagsterRunStatus.CANCELED and tags[STOPPED_TAG] == "true"

        gate.set()
        again = _Up(env)
        try:
            again.wait_for(lambda ls: _said(ls, "remembered"), START_BOUND_S + INGEST_BOUND_S)
            after = again.stop(signal.SIGTERM)
        finally:
            again.kill()
        assert len(_said(after, "remembered")) == 1 and not _said(after, "failed"), after
        assert not [t for t in telegram.texts if "failed" in t], telegram.texts
    runs = _runs(tmp_path / "home")
    assert [s for s, _ in runs] == [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.CANCELED]
    assert all(tags["dagster/partition"].endswith(session) for _, tags in runs)


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
