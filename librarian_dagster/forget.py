"""Forgetting sessions: everything the product holds of them removed, and kept out from then on.

What is removed, for each session:

- the store: its memory, chunks (their postings go with them), session vector, where its files
  were and a deferral waiting for tomorrow's budget;
- the staged file of every stage (`LIBRARIAN_HOME/staging/<stage>/<session>.json`);
- the BM25 postings kept on this machine (`LIBRARIAN_HOME/cache/postings/`, decision 0032): they
  hold the words of every chunk, the session's too, and are a cache the next search rebuilds
  (deleted under each store's writers' lock, so a writer that read the store before the forget
  cannot leave a file behind it). A server that has them mapped goes on with its copy, the
  session's rows masked, and the next writer keeps a new base without them;
- Dagster's record of it: the runs that materialized its partition (their event metadata quotes
  its summary, its digest and its files), deleted whole, since a run is what Dagster can delete
  (`DagsterInstance.delete_run`), and its partition key. Other sessions that ran in the same
  runs keep their memories; their run history in the UI goes with the runs, and is said.

The session goes on the skip list first, so the mirror sensor cannot take it again while it is
being forgotten, or ever after (`librarian skip --undo` lets it back). A recall server running
meanwhile stops returning it at its next question: its postings follow the store's generation
(core/recall/lexical.py), and its facts are read from the store.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import dagster as dg

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.recall import postings_file
from librarian_dagster.core.settings import Settings
from librarian_dagster.defs.partitions import SESSIONS, STAGES, session_id_of
from librarian_dagster.defs.staging import StagingIOManager

_PAGE = 500  # records asked of Dagster's event log at a time


@dataclass(frozen=True)
class Forgotten:
    sessions: tuple[str, ...]
    memories: int
    """Of `sessions`, those the store held a memory of."""
    staged_files: int
    search_caches: int
    """BM25 postings files of this machine's searches, deleted."""
    runs: tuple[str, ...]
    partitions: int
    others: tuple[str, ...]
    """Sessions of other partitions in the deleted runs: memories kept, run history gone."""

    def said(self) -> str:
        """What was removed, in one line (`librarian forget` prints it, the page shows it)."""
        return (
            f"forgot {len(self.sessions)} session(s): {self.memories} memories with their "
            f"chunks, {self.staged_files} staged files, {self.search_caches} search cache "
            f"file(s), {len(self.runs)} Dagster run(s), {self.partitions} partition(s); on the "
            "skip list from now on"
        )

    def others_said(self) -> str:
        """What forgetting did to the `others`, to be followed by which they are."""
        return (
            f"{len(self.others)} other session(s) ran in the same runs: their memories are kept, "
            "their run history in the UI went with the runs (`librarian backfill` writes it "
            "again)"
        )


def forget_everywhere(session_ids: Sequence[str], settings: Settings) -> Forgotten:
    """`forget_sessions` on the store and the Dagster instance the settings point at, each
    opened for it and closed after (the recall server's page forgets this way)."""
    from librarian_dagster.core.assembly.store import open_store
    from librarian_dagster.dagster_internals import dispose_instance
    from librarian_dagster.ingest import open_instance

    with open_store(settings) as store:
        instance = open_instance(settings)
        try:
            return forget_sessions(session_ids, settings, store, instance)
        finally:
            dispose_instance(instance)


def forget_sessions(
    session_ids: Sequence[str], settings: Settings, store: Store, instance: dg.DagsterInstance
) -> Forgotten:
    ids = tuple(dict.fromkeys(session_ids))
    store.ledger.skip_sessions(ids)  # first: nothing takes them again from here on
    memories = sum(store.memories.delete_memory(s) for s in ids)
    store.ledger.forget_sources(ids)
    staging = StagingIOManager(home=str(settings.home))
    staged = 0
    for session_id in ids:
        for stage in STAGES:
            path = staging.path_for(stage, session_id)
            if path.exists():
                path.unlink()
                staged += 1
    caches = postings_file.delete_all(settings.postings_dir)
    wanted = set(ids)
    keys = [k for k in instance.get_dynamic_partitions(SESSIONS) if session_id_of(k) in wanted]
    runs = _runs_of(instance, keys)
    others = _other_sessions(instance, runs, wanted)
    for run_id in sorted(runs):
        instance.delete_run(run_id)
    for key in keys:
        instance.delete_dynamic_partition(SESSIONS, key)
    return Forgotten(
        ids, memories, staged, caches, tuple(sorted(runs)), len(keys), tuple(sorted(others))
    )


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
