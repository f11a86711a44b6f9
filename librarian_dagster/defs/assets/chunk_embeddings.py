import time
from collections.abc import Iterator

import dagster as dg

from librarian_dagster.core.digest.chunking import Chunk, ChunkVectors
from librarian_dagster.core.models.calls import ProviderError
from librarian_dagster.core.models.embeddings import Embedder
from librarian_dagster.defs.assets._common import GROUP, common_keys, per_session, retried
from librarian_dagster.defs.partitions import BATCH, session_id_of, sessions_partitions
from librarian_dagster.defs.resources import EmbedderResource, MemoriesResource


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
    memories: MemoriesResource,
) -> Iterator[dg.Output[dict[str, ChunkVectors]]]:
    """One vector per chunk of both layers (digest bullets, then exchanges), in that order.

    A chunk already stored for this session with the same text and model keeps its vector: an
    unchanged session costs no embedding call. The new texts of all the run's sessions are
    embedded in one call: the encoder's batches are then full of texts of like length from every
    session, where a session at a time left them short (a backfill's embedding came to half the
    encoder's pace). Should that call fail, each session is embedded on its own, so a session's
    failure stays its own.
    """
    model = embedder.get()
    db = memories.get()
    keys = common_keys(digest_chunks, exchange_chunks)
    texts = {k: [c.text for c in [*digest_chunks[k], *exchange_chunks[k]]] for k in keys}
    known = {
        k: db.stored_vectors(session_id_of(k), model.model_name, model.dimension) for k in keys
    }
    new = list(dict.fromkeys(t for k in keys for t in texts[k] if t not in known[k]))
    together, together_seconds = _together(context, model, new) if len(keys) > 1 else ({}, 0.0)

    def embed(key: str, _: str):
        missing = [t for t in dict.fromkeys(texts[key]) if t not in known[key]]
        alone = [t for t in missing if t not in together]
        started = time.perf_counter()
        try:
            fresh = dict(zip(alone, model.embed_documents(alone), strict=True)) if alone else {}
        except ProviderError as exc:
            raise dg.Failure(
                description=f"no embeddings: {exc}", allow_retries=exc.transient
            ) from None
        # Its own call's time, and its share of the run's call.
        seconds = time.perf_counter() - started
        seconds += together_seconds * (len(missing) - len(alone)) / max(len(new), 1)
        fresh |= {t: together[t] for t in missing if t in together}
        vectors = [known[key][t] if t in known[key] else fresh[t] for t in texts[key]]
        return ChunkVectors(model=model.model_name, dimension=model.dimension, vectors=vectors), {
            "vectors": len(vectors),
            "embedded": len(missing),
            "reused": len(texts[key]) - sum(t in fresh for t in texts[key]),
            "model": model.model_name,
            "dimension": model.dimension,
            "seconds": round(seconds, 3),
        }

    # A remote embedder down for longer than its in-step backoff gets the step run again.
    vectors = retried(
        context,
        embedder.step_retry_seconds,
        lambda: per_session(context, {k: k for k in keys}, embed),
    )
    if vectors:
        yield dg.Output(vectors)


def _together(
    context: dg.AssetExecutionContext, model: Embedder, new: list[str]
) -> tuple[dict[str, list[float]], float]:
    """The run's new texts embedded in one call, and its seconds; nothing when it fails (each
    session is then embedded on its own)."""
    if not new:
        return {}, 0.0
    started = time.perf_counter()
    try:
        together = dict(zip(new, model.embed_documents(new), strict=True))
    except ProviderError as exc:
        context.log.warning(f"embedding the run's sessions together failed ({exc}): one by one")
        together = {}
    return together, time.perf_counter() - started
