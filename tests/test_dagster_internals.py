"""The Dagster internals librarian_dagster/dagster_internals.py relies on, as the pinned Dagster has
them: each test fails when an upgrade renames, moves or reshapes one, where the product would
otherwise go quietly wrong (a dead run never ended, a gap alert that never fires, a stopped
ingest taken for a failed session, a screen of retry warnings)."""

import inspect
import logging
import os

import dagster as dg
import dagster._grpc.server_watcher as server_watcher
import psycopg
import pytest
import sqlalchemy.exc
from dagster._core.definitions.sensor_definition import SensorEvaluationContext
from dagster._core.scheduler.instigation import (
    InstigatorState,
    InstigatorTick,
    InstigatorType,
    TickStatus,
)
from dagster._core.storage.event_log.base import EventLogStorage
from dagster_postgres.utils import DagsterPostgresException, retry_pg_connection_fn

from librarian_dagster import dagster_internals
from librarian_dagster.core.service.dagster_home import prepare_dagster_home
from librarian_dagster.dagster_internals import (
    CONNECTION_RETRY_LOG,
    dispose_instance,
    free_concurrency_slots,
    interrupted,
    keep_storage_connections,
    last_good_sensor_tick,
    loop_sensors_every,
    mark_run_canceled,
    mark_run_canceling,
    mark_run_failed,
    not_a_connection_retry,
    partitions_read_once,
    reload_daemon_workspace_every,
    run_start_event,
    sensor_known,
    share_instance_across_ticks,
    step_failure,
    tag_run,
    uses_default_run_launcher,
    watch_code_servers_every,
    write_step_events_in_batches,
)
from tests.helpers import connections_made, connections_open, make_settings


@dg.op
def _works():
    return 1


@dg.op
def _fails():
    raise dg.Failure(description="why it failed")


@dg.op
def _breaks():
    raise ValueError("boom")


@dg.op
def _stopped():
    raise dg.DagsterExecutionInterruptedError()


def _job(name, op):
    return dg.GraphDefinition(name=name, node_defs=[op]).to_job()


@pytest.fixture(scope="module")
def instance(tmp_path_factory):
    # A sqlite instance with the default launcher, schedule storage and concurrency pools: the
    # ephemeral one has neither schedules nor the DefaultRunLauncher.
    with dg.DagsterInstance.local_temp(str(tmp_path_factory.mktemp("dagster"))) as instance:
        yield instance


@pytest.fixture(scope="module")
def results(instance):
    return {
        name: _job(name, op).execute_in_process(instance=instance, raise_on_error=False)
        for name, op in (
            ("works", _works),
            ("fails", _fails),
            ("breaks", _breaks),
            ("stopped", _stopped),
        )
    }


def _params(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_instance_methods_used_keep_their_signatures():
    instance = dg.DagsterInstance
    assert _params(instance.all_logs)[:3] == ["self", "run_id", "of_type"]
    assert _params(instance.report_run_failed)[:3] == ["self", "dagster_run", "message"]
    assert _params(instance.report_run_canceled)[:3] == ["self", "dagster_run", "message"]
    assert _params(instance.report_run_canceling)[:3] == ["self", "run", "message"]
    assert _params(instance.add_run_tags) == ["self", "run_id", "new_tags"]
    assert _params(instance.all_instigator_state)[0] == "self"
    assert _params(instance.get_ticks)[:3] == ["self", "origin_id", "selector_id"]
    assert "limit" in _params(instance.get_ticks)
    assert _params(EventLogStorage.free_concurrency_slots_for_run) == ["self", "run_id"]
    for name in ("event_log_storage", "run_launcher"):
        assert isinstance(inspect.getattr_static(instance, name), property), name


def test_the_daemons_controller_keeps_what_run_daemon_calls():
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster._daemon.controller import DagsterDaemonController, daemon_controller_from_instance

    assert _params(daemon_controller_from_instance)[:2] == ["instance", "workspace_load_target"]
    assert WorkspaceFileTarget(paths=["w.yaml"]).paths == ["w.yaml"]
    assert _params(DagsterDaemonController.check_daemon_loop) == ["self"]


def test_the_scheduling_records_keep_the_fields_read():
    for name in ("instigator_name", "instigator_type", "instigator_origin_id", "selector_id"):
        assert hasattr(InstigatorState, name), name
    for name in ("status", "timestamp"):
        assert hasattr(InstigatorTick, name), name
    assert InstigatorType.SENSOR.value == "SENSOR"
    assert {"SUCCESS", "SKIPPED"} <= {status.value for status in TickStatus}


def test_a_sensor_never_evaluated_is_unknown(instance):
    assert not sensor_known(instance, "sessions_sensor")
    assert last_good_sensor_tick(instance, "sessions_sensor") is None


def test_the_run_start_names_the_process_that_ran_it(instance, results):
    started = run_start_event(instance, results["works"].run_id)
    assert started is not None and started.dagster_event is not None
    assert started.dagster_event.pid == os.getpid()
    assert run_start_event(instance, "no-such-run") is None


def test_a_run_is_marked_failed_then_canceled_from_outside(instance, results):
    run = instance.get_run_by_id(results["works"].run_id)
    assert run is not None
    mark_run_failed(instance, run, "its process stopped")
    failed = instance.get_run_by_id(run.run_id)
    assert failed is not None and failed.status == dg.DagsterRunStatus.FAILURE
    mark_run_canceled(instance, run, "its process stopped")
    canceled = instance.get_run_by_id(run.run_id)
    assert canceled is not None and canceled.status == dg.DagsterRunStatus.CANCELED


def test_a_run_is_tagged_and_marked_canceling_from_outside(instance, results):
    run = instance.get_run_by_id(results["works"].run_id)
    assert run is not None
    tag_run(instance, run.run_id, {"librarian/stopped": "true"})
    mark_run_canceling(instance, run, "librarian up was stopped")
    canceling = instance.get_run_by_id(run.run_id)
    assert canceling is not None and canceling.status == dg.DagsterRunStatus.CANCELING
    assert canceling.tags["librarian/stopped"] == "true"


def test_a_runs_concurrency_slot_is_given_back(instance, results):
    run_id = results["breaks"].run_id
    storage = instance.event_log_storage
    storage.set_concurrency_slots("llm", 1)
    storage.claim_concurrency_slot("llm", run_id, "_breaks")
    assert storage.get_concurrency_info("llm").claimed_slots
    free_concurrency_slots(instance, run_id)
    assert not storage.get_concurrency_info("llm").claimed_slots


def test_the_instance_launches_runs_beside_it(instance):
    assert uses_default_run_launcher(instance)


def _failure(result):
    (failure,) = [f for f in map(step_failure, result.all_events) if f is not None]
    return failure


def test_a_step_failure_says_why(results):
    failed = _failure(results["fails"])
    assert failed.description == "why it failed"
    assert failed.cause_class == "Failure"
    # defs/alerts.py shortens `<module>.Failure: why` to `Failure: why`.
    assert failed.cause_message.startswith(f"{dg.Failure.__module__}.Failure: why it failed")
    broken = _failure(results["breaks"])
    assert broken.description is None
    assert (broken.cause_class, broken.cause_message) == ("ValueError", "ValueError: boom\n")
    assert step_failure(results["works"].all_events[0]) is None


def test_an_interrupted_step_and_run_are_told_from_failures(results):
    events = results["stopped"].all_events
    assert any(interrupted(e) for e in events if e.is_step_failure)
    assert any(interrupted(e) for e in events if e.event_type == dg.DagsterEventType.RUN_FAILURE)
    for name in ("fails", "breaks"):
        assert not any(interrupted(e) for e in results[name].all_events), name


def test_a_connection_retry_warning_is_filtered_from_the_root_logger(caplog, monkeypatch):
    def lost():
        raise sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server gone"))

    # An ingest earlier in this process put the filter on the root logger: off, to see the line.
    monkeypatch.setattr(logging.getLogger(), "filters", [])
    with caplog.at_level(logging.WARNING), pytest.raises(DagsterPostgresException):
        retry_pg_connection_fn(lost, retry_limit=0, retry_wait=0)
    (record,) = [r for r in caplog.records if r.getMessage().startswith(CONNECTION_RETRY_LOG)]
    # The filter sits on the root logger: it sees only what is logged to that logger itself.
    assert record.name == "root"
    assert not not_a_connection_retry(record)
    other = logging.LogRecord("root", logging.WARNING, __file__, 1, "disk full", None, None)
    assert not_a_connection_retry(other)


def _calls(instance: dg.DagsterInstance) -> None:
    for _ in range(20):
        instance.get_runs(limit=1)
        instance.get_latest_materialization_event(dg.AssetKey("memory"))
        instance.get_dynamic_partitions("sessions")


def test_kept_storage_connections_serve_every_call_survive_a_drop_and_are_closed(
    tmp_path, database_url
):
    settings = make_settings(tmp_path, database_url)
    home = prepare_dagster_home(settings)["DAGSTER_HOME"]

    # As dagster-postgres has it: a connection for each call.
    with dg.DagsterInstance.from_config(home) as plain:
        before = connections_made(database_url)
        _calls(plain)
        after = connections_made(database_url)
    assert after - before >= 60

    kept = dg.DagsterInstance.from_config(home)
    keep_storage_connections(kept)
    before = connections_made(database_url)
    _calls(kept)
    after, still_open = connections_made(database_url), connections_open(database_url)
    assert after - before <= 3  # one per storage
    assert 1 <= still_open <= 3
    # The server drops them (a restart): each is replaced as it is next taken, with no error.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    _calls(kept)
    dispose_instance(kept)
    assert connections_open(database_url, until_none=10) == 0


def test_an_instance_not_on_postgres_is_left_as_it_is():
    # SQLite's in-memory storages use a NullPool too; a pool of one would lose the database.
    with dg.DagsterInstance.ephemeral() as ephemeral:
        keep_storage_connections(ephemeral)
        _calls(ephemeral)


_PARTS = dg.DynamicPartitionsDefinition(name="parts")


@dg.asset(partitions_def=_PARTS, backfill_policy=dg.BackfillPolicy.single_run())
def _ranged(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    for key in context.partition_keys:
        context.add_asset_metadata({"seen": key}, partition_key=key)
    return dg.MaterializeResult()


def _partition_reads(instance: dg.DagsterInstance, monkeypatch) -> dict[str, int]:
    """How often the instance's storage is asked for the definition's keys, or for one key."""
    storage = instance.event_log_storage
    reads = {"get_dynamic_partitions": 0, "has_dynamic_partition": 0}
    for name in reads:
        asked = getattr(storage, name)

        def counted(*args, _asked=asked, _name=name, **kwargs):
            reads[_name] += 1
            return _asked(*args, **kwargs)

        monkeypatch.setattr(storage, name, counted)
    return reads


def _ranged_run(instance: dg.DagsterInstance, keys: list[str]):
    """The job of `_ranged`, and the tags of one run over `keys` (added as partitions)."""
    instance.add_dynamic_partitions("parts", keys)
    job = dg.Definitions(
        assets=[_ranged], jobs=[dg.define_asset_job("ranged", selection=[_ranged])]
    ).resolve_job_def("ranged")
    tags = {
        "dagster/asset_partition_range_start": keys[0],
        "dagster/asset_partition_range_end": keys[-1],
    }
    return job, tags


def test_a_range_run_reads_its_dynamic_partitions_once(tmp_path, monkeypatch):
    keys = [f"k{i}" for i in range(8)]
    with dg.DagsterInstance.local_temp(str(tmp_path)) as instance:
        job, tags = _ranged_run(instance, keys)
        plain = _partition_reads(instance, monkeypatch)
        job.execute_in_process(instance=instance, tags=tags)
        monkeypatch.undo()
        once = _partition_reads(instance, monkeypatch)
        with partitions_read_once(instance):
            result = job.execute_in_process(instance=instance, tags=tags)
            instance.add_dynamic_partitions("parts", ["k8"])  # read again after a change
            assert "k8" in instance.get_dynamic_partitions("parts")
        assert "get_dynamic_partitions" not in vars(instance)  # the instance's own again
    # Every key's metadata validated against the partitions, as before.
    seen = {
        m.partition: m.metadata["seen"].value
        for m in result.asset_materializations_for_node("_ranged")
    }
    assert seen == {k: k for k in keys}
    # Without: the keys read and the range's ends checked for each key's metadata.
    assert plain["get_dynamic_partitions"] >= len(keys)
    assert plain["has_dynamic_partition"] >= 2 * len(keys)
    assert once == {"get_dynamic_partitions": 2, "has_dynamic_partition": 0}


def test_a_range_runs_materializations_are_written_in_batches(tmp_path, monkeypatch):
    keys = [f"k{i}" for i in range(8)]
    # Set, then removed: the value the test leaves behind is taken away at its end.
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "0")
    monkeypatch.delenv("DAGSTER_EVENT_BATCH_SIZE")
    with dg.DagsterInstance.local_temp(str(tmp_path)) as instance:
        job, tags = _ranged_run(instance, keys)
        storage = instance.event_log_storage
        batches: list[int] = []
        batch = storage.store_event_batch

        def counted(events):
            batches.append(len(events))
            return batch(events)

        monkeypatch.setattr(storage, "store_event_batch", counted)
        job.execute_in_process(instance=instance, tags=tags)
        assert batches == []  # Dagster's default: one write per event
        write_step_events_in_batches(size=5)
        result = job.execute_in_process(instance=instance, tags=tags)
        assert os.environ["DAGSTER_EVENT_BATCH_SIZE"] == "5"
    assert sum(batches) >= len(keys) and max(batches) <= 5 and len(batches) >= 2, batches
    seen = {m.partition for m in result.asset_materializations_for_node("_ranged")}
    assert seen == set(keys)


class _Thing(dg.ConfigurableResource):
    name: str = "thing"


@dg.sensor(name="_looks")
def _looks(context: dg.SensorEvaluationContext, thing: _Thing):
    context.instance.get_runs(limit=1)
    return dg.SkipReason(f"{thing.name} {id(context.instance)}")


@dg.run_failure_sensor(name="_hears")
def _hears(context: dg.RunFailureSensorContext, thing: _Thing):
    pass


def _tick(sensor: dg.SensorDefinition, ref) -> int:
    """A tick as the code server evaluates one (dagster/_grpc/impl.py): a context of the
    daemon's InstanceRef; the id of the instance it used."""
    with SensorEvaluationContext(
        ref, last_tick_completion_time=None, last_run_key=None, cursor=None, log_key=None,
        repository_name=None, sensor_name=sensor.name, resources={"thing": _Thing()},
    ) as context:  # fmt: skip
        sensor.evaluate_tick(context)
        return id(context.instance)


def test_sensor_ticks_share_one_kept_instance(tmp_path, database_url, monkeypatch):
    settings = make_settings(tmp_path, database_url)
    home = prepare_dagster_home(settings)["DAGSTER_HOME"]
    kept = dagster_internals._KeptInstance()
    monkeypatch.setattr(dagster_internals, "_kept_for_sensors", kept)
    with dg.DagsterInstance.from_config(home) as daemons:
        ref = daemons.get_ref()
        # As Dagster has it: every tick builds an instance, its storages each connecting.
        before = connections_made(database_url)
        _tick(_looks, ref)
        assert connections_made(database_url) - before >= 4
        share_instance_across_ticks([_looks, _hears])
        share_instance_across_ticks([_looks])  # wrapped once
        try:
            first = _tick(_looks, ref)
            assert _tick(_hears, ref) == first  # a run status sensor reads the same one
            before = connections_made(database_url)
            assert _tick(_looks, ref) == _tick(_hears, ref) == first
            assert connections_made(database_url) - before <= 1  # the count's own
        finally:
            kept.close()
    # A test's context with an instance of its own keeps it.
    with (
        dg.DagsterInstance.ephemeral() as own,
        dg.build_sensor_context(instance=own, resources={"thing": _Thing()}) as context,
    ):
        _looks.evaluate_tick(context)
        assert context.instance is own


def test_the_code_server_watch_reads_its_interval_when_started(monkeypatch):
    monkeypatch.setattr(server_watcher, "WATCH_INTERVAL", server_watcher.WATCH_INTERVAL)
    watch_code_servers_every(10.0)
    assert server_watcher.WATCH_INTERVAL == 10.0
    # The workspace starts each watch with no interval of its own: the module's is read then.
    assert "watch_interval" in _params(server_watcher.create_grpc_watch_thread)
    source = inspect.getsource(server_watcher.watch_grpc_server_thread)
    assert '"watch_interval", WATCH_INTERVAL' in source


def test_the_daemon_reads_its_workspace_reload_interval_at_each_check(monkeypatch):
    from dagster._daemon import controller

    monkeypatch.setattr(
        controller, "RELOAD_WORKSPACE_INTERVAL", controller.RELOAD_WORKSPACE_INTERVAL
    )
    reload_daemon_workspace_every(600.0)
    assert controller.RELOAD_WORKSPACE_INTERVAL == 600.0
    source = inspect.getsource(controller.DagsterDaemonController.check_workspace_freshness)
    assert "> RELOAD_WORKSPACE_INTERVAL" in source


def test_the_sensor_loop_reads_its_pause_after_each_pass(monkeypatch):
    from dagster._daemon import sensor

    monkeypatch.setattr(sensor, "MIN_INTERVAL_LOOP_TIME", sensor.MIN_INTERVAL_LOOP_TIME)
    loop_sensors_every(10.0)
    assert sensor.MIN_INTERVAL_LOOP_TIME == 10.0
    source = inspect.getsource(sensor.execute_sensor_iteration_loop)
    assert "MIN_INTERVAL_LOOP_TIME - loop_duration" in source
