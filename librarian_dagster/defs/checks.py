"""Asset checks on what a session run stored, visible per session in the UI.

One step for all of them (a multi-asset check): each step of a run costs Dagster's bookkeeping,
and these are a few milliseconds of reading. They run after `memory` in every `ingest_session`
run and never block it (the write is whole or not at all already); a failure is red in the UI.
The leak check, which must block, stays beside `redacted_session`.
"""

import warnings
from collections.abc import Iterator
from datetime import timedelta

import dagster as dg
from pydantic import ValidationError

from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.digest.schema import DIGEST_VERSION, SECTIONS, DigestRecord
from librarian_dagster.core.store.integrity import session_integrity
from librarian_dagster.defs.partitions import session_id_of, sessions_partitions
from librarian_dagster.defs.resources import EmbedderResource, MemoriesResource, StoreResource
from librarian_dagster.defs.staging import StagingIOManager

MEMORY = dg.AssetKey("memory")
DIGEST_SCHEMA = "digest_matches_schema"
CHUNK_COUNT = "chunk_count_in_bounds"
EMBEDDING_DIMENSION = "embedding_dimension_matches_index"
NO_ORPHANS = "no_orphan_chunks"
ONE_MEMORY = "one_memory_per_session"

# The usual range, measured on the 199 sessions of the dev corpus (offline digester): digest
# chunks (summary + bullets) 3 to 35, median 13; exchange windows 1 to 149, median 14. Outside
# these bounds a session is not wrong, but worth a look: a warning.
DIGEST_CHUNKS = (2, 40)
EXCHANGE_CHUNKS = (1, 250)


def _spec(name: str, asset: str, description: str) -> dg.AssetCheckSpec:
    # Partitioned check specs are "preview": said once here, not on every `librarian ingest`'s
    # stderr, where a failure must be the one line a user reads.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.AssetCheckSpec(
            name, asset=asset, partitions_def=sessions_partitions, description=description
        )


_SPECS = [
    _spec(
        DIGEST_SCHEMA,
        "session_digest",
        "The staged digest, read back from its file, is valid against the Digest schema "
        "(fields, types, domain, importance 1-5), of the current version, with a summary.",
    ),
    _spec(
        CHUNK_COUNT,
        "memory",
        f"Digest chunks between {DIGEST_CHUNKS[0]} and {DIGEST_CHUNKS[1]}, exchange windows "
        f"between {EXCHANGE_CHUNKS[0]} and {EXCHANGE_CHUNKS[1]} (the dev corpus's range); a "
        "warning outside.",
    ),
    _spec(
        EMBEDDING_DIMENSION,
        "memory",
        "Every stored vector of the session has the embedder's dimension, and that "
        "dimension has its HNSW index.",
    ),
    _spec(
        NO_ORPHANS,
        "memory",
        "No chunk in the store without its memory, and no chunk of this session left from an "
        "older version (positions are 0..n-1 in every section).",
    ),
    _spec(ONE_MEMORY, "memory", "Exactly one `memories` row for the digested session."),
]


# Subsettable: a re-embed (`librarian backfill --reembed`) selects `memory` without its digest.
@dg.multi_asset_check(specs=_SPECS, can_subset=True)
def stored_session_checks(
    context: dg.AssetCheckExecutionContext,
    store: StoreResource,
    memories: MemoriesResource,
    embedder: EmbedderResource,
    io_manager: dg.ResourceParam[StagingIOManager],
):
    # A run over a range of sessions (docs/decisions/0014) gets one result per check for the
    # range, as Dagster records it: failed if any session fails it, naming those sessions.
    selected = {k.name for k in context.selected_asset_check_keys}
    keys = context.partition_keys
    if len(keys) == 1:
        for result in _session_checks(store, embedder, io_manager, session_id_of(keys[0])):
            if result.check_name in selected:
                yield result
        return
    by_check: dict[str, list[tuple[str, dg.AssetCheckResult]]] = {}
    for key in keys:
        session_id = session_id_of(key)
        if memories.get().memory_record(session_id) is None:
            continue  # nothing stored for it in this run (nothing to remember, or lost)
        for result in _session_checks(store, embedder, io_manager, session_id):
            by_check.setdefault(str(result.check_name), []).append((session_id, result))
    for asset, check_name in [
        (s.asset_key.to_user_string(), s.name) for s in _SPECS if s.name in selected
    ]:
        results = by_check.get(check_name, [])
        failing = [sid for sid, r in results if not r.passed]
        yield dg.AssetCheckResult(
            asset_key=asset,
            check_name=check_name,
            passed=not failing,
            severity=results[0][1].severity if results else dg.AssetCheckSeverity.ERROR,
            metadata={"sessions": len(results), "failing": failing[:50]},
        )


def _session_checks(
    store: StoreResource,
    embedder: EmbedderResource,
    io_manager: StagingIOManager,
    session_id: str,
) -> Iterator[dg.AssetCheckResult]:
    yield _digest_schema(io_manager, session_id)
    stored = session_integrity(store.database(), session_id)
    digest = sum(n for section, n in stored.chunks_by_section.items() if section != EXCHANGE)
    exchange = stored.chunks_by_section.get(EXCHANGE, 0)
    in_bounds = (
        DIGEST_CHUNKS[0] <= digest <= DIGEST_CHUNKS[1]
        and EXCHANGE_CHUNKS[0] <= exchange <= EXCHANGE_CHUNKS[1]
    )
    yield dg.AssetCheckResult(
        asset_key="memory",
        check_name=CHUNK_COUNT,
        passed=in_bounds,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={"digest_chunks": digest, "exchange_chunks": exchange},
    )
    dimension = embedder.get().dimension
    yield dg.AssetCheckResult(
        asset_key="memory",
        check_name=EMBEDDING_DIMENSION,
        passed=set(stored.dimensions) == {dimension}
        and stored.mismatched_vectors == 0
        and dimension in stored.indexed_dimensions,
        metadata={
            "embedder_dimension": dimension,
            "stored_dimensions": ", ".join(
                f"{d} ({n})" for d, n in sorted(stored.dimensions.items())
            )
            or "none",
            "vectors_of_another_length": stored.mismatched_vectors,
            "indexed_dimensions": ", ".join(map(str, sorted(stored.indexed_dimensions))) or "none",
        },
    )
    yield dg.AssetCheckResult(
        asset_key="memory",
        check_name=NO_ORPHANS,
        passed=stored.orphan_chunks == 0 and stored.position_gaps == 0,
        metadata={
            "orphan_chunks_in_store": stored.orphan_chunks,
            "sections_with_leftover_rows": stored.position_gaps,
        },
    )
    yield dg.AssetCheckResult(
        asset_key="memory",
        check_name=ONE_MEMORY,
        passed=stored.memories == 1,
        metadata={"memories_rows": stored.memories},
    )


def _digest_schema(io_manager: StagingIOManager, session_id: str) -> dg.AssetCheckResult:
    path = io_manager.path_for("session_digest", session_id)
    problems: list[str] = []
    try:
        record = DigestRecord.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        problems.append(f"no staged digest at {path}")
    except ValidationError as exc:
        # Where and what kind, never the value: the check's metadata is shown to anyone.
        problems += [
            f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['type']}" for e in exc.errors()
        ]
    else:
        if record.digest_version != DIGEST_VERSION:
            problems.append(f"digest_version {record.digest_version}, current {DIGEST_VERSION}")
        if not record.digest.summary.strip():
            problems.append("summary: empty")
        if not any(getattr(record.digest, key) for key, _heading in SECTIONS):
            problems.append("no bullet in any section")
    return dg.AssetCheckResult(
        asset_key="session_digest",
        check_name=DIGEST_SCHEMA,
        passed=not problems,
        metadata={"problems": problems[:20], "file": dg.MetadataValue.path(str(path))},
    )


def memory_freshness(quiet_hours: float) -> dg.FreshnessPolicy | None:
    """A memory not written for `quiet_hours` is stale (red in the UI), half of that a warning.

    The same setting as the quiet-folders alert: a day without a new memory, by default, is a day
    the agents' folders may not have filled. None (no policy) when the setting is 0.
    """
    if quiet_hours <= 0:
        return None
    fail = timedelta(hours=quiet_hours)
    warn = fail / 2 if fail / 2 >= timedelta(minutes=1) else None
    return dg.FreshnessPolicy.time_window(
        fail_window=max(fail, timedelta(minutes=2)), warn_window=warn
    )
