from collections import Counter
from collections.abc import Iterator

import dagster as dg
from pydantic import TypeAdapter

from librarian_dagster.core.capture.transcripts import Session, parse_session
from librarian_dagster.core.redaction.scan import find_secrets, redact_session
from librarian_dagster.defs.assets._common import (
    EXCLUDED,
    GROUP,
    kept_out,
    per_session,
    source_files,
)
from librarian_dagster.defs.partitions import BATCH, sessions_partitions
from librarian_dagster.defs.resources import LedgerResource, MirrorResource


@dg.asset(
    partitions_def=sessions_partitions,
    deps=["transcript"],
    kinds={"python"},
    group_name=GROUP,
    output_required=False,
    backfill_policy=BATCH,
)
def redacted_session(
    context: dg.AssetExecutionContext, ledger: LedgerResource, mirror: MirrorResource
) -> Iterator[dg.Output[dict[str, Session]]]:
    """The session with every secret replaced by [REDACTED:<family>]: the first stage stored.

    A session with nothing to remember is left out, so no later stage materializes it; the
    reason is in the `transcript` stage's metadata.
    """
    db = ledger.get()
    skips = db.skip_list()

    def redact(key: str, _: str):
        files = source_files(db, key)
        reason = kept_out(files, mirror.exclude or (), skips)
        if reason == EXCLUDED:
            db.record_nothing_to_remember(files.session_id, files.fingerprint())
        if reason:
            # A skipped session is not marked "nothing to remember": once taken off the skip
            # list, the sensor asks for it again.
            context.add_asset_metadata({"absent": reason}, partition_key=key)
            return None
        session = parse_session(files, include_thinking=mirror.include_thinking)
        if session.skip_reason:
            context.log.info(f"{key}: nothing to remember: {session.skip_reason}")
            db.record_nothing_to_remember(session.session_id, session.fingerprint)
            reason = f"nothing to remember: {session.skip_reason}"
            context.add_asset_metadata({"absent": reason}, partition_key=key)
            return None
        clean, counts = redact_session(session)
        return clean, {
            "redactions": sum(counts.values()),
            "redactions_by_family": dict(sorted(counts.items())),
            "turns": len(clean.turns),
        }

    sessions = per_session(context, {k: k for k in context.partition_keys}, redact)
    if sessions:
        yield dg.Output(sessions)


@dg.asset_check(
    asset=redacted_session,
    blocking=True,
    partitions_def=sessions_partitions,
    description="The stored, redacted session, read back as the digest will read it, holds no "
    "secret. Blocking: a session that fails never reaches the digest (and so never an LLM).",
)
def no_secrets_remain(redacted_session: dict[str, Session]) -> dg.AssetCheckResult:
    # The input is loaded from the stored file, not handed over in memory: what is checked is
    # what later stages read. Each string on its own, as the digest reads them: scanning the JSON
    # text instead would see escapes (`\\n`) that are not in the data, and look-alikes across
    # field boundaries.
    leftovers: Counter[str] = Counter()
    leaking: list[str] = []
    for key, session in redacted_session.items():
        found = Counter(f.family for text in _strings(session) for f in find_secrets(text))
        if found:
            leaking.append(key)
            leftovers += found
    return dg.AssetCheckResult(
        passed=not leftovers,
        severity=dg.AssetCheckSeverity.ERROR,
        # Families, counts and session ids only: the value, or any part of it, goes nowhere.
        metadata={"remaining_by_family": dict(leftovers), "sessions": leaking},
    )


_SESSION = TypeAdapter(Session)


def _strings(session: Session) -> Iterator[str]:
    yield from _walk(_SESSION.dump_python(session, mode="json"))


def _walk(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)
