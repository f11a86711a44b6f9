"""Small pieces the stage assets share, and how a stage goes over the sessions of its run.

A run covers one session (the sensor, a re-materialization) or a range of them (a backfill, many
sessions per run: docs/decisions/0014). Every stage does its work session by session with
`per_session`: one session's error is logged and shown on that session's partition, the session
drops out of what the stage hands on, and the others go on to their memories. The `memory` stage
fails the run at the end if any session of it was lost on the way, so no failure goes unseen.
"""

import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import dagster as dg

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.ingest_plan import is_excluded
from librarian_dagster.core.capture.skips import SkipList, last_active
from librarian_dagster.core.digest.chunking import Chunk
from librarian_dagster.core.store.ledger import Ledger
from librarian_dagster.core.store.pool import connection_lost
from librarian_dagster.defs.partitions import session_id_of

GROUP = "sessions"

EXCLUDED = "excluded by LIBRARIAN_EXCLUDE"
ABSENT = "nothing to remember, or it failed at an earlier stage (see its `error` there)"

In = TypeVar("In")
Out = TypeVar("Out")


def source_files(ledger: Ledger, partition_key: str) -> SessionFiles:
    session_id = session_id_of(partition_key)
    files = ledger.session_source(session_id)
    if files is None:
        raise dg.Failure(
            f"no transcript recorded for session {session_id}: the sessions sensor or "
            "`librarian ingest PATH` records where a session's files are before its first run"
        )
    return files


def kept_out(files: SessionFiles, exclude: Sequence[str], skips: SkipList) -> str | None:
    """Why the session is not to be ingested (LIBRARIAN_EXCLUDE, `librarian skip`), or None."""
    if is_excluded(files, exclude):
        return EXCLUDED
    return skips.reason(files.session_id, last_active(files))


def per_session(
    context: dg.AssetExecutionContext,
    items: Mapping[str, In],
    work: Callable[[str, In], tuple[Out, Mapping[str, Any]] | None],
    asset: str | None = None,
) -> dict[str, Out]:
    """`work(partition key, item)` for each session: (value, its metadata), or None for nothing.

    Returns the values by partition key. Raises when every session failed (then there is
    nothing to hand on that could carry the failure to the `memory` stage), and at once when the
    database is lost. `asset` names which asset of a step that makes several the metadata and
    errors belong to.
    """
    done: dict[str, Out] = {}
    failed: list[str] = []  # "<key>: <first line of its error>"
    errors: list[Exception] = []
    # Read once: each read of `partition_keys` queries the instance's dynamic partitions
    # (all of them), and a range of 25 sessions read it once per session before.
    partition_keys = list(context.partition_keys)
    for key in partition_keys:
        if key not in items:
            # A run over a range records every partition of it as materialized: say why this
            # one holds nothing here (the UI shows it; nothing is staged or stored for it).
            context.add_asset_metadata({"absent": ABSENT}, asset_key=asset, partition_key=key)
    # In the partitions' order (the order sessions were added), not the inputs' (a set's): the
    # first sessions of a range spend the day's token budget first, as runs of one would.
    order = [k for k in partition_keys if k in items]
    order += [k for k in items if k not in set(partition_keys)]
    for key in order:
        try:
            result = work(key, items[key])
        except Exception as exc:  # one session's error must not sink the others of its run
            if connection_lost(exc):
                # Unless it is the database's: every other session would fail the same way, each
                # after Dagster's retries of its error's log line (about 11 s, the event log being
                # on that server too). The run fails now, with the driver's reason.
                raise
            message = first_line(exc)
            context.log.error(f"session {key}: {message}")
            context.add_asset_metadata({"error": message}, asset_key=asset, partition_key=key)
            failed.append(f"{key}: {message}")
            errors.append(exc)
            continue
        if result is not None:
            value, metadata = result
            context.add_asset_metadata(dict(metadata), asset_key=asset, partition_key=key)
            done[key] = value
    if failed and not done:
        if len(errors) == 1:
            # A run of one session (the sensor's) fails exactly as the stage raised: its
            # description, metadata and whether a retry could help (`retried`) stand.
            raise errors[0]
        raise dg.Failure(
            f"{len(failed)} session(s) failed at {asset or context.asset_key.to_user_string()}: "
            + "; ".join(failed),
            # Every session of the run failed: another try of the step helps only if it could
            # help each of them (a model service that was down, not a reply that is no digest).
            allow_retries=all(_retryable(e) for e in errors),
        )
    return done


STEP_RETRIES = 2
"""How many more runs a model step gets once the tries inside it are spent (`retried`)."""


def retried(context: dg.AssetExecutionContext, wait_s: float, work: Callable[[], Out]) -> Out:
    """`work()`; should it raise what another try could fix (a model service down, not a reply
    that is no digest: `dg.Failure(allow_retries=False)`), Dagster runs the step again, up to
    STEP_RETRIES times, `wait_s` then twice that later (plus or minus a quarter, so that the
    steps of many runs do not all come back at once). A Dagster retry policy would do the same
    with a wait fixed when the code is loaded; this one is a setting
    (LIBRARIAN_LLM_STEP_RETRY_SECONDS). An outage longer than that fails the run; the sensor or
    a backfill runs it again."""
    try:
        return work()
    except Exception as exc:
        if not _retryable(exc):
            raise
        wait = wait_s * 2**context.retry_number * random.uniform(0.75, 1.25)
        raise dg.RetryRequested(max_retries=STEP_RETRIES, seconds_to_wait=wait) from exc


def _retryable(exc: Exception) -> bool:
    return exc.allow_retries if isinstance(exc, dg.Failure) else True


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:500]


def common_keys(*inputs: Mapping[str, object]) -> list[str]:
    """The sessions every input has, in the order of the first."""
    return [k for k in inputs[0] if all(k in other for other in inputs[1:])]


def chunk_counts(chunks: list[Chunk]) -> dict[str, int | float]:
    """What a chunking stage reports: how many chunks, and how long they are on average."""
    return {
        "chunks": len(chunks),
        "mean_chars": round(sum(len(c.text) for c in chunks) / max(1, len(chunks)), 1),
    }


def chunk_sessions(
    context: dg.AssetExecutionContext,
    items: Mapping[str, In],
    cut: Callable[[In], list[Chunk]],
    more: Callable[[list[Chunk]], Mapping[str, Any]] = lambda _chunks: {},
) -> Iterator[dg.Output[dict[str, list[Chunk]]]]:
    """A chunking stage's run: `cut` each session (`per_session`), show its `chunk_counts` and
    `more(chunks)` on its partition, and hand on the chunks by partition key. Nothing is
    handed on when no session came through (the stage's output is not required)."""

    def one(_key: str, item: In) -> tuple[list[Chunk], dict[str, Any]]:
        chunks = cut(item)
        return chunks, {**chunk_counts(chunks), **more(chunks)}

    chunks = per_session(context, items, one)
    if chunks:
        yield dg.Output(chunks)
