"""A run whose process is gone, ended at the next start (librarian_dagster/dead_runs.py).

`librarian ingest` killed with SIGKILL (what the OOM killer, a lost machine or a second Ctrl-C of a
service manager does) in the middle of its digest: Dagster's storage still says STARTED, and the
run still holds the one `llm` slot, so the next digest would wait for it for ever. The next
`librarian ingest` marks the run failed, saying why, and completes: exactly one memory per
session. A run whose process still runs is left alone, and so is a run of another machine.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import dagster as dg

from librarian_dagster.core.capture.agents import folders
from librarian_dagster.dead_runs import HOST_TAG, end_dead_runs, this_host
from tests.conftest import TRANSCRIPTS
from tests.fake_gemini import FakeGemini, digest_reply
from tests.helpers import make_settings, rows_per_session
from tests.stuck_run import start_stuck_run, wait_started

LIBRARIAN = [sys.executable, "-m", "librarian_dagster.cli.main"]
SESSIONS = [
    TRANSCRIPTS / "obra__episodic-memory" / "tiny-conversation.jsonl",
    TRANSCRIPTS / "daaain__claude-code-log" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl",
]
KEY = "AIzaSyFAKE-deadrun-0123456789abcdefghij"
WAIT_S = 300  # only a hang fails it; the machines are shared


def _wait_until(condition, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"ended before {what}: {proc.communicate()}")
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}")


def _holding_llm(instance: dg.DagsterInstance) -> set[str]:
    return {s.run_id for s in instance.event_log_storage.get_concurrency_info("llm").claimed_slots}


def test_a_killed_ingest_is_marked_failed_and_the_next_one_completes(tmp_path, database_url):
    settings = make_settings(tmp_path, database_url)
    in_digest, release = threading.Event(), threading.Event()

    def digest_after_release(_body):
        in_digest.set()
        release.wait(WAIT_S)
        return digest_reply()

    with FakeGemini() as fake:
        fake.default_generate = digest_after_release
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")},
            "LIBRARIAN_HOME": str(settings.home),
            "LIBRARIAN_MIRROR": str(folders(settings)["claude-code"]),
            "LIBRARIAN_DATABASE_URL": database_url,
            "LIBRARIAN_DIGEST_PROVIDER": "gemini",
            "GEMINI_API_KEY": KEY,
            "LIBRARIAN_GEMINI_BASE_URL": fake.url,
        }
        command = [*LIBRARIAN, "ingest", *map(str, SESSIONS)]
        killed = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        _wait_until(in_digest.is_set, killed, "the digest's call to the LLM")
        instance = dg.DagsterInstance.from_config(str(settings.dagster_home))
        (run,) = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
        assert run.tags[HOST_TAG] == this_host()
        assert _holding_llm(instance) == {run.run_id}

        # Alive: left alone, however the storage is reached.
        assert end_dead_runs(instance, untagged_ran_here=False) == []
        assert end_dead_runs(instance, untagged_ran_here=True) == []

        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=WAIT_S)
        release.set()
        stuck = instance.get_run_by_id(run.run_id)
        assert stuck is not None and stuck.status == dg.DagsterRunStatus.STARTED
        assert _holding_llm(instance) == {run.run_id}

        # A run of another machine on the same storage: its pid means nothing here.
        instance.add_run_tags(run.run_id, {HOST_TAG: "another-machine"})
        assert end_dead_runs(instance, untagged_ran_here=False) == []
        instance.add_run_tags(run.run_id, {HOST_TAG: this_host()})

        again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 ingested, 0 skipped, 0 deferred, 0 failed" in again.stdout, again.stdout
    assert f"run {run.run_id} was left running by a process that stopped" in again.stderr
    assert "Traceback" not in again.stderr, again.stderr

    ended = instance.get_run_by_id(run.run_id)
    assert ended is not None and ended.status == dg.DagsterRunStatus.FAILURE
    # Not for the daemon's run retries: an in-process run has no code location to run it from.
    assert ended.tags["dagster/will_retry"] == "false"
    (failure,) = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    assert failure.dagster_event is not None
    assert "stopped before the run ended: marked failed at the next start" in (
        failure.dagster_event.message or ""
    )
    assert _holding_llm(instance) == set()
    # The new ingest's own run: done, and not to be run again by the daemon.
    (done,) = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.SUCCESS]))
    assert done.tags["dagster/max_retries"] == "0"
    instance.dispose()

    rows = rows_per_session(database_url)
    sessions = set(rows["memories"])
    assert len(sessions) == len(SESSIONS)
    assert rows["memories"] == dict.fromkeys(sessions, 1)
    assert rows["session_sources"] == dict.fromkeys(sessions, 1)
    assert set(rows["indexed_chunks"]) == sessions and all(rows["indexed_chunks"].values())


def test_a_run_being_canceled_when_its_process_died_is_marked_canceled(tmp_path, database_url):
    settings = make_settings(tmp_path, database_url)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")},
        "LIBRARIAN_HOME": str(settings.home),
        "LIBRARIAN_DATABASE_URL": database_url,
    }
    started = tmp_path / "started"
    proc = start_stuck_run(env, started, untagged=False)
    wait_started(proc, started, time.monotonic() + WAIT_S)
    instance = dg.DagsterInstance.from_config(str(settings.dagster_home))
    started = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])
    (run,) = instance.get_runs(filters=started)
    # Asked to cancel (the UI's Terminate), and the process killed before it could stop itself.
    instance.report_run_canceling(run)
    proc.kill()
    proc.wait(timeout=WAIT_S)
    canceling = instance.get_run_by_id(run.run_id)
    assert canceling is not None and canceling.status == dg.DagsterRunStatus.CANCELING

    (ended,) = end_dead_runs(instance, untagged_ran_here=False)
    assert (ended.run_id, ended.status) == (run.run_id, dg.DagsterRunStatus.CANCELED)
    after = instance.get_run_by_id(run.run_id)
    assert after is not None and after.status == dg.DagsterRunStatus.CANCELED
    assert end_dead_runs(instance, untagged_ran_here=False) == []  # once
    instance.dispose()
