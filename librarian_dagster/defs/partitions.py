import dagster as dg

# One partition per Claude Code session, keyed by its session id; added by the mirror sensor and
# by `librarian ingest`.
SESSIONS = "sessions"
sessions_partitions = dg.DynamicPartitionsDefinition(name=SESSIONS)
