import json
from collections import Counter
from collections.abc import Iterator

import dagster as dg

from librarian_dagster.core.redaction import find_secrets, redact_session
from librarian_dagster.core.staging import session_to_json
from librarian_dagster.core.transcripts import parse_session
from librarian_dagster.defs.assets._common import GROUP, REDACTED, source_files
from librarian_dagster.defs.partitions import sessions_partitions
from librarian_dagster.defs.resources import MirrorResource, StagingResource, StoreResource

NO_SECRETS_REMAIN = "no_secrets_remain"


@dg.asset(
    partitions_def=sessions_partitions,
    deps=["transcript"],
    kinds={"python"},
    group_name=GROUP,
    check_specs=[
        dg.AssetCheckSpec(
            NO_SECRETS_REMAIN,
            asset="redacted_session",
            blocking=True,
            description="The staged, redacted session scanned again finds no secret. Blocking: "
            "a session that fails never reaches the digest (and so never an LLM).",
        )
    ],
)
def redacted_session(
    context: dg.AssetExecutionContext,
    store: StoreResource,
    staging: StagingResource,
    mirror: MirrorResource,
):
    """The session with every secret replaced by [REDACTED:<family>]; the only form staged."""
    files = source_files(store.get(), context.partition_key)
    session = parse_session(files, include_thinking=mirror.include_thinking)
    clean, counts = redact_session(session)
    stage = staging.get()
    path = stage.write(REDACTED, context.partition_key, session_to_json(clean))

    # Scan what was actually written, not the object in memory: that is what later stages read.
    # Each string on its own, as the digest will read it: scanning the JSON text instead would
    # see escapes (`\\n`) that are not in the data and flag look-alikes across field boundaries.
    with path.open(encoding="utf-8") as staged:
        leftovers = Counter(
            f.family for text in _strings(json.load(staged)) for f in find_secrets(text)
        )
    return dg.MaterializeResult(
        metadata={
            "redactions": sum(counts.values()),
            "redactions_by_family": dict(sorted(counts.items())),
            "turns": len(clean.turns),
            "skip_reason": clean.skip_reason or "",
        },
        check_results=[
            dg.AssetCheckResult(
                check_name=NO_SECRETS_REMAIN,
                passed=not leftovers,
                severity=dg.AssetCheckSeverity.ERROR,
                # Families and counts only: the value, or any part of it, goes nowhere.
                metadata={"remaining_by_family": dict(leftovers)},
            )
        ],
    )


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
