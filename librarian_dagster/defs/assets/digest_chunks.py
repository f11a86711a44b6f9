from collections import Counter
from collections.abc import Iterator

import dagster as dg

from librarian_dagster.core.digest.chunking import Chunk, chunk_digest
from librarian_dagster.core.digest.schema import DigestRecord
from librarian_dagster.defs.assets._common import GROUP, chunk_sessions
from librarian_dagster.defs.partitions import BATCH, sessions_partitions


@dg.asset(
    partitions_def=sessions_partitions,
    kinds={"python"},
    group_name=GROUP,
    output_required=False,
    backfill_policy=BATCH,
)
def digest_chunks(
    context: dg.AssetExecutionContext, session_digest: dict[str, DigestRecord]
) -> Iterator[dg.Output[dict[str, list[Chunk]]]]:
    """The digest cut into searchable chunks: one bullet is one chunk, plus the summary."""
    yield from chunk_sessions(
        context,
        session_digest,
        lambda record: chunk_digest(record.digest),
        lambda chunks: {"chunks_by_section": dict(Counter(c.section for c in chunks))},
    )
