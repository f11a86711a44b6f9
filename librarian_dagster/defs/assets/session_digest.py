from collections.abc import Iterator
from datetime import UTC, datetime

import dagster as dg

from librarian_dagster.core.capture.transcripts import Session
from librarian_dagster.core.digest.schema import SECTIONS, DigestRecord, content_hash
from librarian_dagster.core.digest.tags import normalize_tags
from librarian_dagster.core.models.calls import ProviderError
from librarian_dagster.core.store.ledger import Ledger
from librarian_dagster.defs.assets._common import GROUP, per_session
from librarian_dagster.defs.partitions import BATCH, session_id_of, sessions_partitions
from librarian_dagster.defs.resources import DigesterResource, LedgerResource, MemoriesResource

# A model service still failing after the in-step backoff (LIBRARIAN_LLM_ATTEMPTS tries, which
# honour Retry-After) gets the step run twice more, about 10 and 20 s later. Failures another try
# cannot fix (a reply that is no digest, a bad key) are raised with allow_retries=False and fail
# at once. An outage longer than that fails the run; the sensor or a backfill runs it again.
# In a run of many sessions, one session's failure drops only that session (`per_session`); the
# step is retried only when every session of it failed and another try could help.
DIGEST_RETRY = dg.RetryPolicy(
    max_retries=2, delay=10, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS
)

# How many of the store's most used tags the LLM is offered.
KNOWN_TAGS = 30


@dg.asset(
    partitions_def=sessions_partitions,
    kinds={"python"},
    group_name=GROUP,
    # Every LLM call of the code location shares this pool: its limit (dagster.yaml
    # `concurrency: pools: default_limit`, or the UI) caps parallel calls.
    pool="llm",
    retry_policy=DIGEST_RETRY,
    # Nothing is handed on for a session whose digest waits for the next day's token budget, or
    # for a session that failed (the others of its run go on).
    output_required=False,
    backfill_policy=BATCH,
)
def session_digest(
    context: dg.AssetExecutionContext,
    redacted_session: dict[str, Session],
    digester: DigesterResource,
    memories: MemoriesResource,
    ledger: LedgerResource,
) -> Iterator[dg.Output[dict[str, DigestRecord]]]:
    """What the session was about: worked on / problem / solution / open, tags, domain, summary.

    Keyed by (redacted content hash, prompt version, model): an unchanged session costs no call.
    Once the day's token budget (LIBRARIAN_DAILY_TOKEN_BUDGET) is spent, a digest that would
    call a model waits for the next day (UTC) instead: nothing is handed on, nothing is spent,
    and the mirror sensor asks again then.
    """
    writer = digester.get()
    held, db = memories.get(), ledger.get()
    budget = digester.daily_token_budget if digester.provider != "offline" else None

    def digest_one(key: str, session: Session):
        session_id = session_id_of(key)
        fingerprint = content_hash(session)
        stored = held.memory_record(session_id)
        method, calls = "reused", 0
        if (
            stored is not None
            and stored.content_hash == fingerprint
            and stored.digest_model == writer.model_name
        ):
            # Same input, same writer (prompt version included): the remembered digest stands,
            # no second LLM call to pay for.
            record = stored.digest_record()
            reused = True
        else:
            # Asked per session: the sessions before it in this run have spent their share.
            spent = db.tokens_spent_today() if budget else 0
            if budget and spent >= budget:
                _defer(context, db, key, spent, budget)
                return None
            try:
                result = writer.digest(session, known_tags=held.top_tags(KNOWN_TAGS))
            except ProviderError as exc:
                if exc.calls:
                    db.record_usage(
                        writer.model_name, exc.input_tokens, exc.output_tokens, exc.calls
                    )
                # Nothing is handed on: no later stage runs, the stored memory (if any) stays.
                raise dg.Failure(
                    description=f"no digest for session {session_id}: {exc}",
                    metadata={"model": writer.model_name, "calls": exc.calls},
                    allow_retries=exc.transient,
                ) from None
            if result.calls:
                db.record_usage(
                    writer.model_name, result.input_tokens, result.output_tokens, result.calls
                )
            # One spelling per tag on the write path, whoever wrote the digest.
            digest = result.digest.model_copy(update={"tags": normalize_tags(result.digest.tags)})
            record = DigestRecord(
                digest=digest,
                model=result.model,
                input_tokens=result.input_tokens,
                output_tokens=result.output_tokens,
                content_hash=fingerprint,
            )
            reused, method, calls = False, result.method, result.calls
            db.clear_deferral(session_id)
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
            "calls": calls,
            "method": method,
            "reused": reused,
        }

    records = per_session(context, redacted_session, digest_one)
    if records:
        yield dg.Output(records)


def _defer(
    context: dg.AssetExecutionContext, db: Ledger, key: str, spent: int, budget: int
) -> None:
    db.defer_digest(session_id_of(key))
    message = (
        f"deferred to tomorrow (UTC): the daily token budget is spent ({spent:,} of "
        f"{budget:,} tokens on {datetime.now(UTC).date().isoformat()}, "
        "LIBRARIAN_DAILY_TOKEN_BUDGET); the mirror sensor digests it then"
    )
    context.log.warning(f"session {key}: {message}")
    context.log_event(
        dg.AssetObservation(
            asset_key=context.asset_key,
            partition=key,
            metadata={"deferred": message, "tokens_today": spent, "budget": budget},
        )
    )
