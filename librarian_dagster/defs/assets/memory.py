import dagster as dg

from librarian_dagster.core.digest import Digest, render_digest
from librarian_dagster.core.store import ChunkRecord, MemoryRecord
from librarian_dagster.defs.assets._common import (
    CHUNKS,
    DIGEST,
    EMBEDDINGS,
    GROUP,
    pass_skip_on,
    staged_session,
)
from librarian_dagster.defs.partitions import sessions_partitions
from librarian_dagster.defs.resources import StagingResource, StoreResource


@dg.asset(
    partitions_def=sessions_partitions,
    deps=["chunk_embeddings"],
    kinds={"postgres"},
    group_name=GROUP,
)
def memory(context: dg.AssetExecutionContext, store: StoreResource, staging: StagingResource):
    """The session's row in `memories` and its chunks in `indexed_chunks`, in one transaction."""
    stage = staging.get()
    key = context.partition_key
    embedded = stage.read(EMBEDDINGS, key)
    if (skip := pass_skip_on(stage, None, key, embedded)) is not None:
        return skip
    session = staged_session(stage, key)
    staged_digest = stage.read(DIGEST, key)
    chunks = stage.read(CHUNKS, key)["chunks"]
    vectors = embedded["vectors"]
    if len(vectors) != len(chunks):
        raise dg.Failure(
            f"{len(chunks)} chunks but {len(vectors)} vectors for session {key}: "
            "re-materialize chunk_embeddings"
        )
    digest = Digest.model_validate(staged_digest["digest"])
    record = MemoryRecord(
        session_id=key,
        project=session.project,
        cwd=session.cwd,
        git_branch=session.git_branch,
        started_at=session.started_at,
        ended_at=session.ended_at,
        title=session.title,
        digest=digest.model_dump(),
        digest_text=render_digest(digest, session.title),
        summary=digest.summary,
        domain=digest.domain,
        tags=digest.tags,
        importance=digest.importance,
        content_hash=staged_digest["content_hash"],
        digest_version=staged_digest["digest_version"],
        digest_model=staged_digest["model"],
        embedding_model=embedded["model"],
        session_input_tokens=session.input_tokens,
        session_output_tokens=session.output_tokens,
        digest_input_tokens=staged_digest["input_tokens"],
        digest_output_tokens=staged_digest["output_tokens"],
        turns=len(session.turns),
    )
    store.get().replace_memory(
        record,
        [
            ChunkRecord(section, position, text, vector)
            for (section, position, text), vector in zip(chunks, vectors, strict=True)
        ],
    )
    return dg.MaterializeResult(
        metadata={
            "session_id": key,
            "project": session.project,
            "chunks": len(chunks),
            "summary": digest.summary,
            "embedding_model": embedded["model"],
            "digest_model": staged_digest["model"],
        }
    )
