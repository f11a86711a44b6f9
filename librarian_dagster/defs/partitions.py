"""The sessions' partitions: one per session of any agent, `<project>/<yyyy-mm>/<agent>/<id>`.

The key leads with what a user picks sessions by in the UI (docs/decisions/0014): the partition
selection text `app/*` takes a project's sessions, `app/2026-11/*` a project's month,
`app/2026-11/codex/*` its Codex sessions of that month, and the partitions list's filters
`/2026-11/` a month and `/codex/` an agent across projects. The session id is always the last
segment (`session_id_of`, the one place that reads a key); staged files are named by session id.
Stores from before keep older keys (a bare session id, or `<project>/<yyyy-mm>/<id>`): read every
way, and `migrate_partition_keys` re-keys them once (the sessions sensor's first tick, `librarian
ingest` or `backfill`).
"""

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

import dagster as dg

from librarian_dagster.core.capture.files import SessionFiles, SessionHead
from librarian_dagster.core.capture.keys import is_current, partition_key, session_id_of
from librarian_dagster.core.capture.readers import session_head, session_heads
from librarian_dagster.core.store.ledger import Ledger
from librarian_dagster.core.store.memories import Memories

SESSIONS = "sessions"
sessions_partitions = dg.DynamicPartitionsDefinition(name=SESSIONS)

# How many sessions one run of a backfill from the UI takes at most: Dagster's bookkeeping of a
# run (about 2 s) is paid once per run, not once per session (docs/decisions/0014).
SESSIONS_PER_RUN = 25
BATCH = dg.BackfillPolicy.multi_run(max_partitions_per_run=SESSIONS_PER_RUN)

# The stages of a session, in order (the assets of the `ingest_session` job).
STAGES = (
    "transcript",
    "redacted_session",
    "session_digest",
    "digest_chunks",
    "exchange_chunks",
    "chunk_embeddings",
    "memory",
)


def partition_key_for(files: SessionFiles, known_cwds: Iterable[str] = ()) -> str:
    """A new session's key, from the head of its main file (project and first timestamp);
    without a timestamp there, the month its file was last changed. `known_cwds`: folders where
    sessions ran, for a transcript that names none (Gemini CLI's)."""
    return _key(files, session_head(files, known_cwds))


def partition_keys_for(
    sessions: Sequence[SessionFiles], known_cwds: Iterable[str] = ()
) -> Mapping[str, str]:
    """Session id -> a new key for each of these sessions; each one's head lends the folder it
    names to those whose heads name none (`session_heads`)."""
    heads = session_heads(sessions, known_cwds)
    return {s.session_id: _key(s, head) for s, head in zip(sessions, heads, strict=True)}


def _key(files: SessionFiles, head: SessionHead) -> str:
    started = head.started_at
    if started is None and files.main is not None:
        try:
            started = datetime.fromtimestamp(files.main.stat().st_mtime, UTC)
        except OSError:
            started = None
    return partition_key(files.session_id, head.project, started, files.agent)


def keys_by_session(keys: Iterable[str]) -> dict[str, str]:
    """Session id -> its partition key, over the keys the instance holds (the newest shape of
    key first, if a store being re-keyed holds more than one)."""
    out: dict[str, str] = {}
    for key in keys:
        session_id = session_id_of(key)
        if session_id not in out or key.count("/") > out[session_id].count("/"):
            out[session_id] = key
    return out


def ensure_partitions(
    instance: dg.DagsterInstance, sessions: Sequence[SessionFiles], known_cwds: Iterable[str] = ()
) -> list[str]:
    """The partition keys of these sessions, added to the instance when new, in their order."""
    known = keys_by_session(instance.get_dynamic_partitions(SESSIONS))
    fresh = partition_keys_for([s for s in sessions if s.session_id not in known], known_cwds)
    keys = [known.get(s.session_id) or fresh[s.session_id] for s in sessions]
    new = [k for k in dict.fromkeys(keys) if session_id_of(k) not in known]
    if new:
        instance.add_dynamic_partitions(SESSIONS, new)
    return keys


def keys_for_ids(
    instance: dg.DagsterInstance, memories: Memories, ledger: Ledger, session_ids: Sequence[str]
) -> list[str]:
    """The partition keys of sessions the store knows, added to the instance when missing."""
    known = keys_by_session(instance.get_dynamic_partitions(SESSIONS))
    keys, new = [], []
    for session_id in session_ids:
        key = known.get(session_id) or _key_from_store(memories, ledger, session_id) or session_id
        if session_id not in known:
            new.append(key)
            known[session_id] = key
        keys.append(key)
    if new:
        instance.add_dynamic_partitions(SESSIONS, new)
    return keys


def _key_from_store(memories: Memories, ledger: Ledger, session_id: str) -> str | None:
    """The session's key from what the store holds of it; None where it holds nothing."""
    # What the memory says (the parsed project and start) first: the files may be gone.
    memory = memories.memory_record(session_id)
    if memory is not None:
        return partition_key(session_id, memory.project, memory.started_at, memory.agent)
    files = ledger.session_source(session_id)
    return partition_key_for(files, ledger.known_cwds()) if files is not None else None


def migrate_partition_keys(instance: dg.DagsterInstance, memories: Memories, ledger: Ledger) -> int:
    """Re-key partitions of an older shape (a bare session id, `<project>/<month>/<id>`: stores
    from before) as `<project>/<month>/<agent>/<id>`; returns how many. Idempotent, and cheap
    when every key is current.

    Each stage's materialization of an old key is reported once under the new key (metadata
    `migrated_from`), so the UI shows the session as materialized; the old key is then deleted.
    Its runs and events stay in the instance under the old key. A session the store cannot
    place (no memory, no recorded files) keeps its old key, which everything reads too.
    """
    keys = instance.get_dynamic_partitions(SESSIONS)
    older = [k for k in keys if not is_current(k)]
    if not older:
        return 0
    rekeyed = {session_id_of(k) for k in keys if is_current(k)}
    new_of: dict[str, str] = {}
    for old in older:
        if session_id_of(old) in rekeyed:
            continue  # re-keyed by an earlier, interrupted migration: only the old key is left
        new = _key_from_store(memories, ledger, session_id_of(old))
        if new is not None:
            new_of[old] = new
    if new_of:
        instance.add_dynamic_partitions(SESSIONS, list(new_of.values()))
        for stage in STAGES:
            for old in _materialized(instance, dg.AssetKey(stage), list(new_of)):
                instance.report_runless_asset_event(
                    dg.AssetMaterialization(
                        asset_key=stage, partition=new_of[old], metadata={"migrated_from": old}
                    )
                )
    for old in older:
        if session_id_of(old) in rekeyed or old in new_of:
            instance.delete_dynamic_partition(SESSIONS, old)
    return len(new_of)


def _materialized(
    instance: dg.DagsterInstance, asset_key: dg.AssetKey, partitions: list[str]
) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(partitions), 200):
        records_filter = dg.AssetRecordsFilter(
            asset_key=asset_key, asset_partitions=partitions[start : start + 200]
        )
        cursor = None
        while True:
            result = instance.fetch_materializations(records_filter, limit=1000, cursor=cursor)
            found.update(r.partition_key for r in result.records if r.partition_key)
            if not result.has_more:
                break
            cursor = result.cursor
    return found
