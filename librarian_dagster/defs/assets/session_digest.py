from collections.abc import Iterator

import dagster as dg

from librarian_dagster.core.digest import SECTIONS, DigestRecord, content_hash
from librarian_dagster.core.transcripts import Session
from librarian_dagster.defs.assets._common import GROUP, per_session
from librarian_dagster.defs.partitions import BATCH, sessions_partitions
from librarian_dagster.defs.resources import DigesterResource, StoreResource


@dg.asset(
    partitions_def=sessions_partitions,
    kinds={"python"},
    group_name=GROUP,
    output_required=False,
    backfill_policy=BATCH,
)
def session_digest(
    context: dg.AssetExecutionContext,
    redacted_session: dict[str, Session],
    digester: DigesterResource,
    store: StoreResource,
) -> Iterator[dg.Output[dict[str, DigestRecord]]]:
    """What the session was about: worked on / problem / solution / open, tags, domain, summary."""
    writer = digester.get()
    db = store.get()

    def digest_one(_key: str, session: Session):
        fingerprint = content_hash(session)
        stored = db.memory_record(session.session_id)
        if (
            stored is not None
            and stored.content_hash == fingerprint
            and stored.digest_model == writer.model_name
        ):
            # Same input, same writer: the remembered digest stands, no second LLM call to pay.
            record = stored.digest_record()
            reused = True
        else:
            result = writer.digest(session)
            record = DigestRecord(
                digest=result.digest,
                model=result.model,
                input_tokens=result.input_tokens,
                output_tokens=result.output_tokens,
                content_hash=fingerprint,
            )
            reused = False
        digest = record.digest
        return record, {
            "summary": digest.summary,
            "domain": digest.domain,
            "tags": ", ".join(digest.tags),
            "importance": digest.importance,
            "bullets": sum(len(getattr(digest, key)) for key, _heading in SECTIONS),
            "model": record.model,
            "input_tokens": record.input_tokens,
            "output_tokens": record.output_tokens,
            "reused": reused,
        }

    records = per_session(context, redacted_session, digest_one)
    if records:
        yield dg.Output(records)
