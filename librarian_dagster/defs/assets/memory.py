from collections.abc import Iterator
from typing import Any

import dagster as dg

from librarian_dagster.core.capture.session import Session
from librarian_dagster.core.capture.skips import last_active
from librarian_dagster.core.capture.touches import file_touches
from librarian_dagster.core.digest.chunking import Chunk, ChunkVectors
from librarian_dagster.core.digest.schema import DigestRecord
from librarian_dagster.core.service.journal import remembered_text
from librarian_dagster.core.store.ledger import Ledger
from librarian_dagster.core.store.memories import ChunkRecord
from librarian_dagster.core.store.rows import MemoryRecord, memory_of
from librarian_dagster.defs.assets._common import GROUP, common_keys, per_session, source_files
from librarian_dagster.defs.partitions import BATCH, session_id_of, sessions_partitions
from librarian_dagster.defs.resources import JournalResource, LedgerResource, MemoriesResource


@dg.asset(
    partitions_def=sessions_partitions, kinds={"postgres"}, group_name=GROUP, backfill_policy=BATCH
)
def memory(
    context: dg.AssetExecutionContext,
    redacted_session: dict[str, Session],
    session_digest: dict[str, DigestRecord],
    digest_chunks: dict[str, list[Chunk]],
    exchange_chunks: dict[str, list[Chunk]],
    chunk_embeddings: dict[str, ChunkVectors],
    memories: MemoriesResource,
    ledger: LedgerResource,
    journal: JournalResource,
) -> Iterator[dg.MaterializeResult]:
    """The session's row in `memories` and its chunks in `indexed_chunks`, in one transaction."""
    db = memories.get()
    inputs = (redacted_session, session_digest, digest_chunks, exchange_chunks, chunk_embeddings)

    def write(key: str, _: str):
        session, digested = redacted_session[key], session_digest[key]
        chunks = [*digest_chunks[key], *exchange_chunks[key]]
        embedded = chunk_embeddings[key]
        if len(embedded.vectors) != len(chunks):
            raise dg.Failure(
                f"{len(chunks)} chunks but {len(embedded.vectors)} vectors for session "
                f"{key}: re-materialize chunk_embeddings"
            )
        record = memory_of(session, digested, embedded.model)
        db.replace_memory(
            record,
            [
                ChunkRecord(c.section, c.position, c.text, vector)
                for c, vector in zip(chunks, embedded.vectors, strict=True)
            ],
            file_touches(session),
        )
        metadata = _metadata(session, digested, record, len(digest_chunks[key]), len(chunks))
        who = record.agent
        if record.person and record.person != journal.person:
            who = f"{record.person}'s {record.agent}"
        said = remembered_text(
            record.project, who, record.title or digested.digest.summary, len(chunks)
        )
        journal.note("remembered", said)
        return metadata, metadata

    written = per_session(context, {k: k for k in common_keys(*inputs)}, write)
    if written:
        _keep_postings(context, memories)
    # Redacted but not digested, and in the deferral table: waiting for tomorrow's budget.
    waiting = {k for k in redacted_session if k not in session_digest}
    lost = _lost(context, ledger.get(), set(written), waiting)
    for key in lost:
        context.add_asset_metadata({"lost": True}, partition_key=key)
    # Recorded first, each session with its own metadata; a failed step would record none.
    yield dg.MaterializeResult()
    if lost:
        # Then the run fails, so the loss is seen (and alerted on).
        raise dg.Failure(
            f"{len(lost)} of {len(context.partition_keys)} session(s) not stored "
            f"(see each stage's `error` metadata): {', '.join(lost)}; "
            f"the other {len(written)} are",
        )


def _keep_postings(context: dg.AssetExecutionContext, memories: MemoriesResource) -> None:
    """The BM25 postings files brought up to what the run wrote (core/recall/lexical.py): the
    recall server and any search started after a backfill map them instead of loading every
    posting from the store. A cache: when it cannot be kept, the next reader loads the rest."""
    try:
        memories.store.opened().search.keep_postings()
    except Exception as exc:  # the memories are written: a cache must not fail the run
        context.log.warning(f"BM25 postings not kept: {exc}")


def _metadata(
    session: Session, digested: DigestRecord, record: MemoryRecord, bullets: int, chunks: int
) -> dict[str, Any]:
    return {
        "session_id": session.session_id,
        "project": session.project,
        "chunks": chunks,
        "digest_chunks": bullets,
        "exchange_chunks": chunks - bullets,
        "summary": digested.digest.summary,
        # The memory readable in the UI, as get_digest returns it (`librarian forget`
        # deletes the runs that hold it).
        "digest": dg.MetadataValue.md(record.digest_text),
        "files_changed": len(record.files),
        "embedding_model": record.embedding_model,
        "digest_model": digested.model,
    }


def _lost(
    context: dg.AssetExecutionContext, db: Ledger, written: set[str], waiting: set[str]
) -> list[str]:
    """Sessions of the run that are neither stored now, nor hold nothing to remember, nor wait
    for a later day's token budget (deferred: the sensor asks again, nothing is lost)."""
    missing = [k for k in context.partition_keys if k not in written]
    if not missing:
        return []
    ids = [session_id_of(k) for k in missing]
    nothing = db.nothing_to_remember(ids)
    deferred = db.deferred([session_id_of(k) for k in missing if k in waiting])
    skips = db.skip_list()
    lost = []
    for key in missing:
        sid = session_id_of(key)
        if sid in deferred:
            continue
        try:
            files = source_files(db, key)
        except dg.Failure:
            lost.append(key)
            continue
        # Nothing to remember at these files, or kept out on purpose (`librarian skip`).
        held = nothing.get(sid) == files.fingerprint()
        if not held and skips.reason(sid, last_active(files)) is None:
            lost.append(key)
    return lost
