"""The production configuration runs: dagster-webserver and dagster-daemon on deploy/dagster.yaml
against PostgreSQL (the embedded server), runs queued and executed, the `llm` pool limit
honoured: a second run waits behind the first."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import httpx
import pytest
from dagster_graphql import DagsterGraphQLClient

from tests.deploy import pool_location
from tests.helpers import free_port

TIMEOUT = 300  # generous: two cores shared with other test runs


@contextlib.contextmanager
def _started(command: list[str], log: Path) -> Iterator[subprocess.Popen]:
    """A process in a group of its own (its code servers and run workers join it), stopped with
    the whole group at the end."""
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield proc
    finally:
        for signum, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signum)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
                break


def _wait(what: str, ready, procs: list[tuple[subprocess.Popen, Path]]):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        for proc, log in procs:
            if proc.poll() is not None:
                raise AssertionError(
                    f"{log.name} exited: {log.read_text(encoding='utf-8')[-3000:]}"
                )
        value = ready()
        if value:
            return value
        time.sleep(0.5)
    logs = "\n".join(log.read_text(encoding="utf-8")[-2000:] for _, log in procs)
    raise AssertionError(f"{what}: not within {TIMEOUT} s\n{logs}")


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.timeout(3 * TIMEOUT)
def test_two_runs_queue_and_the_llm_pool_lets_one_in_at_a_time(instance_env, tmp_path):
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        f"load_from:\n  - python_file: {pool_location.__file__}\n", encoding="utf-8"
    )
    markers = tmp_path / "markers"
    markers.mkdir()
    port = free_port()
    bin_dir = Path(sys.executable).parent
    daemon_log, web_log = tmp_path / "daemon.log", tmp_path / "webserver.log"
    daemon_cmd = [str(bin_dir / "dagster-daemon"), "run", "-w", str(workspace)]
    web_cmd = [str(bin_dir / "dagster-webserver"), "-h", "127.0.0.1", "-p", str(port)]
    web_cmd += ["-w", str(workspace)]
    with (
        _started(daemon_cmd, daemon_log) as daemon,
        _started(web_cmd, web_log) as webserver,
        dg.DagsterInstance.get() as instance,
    ):
        procs = [(daemon, daemon_log), (webserver, web_log)]
        _wait(
            "the webserver answers", lambda: _answers(f"http://127.0.0.1:{port}/server_info"), procs
        )

        # Launched as the UI launches them: through the webserver, into the daemon's queue.
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        config = {"ops": {"call_llm": {"config": {"folder": str(markers)}}}}
        runs = [client.submit_job_execution("llm_job", run_config=config) for _ in range(2)]
        for run_id in runs:
            enqueued = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_ENQUEUED)
            assert len(enqueued) == 1, run_id

        def one_in_one_waiting():
            started = list(markers.glob("*.started"))
            assert len(started) < 2, "both runs were inside the llm op at once"
            pool = instance.event_log_storage.get_concurrency_info("llm")
            holding = pool.limit == 1 and len(pool.claimed_slots) == 1
            return holding and pool.pending_step_count == 1 and len(started) == 1

        _wait("one run holds the llm slot and the other waits for it", one_in_one_waiting, procs)
        # Both runs are in progress (op granularity: the run slot is not what holds it back).
        assert {client.get_run_status(r) for r in runs} == {dg.DagsterRunStatus.STARTED}
        (first,) = [p.stem for p in markers.glob("*.started")]
        waiting = next(r for r in runs if r != first)
        assert instance.event_log_storage.get_concurrency_info("llm").pending_run_ids == {waiting}

        (markers / pool_location.RELEASE).write_text("", encoding="utf-8")
        finished = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE}
        _wait(
            "both runs finish",
            lambda: all(client.get_run_status(r) in finished for r in runs),
            procs,
        )
        assert [client.get_run_status(r) for r in runs] == [dg.DagsterRunStatus.SUCCESS] * 2
    for run_id in runs:
        assert (markers / f"{run_id}.done").exists()
        # Nobody else was inside the op when either run entered it.
        assert (markers / f"{run_id}.overlap").read_text(encoding="utf-8") == ""
