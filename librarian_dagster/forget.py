"""Dagster's part of forgetting sessions (core/assembly/forgetting.py has the whole): the runs
that materialized their partitions, deleted whole, since a run is what Dagster can delete
(`DagsterInstance.delete_run`: their event metadata quotes a session's summary, digest and
files), and the partition keys. Other sessions that ran in the same runs keep their memories;
their run history in the UI goes with the runs, and is said.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import dagster as dg

from librarian_dagster.core.assembly.forgetting import (
    Forgotten,
    RunsForgotten,
    forget_queued_run_history,
    forget_sessions,
)
from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.settings import Settings
from librarian_dagster.defs.partitions import SESSIONS, STAGES, session_id_of

_PAGE = 500  # records asked of Dagster's event log at a time


@dataclass(frozen=True)
class DagsterRunHistory:
    """The sessions' runs and partitions in this Dagster instance (`RunHistory`)."""

    instance: dg.DagsterInstance

    def forget(self, session_ids: Sequence[str]) -> RunsForgotten:
        instance = self.instance
        wanted = set(session_ids)
        keys = [k for k in instance.get_dynamic_partitions(SESSIONS) if session_id_of(k) in wanted]
        runs = _runs_of(instance, keys)
        others = _other_sessions(instance, runs, wanted)
        for run_id in sorted(runs):
            instance.delete_run(run_id)
        for key in keys:
            instance.delete_dynamic_partition(SESSIONS, key)
        return RunsForgotten(
            tuple(session_ids), tuple(sorted(runs)), len(keys), tuple(sorted(others))
        )


def forget_pending(settings: Settings) -> RunsForgotten:
    """`librarian forget --pending`: Dagster's runs and partitions of the sessions the recall
    server's page forgot, which the sessions sensor would delete at its next tick."""
    with _opened(settings) as (store, instance):
        return forget_queued_run_history(store.ledger, DagsterRunHistory(instance))


def forget_everywhere(session_ids: Sequence[str], settings: Settings) -> Forgotten:
    """`librarian forget`: the sessions forgotten in the store and the Dagster instance the
    settings point at, and what the page left in Dagster too."""
    with _opened(settings) as (store, instance):
        return forget_sessions(session_ids, settings, store, DagsterRunHistory(instance))


@contextmanager
def _opened(settings: Settings) -> Iterator[tuple[Store, dg.DagsterInstance]]:
    """The store and the Dagster instance the settings point at, closed after."""
    from librarian_dagster.core.assembly.store import open_store
    from librarian_dagster.dagster_internals import dispose_instance
    from librarian_dagster.ingest import open_instance

    with open_store(settings) as store:
        instance = open_instance(settings)
        try:
            yield store, instance
        finally:
            dispose_instance(instance)


def _runs_of(instance: dg.DagsterInstance, keys: Sequence[str]) -> set[str]:
    """The runs that materialized any stage of these partitions, or ran one of them alone."""
    runs: set[str] = set()
    if not keys:
        return runs
    for stage in STAGES:
        records = dg.AssetRecordsFilter(asset_key=dg.AssetKey(stage), asset_partitions=list(keys))
        runs |= {r.run_id for r in _all(instance, records) if r.run_id}
    for key in keys:
        alone = instance.get_run_records(dg.RunsFilter(tags={"dagster/partition": key}))
        runs |= {r.dagster_run.run_id for r in alone}
    return runs


def _other_sessions(instance: dg.DagsterInstance, runs: set[str], wanted: set[str]) -> set[str]:
    """The sessions, other than `wanted`, whose first stage one of `runs` materialized."""
    others: set[str] = set()
    for run_id in runs:
        record = instance.get_run_record_by_id(run_id)
        if record is None or record.start_time is None:
            continue
        window = dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(STAGES[0]),
            after_timestamp=record.start_time - 1,
            before_timestamp=(record.end_time or record.update_timestamp.timestamp()) + 1,
        )
        for event in _all(instance, window):
            if event.run_id == run_id and event.partition_key:
                others.add(session_id_of(event.partition_key))
    return others - wanted


def _all(instance: dg.DagsterInstance, records: dg.AssetRecordsFilter) -> list[dg.EventLogRecord]:
    found: list[dg.EventLogRecord] = []
    cursor = None
    while True:
        page = instance.fetch_materializations(records, limit=_PAGE, cursor=cursor)
        found += page.records
        if not page.has_more:
            return found
        cursor = page.cursor
