from collections.abc import Iterator

import dagster as dg

from librarian_dagster.core.capture.session import Session
from librarian_dagster.core.digest.chunking import Chunk, chunk_exchanges
from librarian_dagster.defs.assets._common import GROUP, chunk_sessions
from librarian_dagster.defs.partitions import BATCH, sessions_partitions


@dg.asset(
    partitions_def=sessions_partitions,
    kinds={"python"},
    group_name=GROUP,
    output_required=False,
    backfill_policy=BATCH,
)
def exchange_chunks(
    context: dg.AssetExecutionContext, redacted_session: dict[str, Session]
) -> Iterator[dg.Output[dict[str, list[Chunk]]]]:
    """The redacted exchanges themselves, in windows: what the digest did not distil, searchable."""
    yield from chunk_sessions(context, redacted_session, chunk_exchanges)
