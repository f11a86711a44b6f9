import dagster as dg

from librarian_dagster.core.chunking import chunk_digest
from librarian_dagster.core.digest import Digest
from librarian_dagster.defs.assets._common import CHUNKS, DIGEST, GROUP, pass_skip_on
from librarian_dagster.defs.partitions import sessions_partitions
from librarian_dagster.defs.resources import StagingResource


@dg.asset(
    partitions_def=sessions_partitions,
    deps=["session_digest"],
    kinds={"python"},
    group_name=GROUP,
)
def digest_chunks(context: dg.AssetExecutionContext, staging: StagingResource):
    """The digest cut into searchable chunks: one bullet is one chunk, plus the summary."""
    stage = staging.get()
    key = context.partition_key
    staged = stage.read(DIGEST, key)
    if (skip := pass_skip_on(stage, CHUNKS, key, staged)) is not None:
        return skip
    chunks = chunk_digest(Digest.model_validate(staged["digest"]))
    stage.write(CHUNKS, key, {"chunks": [[c.section, c.position, c.text] for c in chunks]})
    by_section: dict[str, int] = {}
    for c in chunks:
        by_section[c.section] = by_section.get(c.section, 0) + 1
    return dg.MaterializeResult(
        metadata={
            "chunks": len(chunks),
            "chunks_by_section": by_section,
            "mean_chars": round(sum(len(c.text) for c in chunks) / max(1, len(chunks)), 1),
        }
    )
