import time
from collections.abc import Iterator

import dagster as dg

from librarian_dagster.core.chunking import Chunk, ChunkVectors
from librarian_dagster.defs.assets._common import GROUP, common_keys, per_session
from librarian_dagster.defs.partitions import BATCH, sessions_partitions
from librarian_dagster.defs.resources import EmbedderResource


@dg.asset(
    partitions_def=sessions_partitions,
    kinds={"python"},
    group_name=GROUP,
    output_required=False,
    backfill_policy=BATCH,
)
def chunk_embeddings(
    context: dg.AssetExecutionContext,
    digest_chunks: dict[str, list[Chunk]],
    exchange_chunks: dict[str, list[Chunk]],
    embedder: EmbedderResource,
) -> Iterator[dg.Output[dict[str, ChunkVectors]]]:
    """One vector per chunk of both layers (digest bullets, then exchanges), in that order."""
    model = embedder.get()

    def embed(key: str, _: str):
        started = time.perf_counter()
        texts = [c.text for c in [*digest_chunks[key], *exchange_chunks[key]]]
        vectors = model.embed_documents(texts)
        seconds = time.perf_counter() - started
        return ChunkVectors(model=model.model_name, dimension=model.dimension, vectors=vectors), {
            "vectors": len(vectors),
            "model": model.model_name,
            "dimension": model.dimension,
            "seconds": round(seconds, 3),
        }

    keys = common_keys(digest_chunks, exchange_chunks)
    vectors = per_session(context, {k: k for k in keys}, embed)
    if vectors:
        yield dg.Output(vectors)
