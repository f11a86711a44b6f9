"""Every use of a Dagster internal, in one place: what no public API does.

Dagster marks its public API with `@public` (and lists it in its API docs); anything else may
change in any release without a deprecation. Each function here names the internal it uses and
why no public API serves, and tests/test_dagster_internals.py fails when one of them changes
(a signature, a class name, a log line), so an upgrade breaks a test instead of, silently, the
dead-run sweep, the capture-gap alert or `librarian ingest`'s messages.
"""

import logging
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import dagster as dg
import sqlalchemy.event
import sqlalchemy.exc
import sqlalchemy.pool

CONNECTION_RETRY_LOG = "Retrying failed database connection"
"""How dagster-postgres's `retry_pg_connection_fn` starts its warning for each retry."""

INTERRUPTED_ERROR = dg.DagsterExecutionInterruptedError.__name__
"""The class name a step failure records when a signal interrupted the step."""


def run_start_event(instance: dg.DagsterInstance, run_id: str) -> dg.EventLogEntry | None:
    """The run's RUN_START event, which the process executing the run writes (with its pid).

    `DagsterInstance.all_logs`: the public event queries (`fetch_run_status_changes`) filter by
    type, time and storage id but not by run, so one run's start would mean reading every run's.
    """
    started = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_START)
    return started[0] if started else None


def mark_run_failed(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
    """Record the run as failed from outside it, with `message` as the reason.

    `DagsterInstance.report_run_failed`, what Dagster's own run monitoring calls: publicly a run
    ends only from inside itself, or through the webserver's GraphQL (`terminate_run`), which
    `librarian ingest` runs without.
    """
    instance.report_run_failed(run, message)


def mark_run_canceling(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
    """Record that a run is being canceled: its worker, when interrupted, then records it
    canceled instead of failed.

    `DagsterInstance.report_run_canceling`, what the run launchers' `terminate` calls before they
    signal the worker: see `mark_run_failed`.
    """
    instance.report_run_canceling(run, message)


def mark_run_canceled(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
    """Record a run left CANCELING as canceled, with `message` as the reason.

    `DagsterInstance.report_run_canceled`: see `mark_run_failed`.
    """
    instance.report_run_canceled(run, message)


def tag_run(instance: dg.DagsterInstance, run_id: str, tags: dict[str, str]) -> None:
    """Add `tags` to a run that has ended.

    `DagsterInstance.add_run_tags`, what the webserver and the run queue use: a run's tags are
    publicly set only when it is created.
    """
    instance.add_run_tags(run_id, tags)


def free_concurrency_slots(instance: dg.DagsterInstance, run_id: str) -> None:
    """Give back the concurrency slots (the `llm` pool) a run held.

    `DagsterInstance.event_log_storage.free_concurrency_slots_for_run`, what the daemon's
    concurrency monitoring calls; no public API frees a slot, and `librarian ingest` runs
    without a daemon.
    """
    instance.event_log_storage.free_concurrency_slots_for_run(run_id)


def uses_default_run_launcher(instance: dg.DagsterInstance) -> bool:
    """Whether the instance launches runs with the DefaultRunLauncher (workers on this machine).

    `DagsterInstance.run_launcher`: the launcher is configured in the instance's YAML, and the
    instance is the only public object that has read it.
    """
    return isinstance(instance.run_launcher, dg.DefaultRunLauncher)


@contextmanager
def partitions_read_once(instance: dg.DagsterInstance) -> Iterator[None]:
    """While the block runs, the instance answers what a run asks of its dynamic partitions
    from one read of each definition's keys, instead of from the storage every time.

    A step of a run over a range of partitions checks the range's ends and reads every key of
    the definition each time it adds metadata to one partition of it
    (`add_asset_metadata(partition_key=...)` validates the key against
    `DagsterInstance.get_dynamic_partitions` and `has_dynamic_partition`), and again for each
    event: about 1,400 storage calls in a run of 25 sessions, four fifths of the run's, each a
    table check and a query. No public API or setting hands a run's context a cached view
    (Dagster's own `CachingDynamicPartitionsLoader` is internal, and the context asks the
    instance by name), so the instance's two public methods are shadowed on this object for
    the block: a key read once is known; one not seen is asked of the storage (a partition the
    sensor added meanwhile); adding or deleting a partition through this instance reads again.
    """
    read: dict[str, tuple[Sequence[str], set[str]]] = {}
    get_keys, has_key = instance.get_dynamic_partitions, instance.has_dynamic_partition
    add, delete = instance.add_dynamic_partitions, instance.delete_dynamic_partition

    def keys(partitions_def_name: str) -> Sequence[str]:
        if partitions_def_name not in read:
            found = list(get_keys(partitions_def_name))
            read[partitions_def_name] = (found, set(found))
        return read[partitions_def_name][0]

    def has(partitions_def_name: str, partition_key: str) -> bool:
        keys(partitions_def_name)
        return partition_key in read[partitions_def_name][1] or has_key(
            partitions_def_name, partition_key
        )

    def added(partitions_def_name: str, partition_keys: Sequence[str]) -> None:
        read.pop(partitions_def_name, None)
        add(partitions_def_name, partition_keys)

    def deleted(partitions_def_name: str, partition_key: str) -> None:
        read.pop(partitions_def_name, None)
        delete(partitions_def_name, partition_key)

    shadows = {
        "get_dynamic_partitions": keys,
        "has_dynamic_partition": has,
        "add_dynamic_partitions": added,
        "delete_dynamic_partition": deleted,
    }
    for name, method in shadows.items():
        setattr(instance, name, method)
    try:
        yield
    finally:
        for name in shadows:
            delattr(instance, name)


STORAGE_POOL_RECYCLE_S = 3600
"""A kept storage connection older than this is replaced (dagster-webserver's default)."""
STORAGE_POOL_OVERFLOW = 4
"""Connections a storage may open beyond its kept one while threads share it, closed after use."""


def keep_storage_connections(instance: dg.DagsterInstance) -> None:
    """Let the instance's storages keep a connection open across calls.

    `DagsterInstance.optimize_for_webserver`, what dagster-webserver calls at its start:
    dagster-postgres otherwise opens a connection for every storage call (its engines use
    SQLAlchemy's NullPool so that many instances hold none), about 460 in a run of one session,
    each a new server process (decision 0029). No public API or instance setting chooses the
    pool. No statement timeout is set (0): a run's queries are the product's own, not a UI's.

    A kept connection is pinged as it is taken (SQLAlchemy's `checkout` event): one the server
    dropped is replaced by a new one, whose failure dagster-postgres retries as for any lost
    connection. Unpinged, the first call after a restart failed at once, with no retry and a
    screen of errors where `librarian ingest` says one line. Kept once: a second call, or an
    instance that is not dagster-postgres's, is left as it is.
    """
    engines = _storage_engines(instance)
    if not engines or not all(
        e.dialect.name == "postgresql" and isinstance(e.pool, sqlalchemy.pool.NullPool)
        for e in engines
    ):
        return  # not dagster-postgres (an ephemeral instance is SQLite's), or kept already
    instance.optimize_for_webserver(
        statement_timeout=0,
        pool_recycle=STORAGE_POOL_RECYCLE_S,
        max_overflow=STORAGE_POOL_OVERFLOW,
    )
    for engine in _storage_engines(instance):
        sqlalchemy.event.listen(engine, "checkout", _ping)


def _ping(dbapi_connection, _record, _proxy) -> None:
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        # The pool's documented answer: drop this connection and take a new one.
        raise sqlalchemy.exc.DisconnectionError() from exc


def _storage_engines(instance: dg.DagsterInstance) -> list:
    """The storages' SQLAlchemy engines: their `_engine`, under dagster-postgres."""
    storages = (instance.run_storage, instance.event_log_storage, instance.schedule_storage)
    engines = (getattr(storage, "_engine", None) for storage in storages)
    return [engine for engine in engines if engine is not None]


def dispose_instance(instance: dg.DagsterInstance) -> None:
    """Dispose of the instance, closing the connections `keep_storage_connections` kept.

    The storages' `_engine` (a SQLAlchemy `Engine`, whose public `dispose` closes its pool):
    `DagsterInstance.dispose` leaves the engines be, and a kept connection would otherwise stay
    open on the server until the instance is garbage-collected.
    """
    for engine in _storage_engines(instance):
        engine.dispose()
    instance.dispose()


class _KeptInstance:
    """The instance this process's sensor ticks share: built once from the daemon's
    `InstanceRef`, its connections kept (`keep_storage_connections`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ref: object = None
        self._instance: dg.DagsterInstance | None = None

    def of(self, ref: object) -> dg.DagsterInstance:
        with self._lock:
            # One daemon, one ref, for the code server's life; another ref (a test's, another
            # daemon's) gets its own, and the one before is left to the ticks still using it.
            if self._instance is None or self._ref != ref:
                instance = dg.DagsterInstance.from_ref(ref)  # pyright: ignore[reportArgumentType]
                keep_storage_connections(instance)
                self._ref, self._instance = ref, instance
            return self._instance

    def current(self) -> dg.DagsterInstance | None:
        return self._instance

    def close(self) -> None:
        with self._lock:
            if self._instance is not None:
                dispose_instance(self._instance)
            self._ref = self._instance = None


_kept_for_sensors = _KeptInstance()


def shares_instance_across_ticks(instance: dg.DagsterInstance | None) -> bool:
    """Whether `instance` is the one this process's sensor ticks share
    (`share_instance_across_ticks`): a tick of the code server, not a test's own context."""
    return instance is not None and instance is _kept_for_sensors.current()


def share_instance_across_ticks(sensors: Iterable[dg.SensorDefinition]) -> None:
    """Let every tick of these sensors in this process use one instance, kept, instead of a new
    one per tick.

    The code server evaluates a tick in a `SensorEvaluationContext` made from the daemon's
    `InstanceRef`; the first use of its `instance`, or of its `resources` (built with the
    instance, even by sensors whose resources never touch it), builds a `DagsterInstance` from
    the ref: three storages, each checking its tables over a new connection, then a connection
    for every call (NullPool, decision 0029). About 8 server processes a tick, 60 a minute
    over the sensors' ticks, a fifth of idle `up`'s CPU (decision 0043). No public API hands a
    tick an instance, so: `SensorDefinition._evaluation_fn`, what `evaluate_tick` calls with the
    context (wrapped here, once), and `SensorEvaluationContext._instance`, what `instance` and
    `resources` read before they build one (set here when unset: a test's
    `build_sensor_context(instance=...)` keeps its own).
    """
    for sensor in sensors:
        evaluate = sensor._evaluation_fn
        if getattr(evaluate, "shares_instance", False):
            continue

        def with_kept_instance(context, _evaluate=evaluate):
            ref = context.instance_ref
            if context._instance is None and ref is not None:
                context._instance = _kept_for_sensors.of(ref)
            return _evaluate(context)

        with_kept_instance.shares_instance = True  # pyright: ignore[reportFunctionMemberAccess]
        sensor._evaluation_fn = with_kept_instance  # pyright: ignore[reportAttributeAccessIssue]


def _sensor_states(instance: dg.DagsterInstance, name: str):
    # The instance's scheduling API (the one the UI's sensor page reads): the sensor's stored
    # state, which exists once the daemon has evaluated it or a user has turned it on or off.
    return [
        s
        for s in instance.all_instigator_state()
        if s.instigator_name == name and s.instigator_type.value == "SENSOR"
    ]


def sensor_known(instance: dg.DagsterInstance, name: str) -> bool:
    """Whether the sensor has a stored state: the daemon has evaluated it, or a user turned it
    on or off.

    `DagsterInstance.all_instigator_state` and the fields of its `InstigatorState`: a sensor
    reads other sensors' state through no public API (the UI reads it through GraphQL).
    """
    return bool(_sensor_states(instance, name))


def last_good_sensor_tick(instance: dg.DagsterInstance, name: str) -> float | None:
    """When the sensor last evaluated without an error (a skip is a good tick), if ever.

    `DagsterInstance.get_ticks` and the fields of its `InstigatorTick`, with the state of
    `sensor_known`: no public API lists another sensor's ticks.
    """
    latest = None
    for state in _sensor_states(instance, name):
        for tick in instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=50):
            if tick.status.value in ("SUCCESS", "SKIPPED"):
                latest = max(latest or 0.0, tick.timestamp)
                break
    return latest


@dataclass(frozen=True)
class StepFailure:
    """Why a step failed, as Dagster recorded it."""

    cause_class: str | None
    """The innermost exception's class name: the user's error, not Dagster's wrapper around it."""
    cause_message: str | None
    """Its text as Dagster recorded it: `module.Class: why`, as Python prints an exception."""
    description: str | None
    """A `dg.Failure`'s own description, which says why even after retries."""


def step_failure(event: dg.DagsterEvent) -> StepFailure | None:
    """What a STEP_FAILURE event says about why; None for any other event.

    `DagsterEvent.step_failure_data` and its `SerializableErrorInfo`: the public
    `DagsterEvent` says that a step failed (`is_step_failure`), not why.
    """
    if not event.is_step_failure:
        return None
    data = event.step_failure_data
    error = data.error
    while error is not None and error.cause is not None:
        error = error.cause
    user = data.user_failure_data
    return StepFailure(
        cause_class=error.cls_name if error is not None else None,
        cause_message=error.message if error is not None else None,
        description=user.description if user is not None else None,
    )


def interrupted(event: dg.DagsterEvent) -> bool:
    """Whether the event is a step or a run failing because a signal interrupted it.

    Matched as text, as no public API says it: the step failure's error class
    (`DagsterExecutionInterruptedError`, outside the documented errors) and the run failure's
    message ("Execution was interrupted ..."), read through `DagsterEvent.step_failure_data`
    and `is_run_failure`.
    """
    error = event.step_failure_data.error if event.is_step_failure else None
    if error is not None and error.cls_name == INTERRUPTED_ERROR:
        return True
    return event.is_run_failure and "interrupted" in (event.message or "")


def not_a_connection_retry(record: logging.LogRecord) -> bool:
    """A logging filter that drops dagster-postgres's warning for each retry of a lost
    connection (several lines each, on the root logger, with no logger name of its own to
    silence): a database that stays away is reported once, as one line.

    Matched as text: `CONNECTION_RETRY_LOG`, the start of the line it logs.
    """
    return not str(record.msg).startswith(CONNECTION_RETRY_LOG)


CODE_SERVER_WATCH_S = 10.0
"""How often the daemon and the webserver `librarian up` starts ask the code server whether it
was started again (Dagster's own: every second)."""


def watch_code_servers_every(seconds: float) -> None:
    """Let this process's workspace ask each code server for its id every `seconds`.

    `dagster._grpc.server_watcher.WATCH_INTERVAL`, which `watch_grpc_server_thread` reads when a
    workspace starts a server's watch without an interval, as every workspace does (no setting
    or workspace field gives one). Every second from the daemon and from the webserver, each
    call 1.3 ms of the code server's CPU and about as much of the caller's: a quarter of idle
    `up`'s CPU, to learn within a second, not ten, that `up` started the code server again.
    """
    from dagster._grpc import server_watcher

    server_watcher.WATCH_INTERVAL = seconds


DAEMON_WORKSPACE_RELOAD_S = 600.0
"""How often the daemon `librarian up` starts reloads its whole workspace (Dagster: every 60 s)."""


def reload_daemon_workspace_every(seconds: float) -> None:
    """Let this process's daemon reload its workspace (each code server's whole definitions,
    over gRPC) every `seconds`.

    `dagster._daemon.controller.RELOAD_WORKSPACE_INTERVAL`, which the daemon's controller reads
    at each check of its threads; no setting gives it. Each reload cost the daemon and the code
    server 35 ms of CPU each, a minute, to catch a code server that changed, which the server
    watch (`watch_code_servers_every`) already reports within 10 s.
    """
    from dagster._daemon import controller

    controller.RELOAD_WORKSPACE_INTERVAL = seconds


EVENT_BATCH = 100
"""Materializations (and observations) of one step written to the event log in one insert."""


def write_step_events_in_batches(size: int = EVENT_BATCH) -> None:
    """Let this process's runs write the materializations a step makes, one per partition of its
    range, `size` at a time, where each was a write of its own.

    `DAGSTER_EVENT_BATCH_SIZE`, which Dagster reads at each event (dagster/_core/instance/
    utils.py, added for ranged backfills in dagster-io/dagster pull 19862, opt-in); no setting
    gives it. A run of 25 sessions makes 175 materializations: Dagster's time in an ingest of 100
    sessions went from 8.3 to 3.4 s (decision 0044). An operator's own value is kept.
    """
    os.environ.setdefault("DAGSTER_EVENT_BATCH_SIZE", str(size))


SENSOR_LOOP_S = 10.0
"""How often the daemon `librarian up` starts looks for sensors due (Dagster: every 5 s)."""


def loop_sensors_every(seconds: float) -> None:
    """Let this process's sensor daemon look for sensors due every `seconds`.

    `dagster._daemon.sensor.MIN_INTERVAL_LOOP_TIME`, which the sensor loop reads after each pass;
    no setting gives it. Each pass reads every sensor's state (two catalog queries and a select,
    dagster's schedule storage checks its tables each time), whatever the sensors' intervals:
    every 5 s, a sixth of the daemon's CPU. Every sensor's interval is a multiple of 10 s, so
    each still ticks on time.
    """
    from dagster._daemon import sensor

    sensor.MIN_INTERVAL_LOOP_TIME = seconds


def run_daemon(workspace: str) -> None:
    """What `dagster-daemon run -w workspace` does, on an instance whose storages keep their
    connections (`keep_storage_connections`), until interrupted.

    `dagster._daemon.controller.daemon_controller_from_instance` and `WorkspaceFileTarget`, what
    the daemon's command runs: the command builds its instance inside and offers no way to keep
    its connections, so every storage call of the daemon's threads (the sensor loop's every 5 s,
    each tick's records) opened a connection, a new server process each (decision 0043).
    """
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster._daemon.controller import daemon_controller_from_instance

    watch_code_servers_every(CODE_SERVER_WATCH_S)
    reload_daemon_workspace_every(DAEMON_WORKSPACE_RELOAD_S)
    loop_sensors_every(SENSOR_LOOP_S)
    with dg.DagsterInstance.get() as instance:
        keep_storage_connections(instance)
        target = WorkspaceFileTarget(paths=[workspace])
        with daemon_controller_from_instance(instance, workspace_load_target=target) as controller:
            controller.check_daemon_loop()
