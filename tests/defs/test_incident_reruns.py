"""The runs an incident failed are run again once it healed, each session once: the newest run
of its partition failed within the incident's window, and Dagster's run retries will not take
it. Over a real Dagster instance, with runs that really failed."""

import time

import dagster as dg
import pytest

from librarian_dagster.core.service.incidents import Incident, read_incidents, record_incident
from librarian_dagster.dead_runs import STOPPED_TAG
from librarian_dagster.defs.jobs import INGEST_SESSION
from librarian_dagster.defs.monitoring import (
    RERUN_OF_TAG,
    TAIL_S,
    incident_rerun_sensor,
    reruns_due,
    stopped_reruns,
)
from librarian_dagster.defs.resources import ClockResource, IncidentsResource

KEY = "demo/2026-12/claude-code/0d6c7a1e-aaaa-4bbb-8ccc-123456789abc"
OTHER = "demo/2026-12/claude-code/5f1e2d3c-aaaa-4bbb-8ccc-123456789abc"


@dg.op
def store_write(context: dg.OpExecutionContext):
    if context.run.tags.get("outcome") == "fail":
        raise ConnectionError("server closed the connection unexpectedly")
    if context.run.tags.get("outcome") == "stored":  # the memory written, the run then stopped
        key = context.run.tags["dagster/partition"]
        yield dg.AssetMaterialization(asset_key="memory", partition=key)
    yield dg.Output(None)


@dg.job(name=INGEST_SESSION)
def stand_in_job():
    """Named as the ingest job, so that its runs are the ones looked at."""
    store_write()


@pytest.fixture
def instance(tmp_path):
    # Run retries as the product's instance has them (core/service/dagster_instance.yaml): a failed
    # step is not retried.
    retries = {"enabled": True, "max_retries": 2, "retry_on_asset_or_op_failure": False}
    with dg.instance_for_test(
        temp_dir=str(tmp_path), overrides={"run_retries": retries}
    ) as instance:
        yield instance


def _run(instance, key: str, outcome: str) -> str:
    result = stand_in_job.execute_in_process(
        instance=instance, tags={"dagster/partition": key, "outcome": outcome},
        raise_on_error=False,
    )  # fmt: skip
    return result.run_id


def _around_now() -> Incident:
    return Incident("the database", time.time() - 30, time.time())


def test_a_run_failed_during_an_incident_is_asked_again_once(instance):
    failed = _run(instance, KEY, "fail")
    _run(instance, OTHER, "succeed")  # succeeded: nothing to run again
    incident = _around_now()
    (request,) = reruns_due(instance, [incident])
    assert request.partition_key == KEY and request.tags[RERUN_OF_TAG] == failed
    # Keyed by the incident: the sensor's next ticks ask for no second run.
    assert request.run_key and str(round(incident.began)) in request.run_key
    assert [r.run_key for r in reruns_due(instance, [incident])] == [request.run_key]
    # Two failed runs of one session make one request.
    _run(instance, KEY, "fail")
    assert [r.partition_key for r in reruns_due(instance, [incident])] == [KEY]


def test_a_run_failed_outside_any_incident_is_left_alone(instance):
    _run(instance, KEY, "fail")
    long_ago = Incident("the database", time.time() - 4000, time.time() - TAIL_S - 600)
    assert reruns_due(instance, [long_ago]) == []
    assert reruns_due(instance, []) == []


def test_a_session_run_again_since_is_left_alone(instance):
    _run(instance, KEY, "fail")
    _run(instance, KEY, "succeed")  # the sessions sensor, a person, or the rerun itself
    assert reruns_due(instance, [_around_now()]) == []


def test_a_run_that_dagsters_retries_take_is_left_to_them(instance):
    failed = _run(instance, KEY, "fail")
    assert instance.get_run_by_id(failed).tags.get("dagster/will_retry") == "false"
    instance.add_run_tags(failed, {"dagster/will_retry": "true"})
    assert reruns_due(instance, [_around_now()]) == []


def test_the_sensor_reads_the_incidents_up_recorded(instance, tmp_path):
    _run(instance, KEY, "fail")
    path = tmp_path / "incidents.jsonl"
    resources = {"incidents": IncidentsResource(path=str(path)), "clock": ClockResource()}
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        skipped = incident_rerun_sensor(context)
        assert isinstance(skipped, dg.SkipReason)  # no incident recorded yet
        record_incident(path, _around_now())
        (request,) = incident_rerun_sensor(context)
    assert request.partition_key == KEY


def test_the_incident_file_keeps_a_week_and_skips_a_torn_line(tmp_path):
    path = tmp_path / "home" / "incidents.jsonl"
    now = time.time()
    record_incident(path, Incident("the database", now - 9 * 86400, now - 8 * 86400), now)
    record_incident(path, Incident("the mirror folder", now - 100, now - 50), now)
    with path.open("a") as f:
        f.write('{"what": "the database", "began": 17')  # a killed `up`'s torn write
    assert read_incidents(path) == [Incident("the mirror folder", now - 100, now - 50)]
    record_incident(path, Incident("the database", now - 10, now), now)
    assert [i.what for i in read_incidents(path)] == ["the mirror folder", "the database"]
    assert read_incidents(tmp_path / "nowhere.jsonl") == []


def test_a_run_stopped_with_librarian_up_is_asked_again_once(instance):
    stopped = _run(instance, KEY, "succeed")
    # What `librarian up` leaves of a run it stopped: canceled (or failed by its daemon as the
    # code server went), tagged.
    run = instance.get_run_by_id(stopped)
    instance.add_run_tags(stopped, {STOPPED_TAG: "true"})
    instance.report_run_canceled(run, "librarian up was stopped")
    other = _run(instance, OTHER, "fail")
    instance.add_run_tags(other, {STOPPED_TAG: "true"})
    _run(instance, KEY.replace("0d6c", "9999"), "fail")  # failed on its own: not this rule's
    requests = stopped_reruns(instance, time.time() - 60)
    assert sorted(r.partition_key for r in requests) == sorted([KEY, OTHER])
    assert {r.tags[RERUN_OF_TAG] for r in requests} == {stopped, other}
    # Asked once (the run key names the stopped run); not at all once run again since.
    assert all(stopped in r.run_key for r in requests if r.partition_key == KEY)
    assert stopped_reruns(instance, time.time() - 60, asked={KEY, OTHER}) == []
    _run(instance, KEY, "succeed")
    assert [r.partition_key for r in stopped_reruns(instance, time.time() - 60)] == [OTHER]


def test_a_run_stopped_after_its_memory_was_written_is_not_asked_again(instance):
    stored = _run(instance, KEY, "stored")
    instance.add_run_tags(stored, {STOPPED_TAG: "true"})
    instance.report_run_canceled(instance.get_run_by_id(stored), "librarian up was stopped")
    assert stopped_reruns(instance, time.time() - 60) == []


def test_a_run_a_stop_ended_during_an_incident_is_left_to_the_sessions_sensor(instance):
    stopped = _run(instance, KEY, "fail")  # failed by its daemon as `librarian up` stopped
    instance.add_run_tags(stopped, {STOPPED_TAG: "true"})
    _run(instance, OTHER, "fail")
    due = reruns_due(instance, [_around_now()])
    assert [r.partition_key for r in due] == [OTHER]
    assert [r.partition_key for r in stopped_reruns(instance, time.time() - 60)] == [KEY]
