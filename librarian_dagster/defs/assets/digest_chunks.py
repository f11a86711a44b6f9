from collections import Counter

import dagster as dg

from librarian_dagster.core.chunking import Chunk, chunk_digest
from librarian_dagster.core.digest import DigestRecord
from librarian_dagster.defs.assets._common import GROUP, chunk_counts
from librarian_dagster.defs.partitions import sessions_partitions


@dg.asset(partitions_def=sessions_partitions, kinds={"python"}, group_name=GROUP)
def digest_chunks(session_digest: DigestRecord) -> dg.Output[list[Chunk]]:
    """The digest cut into searchable chunks: one bullet is one chunk, plus the summary."""
    chunks = chunk_digest(session_digest.digest)
    return dg.Output(
        chunks,
        metadata={
            **chunk_counts(chunks),
            "chunks_by_section": dict(Counter(c.section for c in chunks)),
        },
    )
