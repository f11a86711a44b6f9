import time
from collections.abc import Iterator

import dagster as dg

from librarian_dagster.core.digest.chunking import Chunk, ChunkVectors
from librarian_dagster.core.models.calls import ProviderError
from librarian_dagster.defs.assets._common import GROUP, common_keys, per_session
from librarian_dagster.defs.assets.session_digest import DIGEST_RETRY
from librarian_dagster.defs.partitions import BATCH, session_id_of, sessions_partitions
from librarian_dagster.defs.resources import EmbedderResource, MemoriesResource


@dg.asset(
    partitions_def=sessions_partitions,
    kinds={"python"},
    group_name=GROUP,
    output_required=False,
    # A remote embedder down for longer than its in-step backoff gets the digest's later tries.
    retry_policy=DIGEST_RETRY,
    backfill_policy=BATCH,
)
def chunk_embeddings(
    context: dg.AssetExecutionContext,
    digest_chunks: dict[str, list[Chunk]],
    exchange_chunks: dict[str, list[Chunk]],
    embedder: EmbedderResource,
    memories: MemoriesResource,
) -> Iterator[dg.Output[dict[str, ChunkVectors]]]:
    """One vector per chunk of both layers (digest bullets, then exchanges), in that order.

    A chunk already stored for this session with the same text and model keeps its vector: an
    unchanged session costs no embedding call.
    """
    model = embedder.get()
    db = memories.get()

    def embed(key: str, _: str):
        texts = [c.text for c in [*digest_chunks[key], *exchange_chunks[key]]]
        known = db.stored_vectors(session_id_of(key), model.model_name, model.dimension)
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        started = time.perf_counter()
        try:
            fresh = dict(zip(missing, model.embed_documents(missing), strict=True))
        except ProviderError as exc:
            raise dg.Failure(
                description=f"no embeddings: {exc}", allow_retries=exc.transient
            ) from None
        seconds = time.perf_counter() - started
        vectors = [known[t] if t in known else fresh[t] for t in texts]
        return ChunkVectors(model=model.model_name, dimension=model.dimension, vectors=vectors), {
            "vectors": len(vectors),
            "embedded": len(missing),
            "reused": len(texts) - sum(t in fresh for t in texts),
            "model": model.model_name,
            "dimension": model.dimension,
            "seconds": round(seconds, 3),
        }

    keys = common_keys(digest_chunks, exchange_chunks)
    vectors = per_session(context, {k: k for k in keys}, embed)
    if vectors:
        yield dg.Output(vectors)
