import dagster as dg

from librarian_dagster.defs.assets._common import GROUP

INGEST_SESSION = "ingest_session"

# Every stage of one session, transcript to memory (with the blocking leak check in between).
# The one way a session is ingested: the sessions sensor, backfills from the UI and
# `librarian ingest` all run this job.
ingest_session_job = dg.define_asset_job(
    INGEST_SESSION,
    selection=dg.AssetSelection.groups(GROUP),
    description="Ingest one session: transcript -> redacted -> digest -> chunks -> vectors -> DB.",
    # One process per run, not one per step: the six steps of a session are sequential anyway,
    # and a process per step would pay Dagster's import and the model load six times.
    executor_def=dg.in_process_executor,
)
