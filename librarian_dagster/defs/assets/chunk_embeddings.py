import time

import dagster as dg

from librarian_dagster.core.chunking import Chunk, ChunkVectors
from librarian_dagster.core.gemini import ProviderError
from librarian_dagster.defs.assets._common import GROUP
from librarian_dagster.defs.assets.session_digest import DIGEST_RETRY
from librarian_dagster.defs.partitions import sessions_partitions
from librarian_dagster.defs.resources import EmbedderResource, StoreResource


@dg.asset(
    partitions_def=sessions_partitions,
    kinds={"python"},
    group_name=GROUP,
    # A remote embedder down for longer than its in-step backoff gets the digest's later tries.
    retry_policy=DIGEST_RETRY,
)
def chunk_embeddings(
    context: dg.AssetExecutionContext,
    digest_chunks: list[Chunk],
    exchange_chunks: list[Chunk],
    embedder: EmbedderResource,
    store: StoreResource,
) -> dg.Output[ChunkVectors]:
    """One vector per chunk of both layers (digest bullets, then exchanges), in that order.

    A chunk already stored for this session with the same text and model keeps its vector: an
    unchanged session costs no embedding call.
    """
    model = embedder.get()
    texts = [c.text for c in [*digest_chunks, *exchange_chunks]]
    known = store.get().stored_vectors(context.partition_key, model.model_name, model.dimension)
    missing = [t for t in dict.fromkeys(texts) if t not in known]
    started = time.perf_counter()
    try:
        fresh = dict(zip(missing, model.embed_documents(missing), strict=True))
    except ProviderError as exc:
        raise dg.Failure(description=f"no embeddings: {exc}", allow_retries=exc.transient) from None
    seconds = time.perf_counter() - started
    vectors = [known[t] if t in known else fresh[t] for t in texts]
    return dg.Output(
        ChunkVectors(model=model.model_name, dimension=model.dimension, vectors=vectors),
        metadata={
            "vectors": len(vectors),
            "embedded": len(missing),
            "reused": len(texts) - sum(t in fresh for t in texts),
            "model": model.model_name,
            "dimension": model.dimension,
            "seconds": round(seconds, 3),
        },
    )
