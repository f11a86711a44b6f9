import dagster as dg

from librarian_dagster.core.chunking import Chunk, ChunkVectors
from librarian_dagster.core.digest import DigestRecord, render_digest
from librarian_dagster.core.store import ChunkRecord, MemoryRecord
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
    record = MemoryRecord(
        session_id=context.partition_key,
        project=session.project,
        cwd=session.cwd,
        git_branch=session.git_branch,
        started_at=session.started_at,
        ended_at=session.ended_at,
        title=session.title,
        digest=digest,
        digest_text=render_digest(digest, session.title),
        summary=digest.summary,
        domain=digest.domain,
        tags=digest.tags,
        importance=digest.importance,
        content_hash=session_digest.content_hash,
        digest_version=session_digest.digest_version,
        digest_model=session_digest.model,
        embedding_model=chunk_embeddings.model,
        session_input_tokens=session.input_tokens,
        session_output_tokens=session.output_tokens,
        digest_input_tokens=session_digest.input_tokens,
        digest_output_tokens=session_digest.output_tokens,
        turns=len(session.turns),
    )
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
