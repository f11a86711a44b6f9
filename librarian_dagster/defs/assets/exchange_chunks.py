import dagster as dg

from librarian_dagster.core.chunking import Chunk, chunk_exchanges
from librarian_dagster.core.transcripts import Session
from librarian_dagster.defs.assets._common import GROUP, chunk_counts
from librarian_dagster.defs.partitions import sessions_partitions


@dg.asset(partitions_def=sessions_partitions, kinds={"python"}, group_name=GROUP)
def exchange_chunks(redacted_session: Session) -> dg.Output[list[Chunk]]:
    """The redacted exchanges themselves, in windows: what the digest did not distil, searchable."""
    chunks = chunk_exchanges(redacted_session)
    return dg.Output(
        chunks,
        metadata=chunk_counts(chunks),
    )
