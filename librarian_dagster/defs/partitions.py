import dagster as dg

# One partition per Claude Code session, keyed by its session id; added by the mirror sensor and
# by `librarian ingest`.
SESSIONS = "sessions"
sessions_partitions = dg.DynamicPartitionsDefinition(name=SESSIONS)

# How many sessions one run of a backfill from the UI takes at most: Dagster's bookkeeping of a
# run (about 2 s) is paid once per run, not once per session (docs/decisions/0014).
SESSIONS_PER_RUN = 25
BATCH = dg.BackfillPolicy.multi_run(max_partitions_per_run=SESSIONS_PER_RUN)


def session_id_of(partition_key: str) -> str:
    """The session id a partition key names."""
    return partition_key
