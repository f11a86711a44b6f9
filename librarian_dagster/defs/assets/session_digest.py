from collections.abc import Iterator
from datetime import UTC, datetime

import dagster as dg

from librarian_dagster.core.capture.session import Session
from librarian_dagster.core.digest.policy import Deferred, Digested, DigestFailed, DigestPolicy
from librarian_dagster.core.digest.schema import SECTIONS, DigestRecord
from librarian_dagster.defs.assets._common import GROUP, per_session, retried
from librarian_dagster.defs.partitions import BATCH, session_id_of, sessions_partitions
from librarian_dagster.defs.resources import DigesterResource, LedgerResource, MemoriesResource


@dg.asset(
    partitions_def=sessions_partitions,
    kinds={"python"},
    group_name=GROUP,
    # Every LLM call of the code location shares this pool: its limit (dagster.yaml
    # `concurrency: pools: default_limit`, or the UI) caps parallel calls.
    pool="llm",
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
    and the sessions sensor asks again then.
    """
    policy = DigestPolicy(
        digester.get(),
        memories.get(),
        ledger.get(),
        digester.daily_token_budget if digester.provider != "offline" else None,
    )

    def digest_one(key: str, session: Session):
        try:
            outcome = policy.digest(session_id_of(key), session)
        except DigestFailed as exc:
            # Nothing is handed on: no later stage runs, the stored memory (if any) stays.
            raise dg.Failure(
                description=str(exc),
                metadata={"model": exc.model, "calls": exc.calls},
                allow_retries=exc.transient,
            ) from None
        if isinstance(outcome, Deferred):
            _say_deferred(context, key, outcome)
            return None
        return outcome.record, _metadata(outcome)

    # A model service still failing after the in-step backoff (LIBRARIAN_LLM_ATTEMPTS tries, which
    # honour Retry-After) gets the step run again (`retried`). In a run of many sessions, one
    # session's failure drops only that session (`per_session`); the step is run again only when
    # every session of it failed and another try could help.
    records = retried(
        context,
        digester.step_retry_seconds,
        lambda: per_session(context, redacted_session, digest_one),
    )
    if records:
        yield dg.Output(records)


def _metadata(outcome: Digested) -> dict[str, object]:
    record = outcome.record
    digest = record.digest
    return {
        "summary": digest.summary,
        "domain": digest.domain,
        "tags": ", ".join(digest.tags),
        "importance": digest.importance,
        "bullets": sum(len(getattr(digest, key)) for key, _heading in SECTIONS),
        "model": record.model,
        "input_tokens": record.input_tokens,
        "output_tokens": record.output_tokens,
        "calls": outcome.calls,
        "method": outcome.method,
        "reused": outcome.reused,
    }


def _say_deferred(context: dg.AssetExecutionContext, key: str, deferred: Deferred) -> None:
    spent, budget = deferred.spent, deferred.budget
    message = (
        f"deferred to tomorrow (UTC): the daily token budget is spent ({spent:,} of "
        f"{budget:,} tokens on {datetime.now(UTC).date().isoformat()}, "
        "LIBRARIAN_DAILY_TOKEN_BUDGET); the sessions sensor digests it then"
    )
    context.log.warning(f"session {key}: {message}")
    context.log_event(
        dg.AssetObservation(
            asset_key=context.asset_key,
            partition=key,
            metadata={"deferred": message, "tokens_today": spent, "budget": budget},
        )
    )
