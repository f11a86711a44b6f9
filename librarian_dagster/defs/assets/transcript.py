import dagster as dg

from librarian_dagster.core.capture.transcripts import parse_session
from librarian_dagster.defs.assets._common import GROUP, kept_out, per_session, source_files
from librarian_dagster.defs.partitions import BATCH, sessions_partitions
from librarian_dagster.defs.resources import LedgerResource, MirrorResource


@dg.asset(
    partitions_def=sessions_partitions, kinds={"python"}, group_name=GROUP, backfill_policy=BATCH
)
def transcript(
    context: dg.AssetExecutionContext, ledger: LedgerResource, mirror: MirrorResource
) -> dg.MaterializeResult:
    """A session's transcript files parsed into normalised turns (counted here, never stored).

    Nothing unredacted is written anywhere: the next stage parses again and redacts before it
    stores, so the only unredacted copy stays the file Claude Code wrote. A session with nothing
    to remember (empty, summary-only, not JSON) says why in `skip_reason`, and no later stage
    materializes it.
    """
    db = ledger.get()
    skips = db.skip_list()

    def parse(key: str, _: str):
        files = source_files(db, key)
        reason = kept_out(files, mirror.exclude or (), skips)
        if reason:
            return None, {"files": [str(p) for p in files.paths], "skip_reason": reason}
        session = parse_session(files, include_thinking=mirror.include_thinking)
        stats = session.stats
        return None, {
            "files": [str(p) for p in files.paths],
            "records": sum(stats.records_by_type.values()),
            "records_by_type": dict(stats.records_by_type),
            "malformed_lines": stats.malformed_lines,
            "malformed_examples": list(stats.malformed_examples[:10]),
            "turns": len(session.turns),
            "tool_uses": stats.tool_uses,
            "subagents": stats.subagents,
            "compactions": stats.compactions,
            "project": session.project,
            "skip_reason": session.skip_reason or "",
        }

    per_session(context, {k: k for k in context.partition_keys}, parse)
    return dg.MaterializeResult()
