import time

import dagster as dg

from librarian_dagster.core.chunking import Chunk, ChunkVectors
from librarian_dagster.defs.assets._common import GROUP
from librarian_dagster.defs.partitions import sessions_partitions
from librarian_dagster.defs.resources import EmbedderResource


@dg.asset(partitions_def=sessions_partitions, kinds={"python"}, group_name=GROUP)
def chunk_embeddings(
    digest_chunks: list[Chunk], exchange_chunks: list[Chunk], embedder: EmbedderResource
) -> dg.Output[ChunkVectors]:
    """One vector per chunk of both layers (digest bullets, then exchanges), in that order."""
    model = embedder.get()
    started = time.perf_counter()
    vectors = model.embed_documents([c.text for c in [*digest_chunks, *exchange_chunks]])
    seconds = time.perf_counter() - started
    return dg.Output(
        ChunkVectors(model=model.model_name, dimension=model.dimension, vectors=vectors),
        metadata={
            "vectors": len(vectors),
            "model": model.model_name,
            "dimension": model.dimension,
            "seconds": round(seconds, 3),
        },
    )
