import time

import dagster as dg

from librarian_dagster.defs.assets._common import CHUNKS, EMBEDDINGS, GROUP, pass_skip_on
from librarian_dagster.defs.partitions import sessions_partitions
from librarian_dagster.defs.resources import EmbedderResource, StagingResource


@dg.asset(
    partitions_def=sessions_partitions,
    deps=["digest_chunks"],
    kinds={"python"},
    group_name=GROUP,
)
def chunk_embeddings(
    context: dg.AssetExecutionContext, staging: StagingResource, embedder: EmbedderResource
):
    """One vector per chunk, from the configured embedding model."""
    stage = staging.get()
    key = context.partition_key
    staged = stage.read(CHUNKS, key)
    if (skip := pass_skip_on(stage, EMBEDDINGS, key, staged)) is not None:
        return skip
    model = embedder.get()
    started = time.perf_counter()
    vectors = model.embed_documents([text for _section, _position, text in staged["chunks"]])
    seconds = time.perf_counter() - started
    stage.write(
        EMBEDDINGS,
        key,
        {"model": model.model_name, "dimension": model.dimension, "vectors": vectors},
    )
    return dg.MaterializeResult(
        metadata={
            "vectors": len(vectors),
            "model": model.model_name,
            "dimension": model.dimension,
            "seconds": round(seconds, 3),
        }
    )
