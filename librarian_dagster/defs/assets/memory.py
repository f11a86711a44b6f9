import dagster as dg

from librarian_dagster.core.chunking import Chunk, ChunkVectors
from librarian_dagster.core.digest import DigestRecord
from librarian_dagster.core.models import memory_of
from librarian_dagster.core.store import ChunkRecord
from librarian_dagster.core.transcripts import Session
from librarian_dagster.defs.assets._common import GROUP
from librarian_dagster.defs.partitions import sessions_partitions
from librarian_dagster.defs.resources import StoreResource


@dg.asset(partitions_def=sessions_partitions, kinds={"postgres"}, group_name=GROUP)
def memory(
    context: dg.AssetExecutionContext,
    redacted_session: Session,
    session_digest: DigestRecord,
    digest_chunks: list[Chunk],
    exchange_chunks: list[Chunk],
    chunk_embeddings: ChunkVectors,
    store: StoreResource,
) -> dg.MaterializeResult:
    """The session's row in `memories` and its chunks in `indexed_chunks`, in one transaction."""
    session, digest = redacted_session, session_digest.digest
    chunks, vectors = [*digest_chunks, *exchange_chunks], chunk_embeddings.vectors
    if len(vectors) != len(chunks):
        raise dg.Failure(
            f"{len(chunks)} chunks but {len(vectors)} vectors for session "
            f"{context.partition_key}: re-materialize chunk_embeddings"
        )
    record = memory_of(session, session_digest, chunk_embeddings.model)
    store.get().replace_memory(
        record,
        [
            ChunkRecord(c.section, c.position, c.text, vector)
            for c, vector in zip(chunks, vectors, strict=True)
        ],
    )
    return dg.MaterializeResult(
        metadata={
            "session_id": context.partition_key,
            "project": session.project,
            "chunks": len(chunks),
            "digest_chunks": len(digest_chunks),
            "exchange_chunks": len(exchange_chunks),
            "summary": digest.summary,
            "embedding_model": chunk_embeddings.model,
            "digest_model": session_digest.model,
        }
    )
