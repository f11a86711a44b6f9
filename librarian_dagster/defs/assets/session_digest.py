import dagster as dg

from librarian_dagster.core.digest import DIGEST_VERSION, content_hash
from librarian_dagster.core.staging import StagingError
from librarian_dagster.defs.assets._common import DIGEST, GROUP, stage_skip, staged_session
from librarian_dagster.defs.partitions import sessions_partitions
from librarian_dagster.defs.resources import DigesterResource, StagingResource


@dg.asset(
    partitions_def=sessions_partitions,
    deps=["redacted_session"],
    kinds={"python"},
    group_name=GROUP,
)
def session_digest(
    context: dg.AssetExecutionContext, staging: StagingResource, digester: DigesterResource
):
    """What the session was about: worked on / problem / solution / open, tags, domain, summary."""
    stage = staging.get()
    key = context.partition_key
    session = staged_session(stage, key)
    if session.skip_reason:
        return stage_skip(stage, DIGEST, key, session.skip_reason)

    fingerprint = content_hash(session)
    writer = digester.get()
    try:
        previous = stage.read(DIGEST, key)
    except StagingError:
        previous = None
    if (
        previous
        and previous.get("content_hash") == fingerprint
        and previous.get("model") == writer.model_name
    ):
        # Same input, same writer: reuse the digest instead of paying for another LLM call.
        staged = previous
        reused = True
    else:
        result = writer.digest(session)
        staged = {
            "digest": result.digest.model_dump(),
            "model": result.model,
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
            "content_hash": fingerprint,
            "digest_version": DIGEST_VERSION,
        }
        stage.write(DIGEST, key, staged)
        reused = False
    digest = staged["digest"]
    return dg.MaterializeResult(
        metadata={
            "summary": digest["summary"],
            "domain": digest["domain"],
            "tags": ", ".join(digest["tags"]),
            "importance": digest["importance"],
            "bullets": sum(
                len(digest[k]) for k in ("worked_on", "problem", "solution", "open_items")
            ),
            "model": staged["model"],
            "input_tokens": staged["input_tokens"],
            "output_tokens": staged["output_tokens"],
            "reused": reused,
        }
    )
