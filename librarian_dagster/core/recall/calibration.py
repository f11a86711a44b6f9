"""How alike unrelated chunks are in each embedding space of this store: relevance's background
(core/recall/relevance.py), measured on a sample of the store's chunks and kept in
`space_calibrations`, so that every process reads one row."""

import contextlib
import random

import numpy as np
import psycopg
from psycopg.rows import DictRow

from librarian_dagster.core.recall.relevance import (
    CALIBRATION_SAMPLE,
    DEFAULT_CALIBRATION,
    SpaceCalibration,
)


class Calibrations:
    """Each space's background, kept in this process between questions; measured again once
    the store has grown or shrunk by a third since."""

    def __init__(self) -> None:
        # (model, dimension) -> (chunks held when measured, the space's background).
        self._kept: dict[tuple[str, int], tuple[int, SpaceCalibration]] = {}

    def of(
        self, conn: psycopg.Connection[DictRow], model: str, dim: int, chunks: int
    ) -> SpaceCalibration:
        measured = self._kept.get((model, dim))
        if measured is not None and still_fits(measured[0], chunks):
            return measured[1]
        kept = conn.execute(
            "SELECT chunks, chunk_mean, chunk_sd, session_mean, session_sd"
            " FROM space_calibrations WHERE embedding_model = %s AND embedding_dim = %s",
            (model, dim),
        ).fetchone()
        if kept is not None and still_fits(kept["chunks"], chunks):
            measured = (kept["chunks"], SpaceCalibration(
                kept["chunk_mean"], kept["chunk_sd"], kept["session_mean"], kept["session_sd"]
            ))  # fmt: skip
        else:
            calibration = measure_space(conn, model, dim)
            if calibration is not None:
                _keep(conn, model, dim, chunks, calibration)
            measured = (chunks, calibration or DEFAULT_CALIBRATION)
        self._kept[(model, dim)] = measured
        return measured[1]


def still_fits(measured_at: int, chunks: int) -> bool:
    """Whether a space measured when the store held `measured_at` chunks still describes it."""
    return abs(chunks - measured_at) * 3 <= measured_at


def _keep(
    conn: psycopg.Connection[DictRow], model: str, dim: int, chunks: int, space: SpaceCalibration
) -> None:
    """Store a space's measured background for every process after this one. A search on a
    role or a replica that may only read keeps it in this process alone."""
    read_only = (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction)
    with contextlib.suppress(*read_only):
        conn.execute(
            """
            INSERT INTO space_calibrations (embedding_model, embedding_dim, chunks,
                chunk_mean, chunk_sd, session_mean, session_sd)
            VALUES (%s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (embedding_model, embedding_dim) DO UPDATE SET chunks = EXCLUDED.chunks,
                chunk_mean = EXCLUDED.chunk_mean, chunk_sd = EXCLUDED.chunk_sd,
                session_mean = EXCLUDED.session_mean, session_sd = EXCLUDED.session_sd
            """,
            (model, dim, chunks, space.chunk_mean, space.chunk_sd, space.session_mean,
             space.session_sd),
        )  # fmt: skip


def measure_space(
    conn: psycopg.Connection[DictRow], model: str, dim: int
) -> SpaceCalibration | None:
    bounds = conn.execute("SELECT MIN(id) AS low, MAX(id) AS high FROM indexed_chunks").fetchone()
    if bounds is None or bounds["low"] is None:
        return None
    low, high = int(bounds["low"]), int(bounds["high"])
    # Ids drawn at random (the same draw each time: the same store is judged alike) and
    # fetched by primary key, a sample without scanning a table of a million chunks; drawn
    # again, up to four times the sample in all, for ids of deleted chunks, which find nothing.
    draw = random.Random(0).sample(
        range(low, high + 1), min(4 * CALIBRATION_SAMPLE, high - low + 1)
    )
    rows: list[DictRow] = []
    for start in range(0, len(draw), CALIBRATION_SAMPLE):
        rows += conn.execute(
            "SELECT session_id, embedding FROM indexed_chunks WHERE id = ANY(%s)"
            " AND embedding_model = %s AND embedding_dim = %s",
            (draw[start : start + CALIBRATION_SAMPLE], model, dim),
        ).fetchall()
        if len(rows) >= CALIBRATION_SAMPLE:
            break
    rows = rows[:CALIBRATION_SAMPLE]
    owners = sorted({r["session_id"] for r in rows})
    means = conn.execute(
        "SELECT session_id, embedding FROM session_vectors WHERE session_id = ANY(%s)"
        " AND embedding_model = %s AND embedding_dim = %s",
        (owners, model, dim),
    ).fetchall()
    if not rows or not means:
        return None
    return SpaceCalibration.from_sample(
        np.array([r["embedding"].to_numpy() for r in rows], dtype=np.float64),
        [r["session_id"] for r in rows],
        np.array([r["embedding"].to_numpy() for r in means], dtype=np.float64),
        [r["session_id"] for r in means],
    )
