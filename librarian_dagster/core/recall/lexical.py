"""BM25 over the stored chunks, from an in-memory postings index kept in step with the store.

Why in memory: BM25 in SQL read the lexemes of every chunk that shares a word with the question,
and at 100,000 chunks that cost a second a query (docs/decisions/0017). Postings held in numpy
arrays score the same chunks, with the same formula, in milliseconds. The index mirrors the store
and decides nothing of its own: document frequencies and collection statistics still come from
the store (counted at write time, `lexeme_df` and `chunk_stats`), and the index answers only
which chunks hold a lexeme, how often, and how long each chunk is.

It is made of segments, as a search engine's index is: the chunks there when it was built, then
one small segment per refresh for the chunks written since. Chunk ids are never reused (a
replaced session's chunks get new ids), so a refresh needs only the ids the store holds now: the
ones the index lacks are new and loaded as a segment; the ones the store no longer has were
deleted and are masked out. The store bumps `chunk_stats.generation` on every write, which says
when to look. Segments are merged once they pile up, from memory, without the database.

Given a folder (core/recall/postings_file.py, docs/decisions/0041), every segment is kept in a
file there and mapped from it: a base file and segment files beside it. The process that writes
the store keeps them current after each run (`keep`: what no file covers becomes a segment file;
the files merge as they pile up), so a process started after a backfill maps them all and loads
from the store only what no file covers; a running reader, at each refresh, maps the files that
appeared and drops the ones merged away. Readers merge nothing kept (a merge is a heap of the
size of the map) and write only what they had to load, when no writer holds the folder.

Beside the postings, the same snapshot gives what ranking asks of every session (importance, date,
whether it is private, which agent wrote it): a search then needs no query of its own for the
default filter (no private sessions), an agent filter or the ranking boosts, two round trips and
a fetch of every session id fewer.
A memory is only ever written with its chunks, so the generation covers these facts too.
"""

import contextlib
import logging
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, LiteralString, Protocol

import numpy as np
import psycopg
from psycopg.rows import tuple_row

from librarian_dagster.core.digest.chunking import EXCHANGE
from librarian_dagster.core.digest.schema import PRIVATE_DOMAIN
from librarian_dagster.core.recall import postings_file

# BM25 as Lucene sets it; a chunk's length is its number of distinct lexemes (length(tsvector)).
BM25_K1 = 1.2
BM25_B = 0.75
_MAX_SEGMENTS = 8
_REWRITE_SHARE = 0.1
"""Once the chunks outside the first segment are this share of it, all are merged into one (and
the file rewritten): a new process then catches up on little."""

_Rows = np.ndarray[Any, np.dtype[np.int64]]
_POSTING = np.dtype([("id", ">i8"), ("tf", ">i2")])  # as int8send || int2send write them


class Names:
    """Strings numbered in the order first seen; append-only, so a number never changes."""

    def __init__(self, names: Sequence[str] = ()) -> None:
        self.names: list[str] = list(names)
        self._codes: dict[str, int] = {name: i for i, name in enumerate(self.names)}

    def code(self, name: str) -> int:
        found = self._codes.get(name)
        if found is None:
            found = self._codes[name] = len(self.names)
            self.names.append(name)
        return found

    def codes(self, names: Collection[str]) -> np.ndarray:
        """The numbers of those of `names` seen so far."""
        return np.array([self._codes[n] for n in names if n in self._codes], dtype=np.int32)


@dataclass(frozen=True)
class Segment:
    """Some chunks' postings. Immutable but for `live`, which a refresh replaces, never edits."""

    ids: np.ndarray
    """Chunk id per row, ascending."""
    sessions: np.ndarray
    """Session per row, numbered by the index's `Names`."""
    exchange: np.ndarray
    """Whether the row is an exchange window (else a digest bullet)."""
    models: np.ndarray
    """Embedding model per row (numbered): a chunk is searched only in its own model's space."""
    length: np.ndarray
    live: np.ndarray
    """False for rows whose chunk the store has deleted since."""
    postings: Mapping[str, tuple[np.ndarray, np.ndarray]]
    """lexeme -> (rows holding it, ascending, int32; its term frequency in each, float32):
    8 bytes a posting. A dict, or a `PackedPostings` mapped from a file."""
    file: tuple[str, int, int, int] | None = None
    """The file it is mapped from (name, inode, modification time, size); None: held in
    memory."""


@dataclass(frozen=True)
class SessionColumns:
    """What ranking and the private and agent filters need of each memory, by session number
    (`Names`)."""

    known: np.ndarray
    """Whether the session had a memory in the snapshot (numbers of deleted ones stay taken)."""
    private: np.ndarray
    """Of the private domain, or of a project its person keeps private."""
    agent: np.ndarray
    """The agent that wrote it, numbered by the index's agent `Names` (-1: no memory)."""
    importance: np.ndarray
    dated: np.ndarray
    """When the session happened (ended, else started, else ingested), in seconds since 1970."""
    person: np.ndarray
    """Whose it is, numbered by the index's person `Names` (-1: no memory or no person)."""


_NO_FACTS = SessionColumns(
    *(np.zeros(0, dtype=t) for t in (bool, bool, np.int32, np.float64, np.float64, np.int32))
)


@dataclass(frozen=True)
class Scored:
    """The chunks that hold one of the question's lexemes (and pass the filters): every one, or
    those that can be among the `pool` best of their layer (`LexicalIndex.score`)."""

    ids: np.ndarray
    sessions: np.ndarray
    exchange: np.ndarray
    score: np.ndarray
    covered: np.ndarray
    """The question's idf mass the chunk holds."""
    best_covered: float
    """The most of it any chunk holds, of all those scored (kept or not): its share of the
    question's idf mass says how much the BM25 lists weigh in the ranking (Search.find,
    core/recall/search.py)."""
    names: Names

    def top(self, exchange: bool, pool: int) -> list[tuple[int, str, float]]:
        """The `pool` best (chunk id, session id, score) of one layer: score descending, then
        id."""
        # All rows tied with the pool's last score are kept, so ties order by id, as in SQL.
        rows = _best(np.flatnonzero(self.exchange == exchange), self.score, pool)
        rows = rows[np.lexsort((self.ids[rows], -self.score[rows]))][:pool]
        names = self.names.names
        return [(int(self.ids[r]), names[self.sessions[r]], float(self.score[r])) for r in rows]


class BM25Lists(Protocol):
    """A question's lexical lists, as search reads them."""

    @property
    def best_covered(self) -> float:
        """The most of the question's idf mass any chunk holds (the BM25 lists' vote)."""
        ...

    def top(self, exchange: bool, pool: int) -> list[tuple[int, str, float]]:
        """The `pool` best (chunk id, session id, BM25 score) of one layer."""
        ...


class LexicalLists(Protocol):
    """What search asks of a lexical index (`LexicalIndex`; benchmarks/lexical_engines.py puts
    tantivy behind it to measure one against the other)."""

    def refresh(self, conn: psycopg.Connection[Any], generation: int) -> None:
        """Catch up with the store, when `generation` moved."""
        ...

    def score(
        self,
        terms: Sequence[tuple[str, float]],
        avgdl: float,
        model: str,
        sessions: Collection[str] | None = None,
        include_private: bool = True,
        pool: int | None = None,
        agent: str | None = None,
        viewer: str | None = None,
    ) -> BM25Lists: ...

    def private_sessions(self, viewer: str | None = None) -> list[str]: ...

    def session_facts(self, sessions: Collection[str]) -> dict[str, tuple[float, float]]:
        """(importance, date in seconds since 1970) of those of `sessions` with a memory."""
        ...


class LexicalIndex:
    """BM25 postings of every chunk in one store; safe to share between threads."""

    def __init__(self, folder: Path | None = None) -> None:
        """`folder`: where the segments are kept between processes (None: nowhere)."""
        self._segments: tuple[Segment, ...] = ()
        self._facts = _NO_FACTS
        self._generation: int | None = None
        self._lock = threading.Lock()
        self._sessions = Names()
        self._models = Names()
        self._agents = Names()
        self._persons = Names()
        self._folder = folder
        self._store: str | None = None  # the store's identity, once read: the files' names
        # Each segment's length normalisation at the last mean length, by id of its lengths
        # array (the array is held beside it, so the id cannot pass to a new segment's).
        self._norms: dict[int, tuple[np.ndarray, float, np.ndarray]] = {}

    @property
    def segments(self) -> int:
        return len(self._segments)

    def refresh(self, conn: psycopg.Connection[Any], generation: int) -> None:
        """Catch up with the store when `generation` (chunk_stats') differs from ours: map what
        the folder holds that we have not, load from the store what no file covers, and keep it
        in a file of its own when no other process is writing the folder.

        `conn` must be in autocommit mode: the refresh reads in a transaction of its own.
        """
        if generation == self._generation:
            return
        with self._lock:
            if generation == self._generation:  # another thread caught up meanwhile
                return
            self._catch_up(conn, keep=False)

    def keep(self, conn: psycopg.Connection[Any]) -> None:
        """Bring the folder's files up to the store, waiting for another writer: what no file
        covers is written as a segment file, and the files are merged once they pile up (the
        process that writes the store calls it after each run, so that the next reader maps
        everything). Costs a segment of the run's chunks, a merge of the small files every
        eighth call, and a rewrite of the base once the rest is a tenth of it."""
        if self._folder is None:
            return
        with self._lock:
            self._catch_up(conn, keep=True)

    def _catch_up(self, conn: psycopg.Connection[Any], keep: bool) -> None:
        with self._writing(conn, wait=keep) as may_write:
            # One snapshot, taken while this process alone may write the files: the live ids
            # and the new chunks' postings agree with each other and with the generation
            # recorded, and every file was written from this snapshot or an older one.
            with conn.transaction(), conn.cursor(row_factory=tuple_row) as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                current = _value(cur.execute("SELECT generation FROM chunk_stats").fetchone(), 0)
                scanned = self._with_files()
                live = self._recorded_live(current, scanned)
                recorded = live is not None
                if live is None:
                    live = _ids(cur.execute(
                        "SELECT string_agg(int8send(id), ''::bytea ORDER BY id) FROM indexed_chunks"
                    ).fetchone())  # fmt: skip
                segments = _one_copy([_alive(s, live) for s in scanned])
                known = np.concatenate([s.ids for s in segments]) if segments else live[:0]
                new = np.setdiff1d(live, known, assume_unique=True)
                if len(new):
                    # Nothing known yet: all there is, without naming 100,000 ids.
                    only = new if segments else None
                    segments.append(_load_segment(cur, only, self._sessions, self._models))
                facts = _load_facts(cur, self._sessions, self._agents, self._persons)
            segments = [s for s in segments if s.live.any()]
            if self._folder is None or keep:
                # Merged here only: a reader merging mapped files would hold on its heap what
                # the map held (1.7 GB at a million chunks), so readers leave it to the writer.
                segments = _merged(segments)
            if may_write:
                segments = self._written(segments, scanned)
                if not recorded:  # else the files and the record stand as they were
                    self._record(current, segments, live)
            self._segments = tuple(segments)
            self._norms = {
                k: v for k, v in self._norms.items() if k in {id(s.length) for s in segments}
            }
            self._facts = facts
            self._generation = current

    @contextlib.contextmanager
    def _writing(self, conn: psycopg.Connection[Any], wait: bool) -> Iterator[bool]:
        """Whether this refresh may write the folder: not while another process writes it."""
        held = self._writers_lock(conn, wait)
        try:
            yield held is not None
        finally:
            if held is not None:
                held.close()

    def _writers_lock(self, conn: psycopg.Connection[Any], wait: bool) -> BinaryIO | None:
        if self._folder is None:
            return None
        if self._store is None:
            with conn.cursor(row_factory=tuple_row) as cur:
                row = cur.execute("SELECT id::text FROM store_identity").fetchone()
            self._store = _value(row, None)
        if self._store is None:
            return None
        try:
            return postings_file.lock(self._folder, self._store, wait)
        except OSError as exc:
            logging.getLogger(__name__).warning("BM25 postings not kept: %s", exc)
            return None

    def _with_files(self) -> list[Segment]:
        """Our segments as the folder holds them now: each file mapped (the ones mapped before
        and unchanged kept as they are), the base first; then the ones whose file is gone
        (merged away, or deleted by `librarian forget`), still mapped, whose rows a file that
        holds them masks (`_one_copy`), so that no file gone costs a load; then the segments
        held in memory alone (loaded when the folder could not be written)."""
        if self._folder is None or self._store is None:
            return list(self._segments)
        held = {s.file: s for s in self._segments if s.file is not None}
        mapped: list[Segment] = []
        for path in postings_file.files(self._folder, self._store):
            try:
                stat = path.stat()
            except OSError:
                continue
            key = (path.name, stat.st_ino, stat.st_mtime_ns, stat.st_size)
            segment = held.pop(key, None) or self._mapped(path, key)
            if segment is not None:
                mapped.append(segment)
        return [*mapped, *held.values(), *(s for s in self._segments if s.file is None)]

    def _recorded_live(self, generation: int, scanned: list[Segment]) -> np.ndarray | None:
        """The live chunk ids (ascending) as the files' record gives them: when the last writer
        brought these very files up to the store's current `generation`, they hold every live
        chunk, and the record names those they hold that are gone. None otherwise."""
        if self._folder is None or self._store is None or not scanned:
            return None
        record = postings_file.read_record(self._folder, self._store)
        if record is None or record[0] != generation:
            return None
        held = {s.file[0]: s.file[3] for s in scanned if s.file is not None}
        if len(held) != len(scanned) or held != record[1]:
            return None  # a file gone, changed or added since, or postings held in memory
        ids = _sorted_unique([s.ids for s in scanned])
        return ids[~_among(ids, np.sort(record[2]))]

    def _record(self, generation: int, segments: list[Segment], live: np.ndarray) -> None:
        """What the files now hold recorded for the next reader (`_recorded_live`): nothing
        when a segment could not be kept in a file."""
        assert self._folder is not None and self._store is not None
        if any(s.file is None for s in segments):
            postings_file.record_file(self._folder, self._store).unlink(missing_ok=True)
            return
        held = {s.file[0]: s.file[3] for s in segments if s.file is not None}
        ids = _sorted_unique([s.ids for s in segments])
        try:
            postings_file.write_record(
                self._folder, self._store, generation, held, ids[~_among(ids, live)]
            )
        except OSError as exc:
            logging.getLogger(__name__).warning("BM25 postings' record not kept: %s", exc)

    def _mapped(self, path: Path, key: tuple[str, int, int, int]) -> Segment | None:
        """The segment in this file, mapped, its rows numbered by our `Names` (a copy of the
        numbers only when the file numbers them otherwise); None if it cannot be used."""
        assert self._store is not None
        found = postings_file.read(path, self._store)
        if found is None:
            return None
        rows, postings, sessions, models = found
        return Segment(
            ids=rows["ids"],
            sessions=_renumbered(rows["sessions"], sessions, self._sessions),
            exchange=rows["exchange"],
            models=_renumbered(rows["models"], models, self._models),
            length=rows["length"],
            live=np.ones(len(rows["ids"]), dtype=bool),
            postings=postings,
            file=key,
        )

    def _written(self, segments: list[Segment], scanned: list[Segment]) -> list[Segment]:
        """Each segment held in memory written to a file of its own (the first: the base) and
        mapped from there, and the files no segment comes from any more deleted (merged, or
        all their rows deleted or held by another file). A home that cannot take a file costs
        the next process that segment's load, nothing else."""
        assert self._folder is not None and self._store is not None
        written = []
        for i, segment in enumerate(segments):
            if segment.file is None:
                path = (
                    postings_file.base_file(self._folder, self._store)
                    if i == 0
                    else postings_file.segment_file(self._folder, self._store)
                )
                segment = self._write(segment, path)
            written.append(segment)
        kept = {s.file[0] for s in written if s.file is not None}
        for gone in {s.file[0] for s in scanned if s.file is not None} - kept:
            (self._folder / gone).unlink(missing_ok=True)
        return written

    def _write(self, segment: Segment, path: Path) -> Segment:
        """The segment written to `path` and mapped from it: the pages are the operating
        system's to share and evict, not this process's heap."""
        if not segment.live.all():
            segment = _merge([segment])
        sessions, session_names = _compact(segment.sessions, self._sessions)
        models, model_names = _compact(segment.models, self._models)
        rows = {name: getattr(segment, name) for name in postings_file.ROW_ARRAYS}
        rows.update(sessions=sessions, models=models)
        try:
            postings_file.write(
                path,
                self._store or "",
                rows,
                postings_file.PackedPostings.of(segment.postings),
                session_names,
                model_names,
            )
            stat = path.stat()
        except OSError as exc:
            logging.getLogger(__name__).warning("BM25 postings not kept: %s", exc)
            return segment
        mapped = self._mapped(path, (path.name, stat.st_ino, stat.st_mtime_ns, stat.st_size))
        return segment if mapped is None else mapped

    def private_sessions(self, viewer: str | None = None) -> list[str]:
        """The private sessions, as of the last refresh; with a `viewer`, those not theirs."""
        names = self._sessions.names
        return [names[i] for i in np.flatnonzero(self._private_of_others(viewer))]

    def _private_of_others(self, viewer: str | None) -> np.ndarray:
        """By session number: private, and (with a `viewer`) not the viewer's own."""
        facts = self._facts
        if viewer is None:
            return facts.private
        codes = self._persons.codes({viewer})
        # A session of no person (-1) is read as before persons were kept (queries.VISIBLE).
        own = (facts.person == (int(codes[0]) if len(codes) else -2)) | (facts.person == -1)
        return facts.private & ~own

    def session_facts(self, sessions: Collection[str]) -> dict[str, tuple[float, float]]:
        """(importance, date in seconds since 1970) of those of `sessions` with a memory."""
        facts, codes = self._facts, self._sessions.codes(sessions)
        codes = codes[codes < len(facts.known)]
        names = self._sessions.names
        return {
            names[c]: (float(facts.importance[c]), float(facts.dated[c]))
            for c in codes[facts.known[codes]]
        }

    def score(
        self,
        terms: Sequence[tuple[str, float]],
        avgdl: float,
        model: str,
        sessions: Collection[str] | None = None,
        include_private: bool = True,
        pool: int | None = None,
        agent: str | None = None,
        viewer: str | None = None,
    ) -> Scored:
        """BM25 of every chunk of `model` (of `sessions`, when given) holding one of `terms`;
        without the private sessions unless `include_private` (and then, with a `viewer`,
        without those not the viewer's); of `agent`'s sessions alone, when given. With a
        `pool`, only the chunks
        that can be among the `pool` best of their layer are kept (`Scored.top` of that pool
        is the same, and a million chunks' worth of rows is not carried along).

        `terms` are the question's distinct lexemes with their idf, as the store counts them.
        """
        models = self._models.codes({model})
        allowed = self._sessions.codes(sessions) if sessions is not None else None
        # By session number; sessions numbered after the snapshot are not private in it.
        private = None
        if not include_private:
            private = self._facts.private
        elif viewer is not None:
            private = self._private_of_others(viewer)
        if agent is not None:
            # Another agent's sessions are left out as the private ones are: by number, from
            # the facts, with no list of names (an agent the store does not hold: every one).
            codes = self._agents.codes({agent})
            facts = self._facts
            other = ~(facts.known & (facts.agent == (int(codes[0]) if len(codes) else -2)))
            private = other if private is None else (private | other)
        parts: list[tuple[np.ndarray, ...]] = []
        best_covered = 0.0
        for segment in self._segments:
            scored = self._segment_scores(segment, terms, avgdl, models, allowed, private, pool)
            if scored is not None:
                part, covered_most = scored
                parts.append(part)
                best_covered = max(best_covered, covered_most)
        if not parts:
            none = np.zeros(0)
            return Scored(none.astype(np.int64), none.astype(np.int32), none.astype(bool),
                          none, none, 0.0, self._sessions)  # fmt: skip
        columns = zip(*parts, strict=True)
        ids, sessions_, exchange, scores, covered = (np.concatenate(c) for c in columns)
        return Scored(ids, sessions_, exchange, scores, covered, best_covered, self._sessions)

    def _segment_scores(
        self,
        segment: Segment,
        terms: Sequence[tuple[str, float]],
        avgdl: float,
        models: np.ndarray,
        allowed: np.ndarray | None,
        private: np.ndarray | None,
        pool: int | None,
    ) -> tuple[tuple[np.ndarray, ...], float] | None:
        """One segment's scored rows (ids, sessions, layers, scores, idf mass held) that pass
        the filters, and the most idf mass any of them holds; None when none does."""
        held = [(idf, p) for lexeme, idf in terms if (p := segment.postings.get(lexeme))]
        if not held:
            return None
        # Every posting of the question's lexemes at once, in the terms' order, each row's
        # terms summed in that order by bincount: the same floats as adding term by term,
        # in one pass instead of a gather and a scatter per term (1.7x at a million chunks).
        rows = np.concatenate([posting[0] for _, posting in held])
        tf = np.concatenate([posting[1] for _, posting in held]).astype(np.float64)
        idfs = np.repeat([idf for idf, _ in held], [len(posting[0]) for _, posting in held])
        norm = self._length_norm(segment, avgdl)[rows]
        size = len(segment.ids)
        scores = np.bincount(rows, idfs * tf * (BM25_K1 + 1) / (tf + norm), minlength=size)
        covered = np.bincount(rows, idfs, minlength=size)
        # The filters on the rows holding a lexeme only, not on every row of the segment.
        rows = np.flatnonzero(covered > 0)
        keep = segment.live[rows] & np.isin(segment.models[rows], models)
        if allowed is not None:
            keep &= np.isin(segment.sessions[rows], allowed)
        if private is not None and private.any():
            keep &= ~_marked(private, segment.sessions[rows])
        rows = rows[keep]
        if not len(rows):
            return None
        best_covered = float(covered[rows].max())
        if pool is not None:
            rows = np.concatenate([
                _best(rows[segment.exchange[rows] == layer], scores, pool)
                for layer in (True, False)
            ])  # fmt: skip
        part = (
            segment.ids[rows], segment.sessions[rows], segment.exchange[rows],
            scores[rows], covered[rows],
        )  # fmt: skip
        return part, best_covered

    def _length_norm(self, segment: Segment, avgdl: float) -> np.ndarray:
        """BM25's length normalisation of each of the segment's rows, for this mean length
        (kept: the mean moves only when the store is written)."""
        key = id(segment.length)
        kept = self._norms.get(key)
        if kept is None or kept[0] is not segment.length or kept[1] != avgdl:
            norm = BM25_K1 * (1 - BM25_B + BM25_B * segment.length / max(avgdl, 1.0))
            kept = self._norms[key] = (segment.length, avgdl, norm)
        return kept[2]


def _best(rows: np.ndarray, scores: np.ndarray, pool: int) -> np.ndarray:
    """Of `rows`, those whose score is among the `pool` best, all rows tied with the last kept."""
    if len(rows) <= pool:
        return rows
    cut = np.partition(scores[rows], len(rows) - pool)[len(rows) - pool]
    return rows[scores[rows] >= cut]


def _marked(mask: np.ndarray, sessions: np.ndarray) -> np.ndarray:
    """`mask` (by session number) of each of `sessions`: a lookup, not a search, however many
    are marked; a session numbered after the snapshot the mask was made in is not marked."""
    inside = sessions < len(mask)
    marked = np.zeros(len(sessions), dtype=bool)
    marked[inside] = mask[sessions[inside]]
    return marked


def _value(row: Any, default: Any) -> Any:
    return row[0] if row is not None and row[0] is not None else default


def _ids(row: Any) -> _Rows:
    raw = _value(row, b"")
    return np.frombuffer(raw, dtype=">i8").astype(np.int64)


def _alive(segment: Segment, live: _Rows) -> Segment:
    """The segment with its rows whose chunk the store holds (`live`, ascending) marked live:
    from scratch, since a row a file holds may be of a chunk written after the last snapshot."""
    still = _among(segment.ids, live)
    return segment if np.array_equal(still, segment.live) else replace(segment, live=still)


def _sorted_unique(arrays: list[np.ndarray]) -> np.ndarray:
    """The ids of `arrays` ascending, each once: numpy's `unique` hashes (0.5 s for a million
    ids), where one file's ids, already ascending, need no work at all."""
    ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    if len(arrays) > 1 or not (ids[1:] > ids[:-1]).all():
        ids = np.sort(ids)
        ids = ids[np.concatenate(([True], ids[1:] != ids[:-1]))] if len(ids) else ids
    return ids


def _among(ids: np.ndarray, sorted_ids: np.ndarray) -> np.ndarray:
    """Whether each of `ids` is in `sorted_ids` (ascending): a binary search each, not a sort of
    both (a million-chunk base against a run's few hundred)."""
    if not len(sorted_ids):
        return np.zeros(len(ids), dtype=bool)
    at = np.searchsorted(sorted_ids, ids).clip(max=len(sorted_ids) - 1)
    return sorted_ids[at] == ids


def _one_copy(segments: Sequence[Segment]) -> list[Segment]:
    """The segments with each chunk live in one of them, the first that holds it: files may
    cover the same chunks (two processes kept what neither saw the other keep), and a chunk
    id's postings never change, so which copy is kept does not matter."""
    kept: list[Segment] = []
    for segment in segments:
        held = np.zeros(len(segment.ids), dtype=bool)
        for earlier in kept:
            held |= _among(segment.ids, earlier.ids)
        kept.append(replace(segment, live=segment.live & ~held) if held.any() else segment)
    return kept


def _merged(segments: list[Segment]) -> list[Segment]:
    """Segments merged once they pile up: all into one once those after the first hold a tenth
    of its chunks (a new process then catches up on little), else the ones after the first
    into one once there are more than eight."""
    rest = sum(len(s.ids) for s in segments[1:])
    if rest and rest >= _REWRITE_SHARE * len(segments[0].ids):
        return [_merge(segments)]
    if len(segments) > _MAX_SEGMENTS:
        return [segments[0], _merge(segments[1:])]
    return segments


def _renumbered(codes: np.ndarray, names: list[str], ours: Names) -> np.ndarray:
    """A file's row numbers of `names` as `ours` numbers them (the file's own array when they
    agree, as they do for the first file a process maps)."""
    table = np.array([ours.code(n) for n in names], dtype=np.int32)
    if np.array_equal(table, np.arange(len(table))):
        return codes
    return table[codes] if len(codes) else codes.astype(np.int32)


def _compact(codes: np.ndarray, names: Names) -> tuple[np.ndarray, list[str]]:
    """`codes` numbered among the names they use alone, and those names: a run's segment file
    names its own sessions, not every session of the store."""
    used, local = np.unique(codes, return_inverse=True)
    return local.astype(np.int32), [names.names[u] for u in used]


# The chunks asked for, as a join (hashed) rather than `id = ANY(array)`, which PostgreSQL checks
# by walking the array for each row: quadratic, a minute at 100,000 chunks.
_ONLY_IDS: LiteralString = "JOIN unnest(%(ids)s::bigint[]) AS wanted (id) USING (id)"


def _load_segment(
    cur: psycopg.Cursor[tuple[Any, ...]], ids: _Rows | None, sessions: Names, models: Names
) -> Segment:
    """The postings of these chunks (`ids` None: of all), read from their stored tsvectors.

    PostgreSQL groups the postings by lexeme and packs each list as bytes, which numpy reads as
    they are: thousands of rows, not millions of Python objects.
    """
    only = _ONLY_IDS if ids is not None else ""
    params = {"exchange": EXCHANGE, "ids": ids.tolist() if ids is not None else None}
    rows = cur.execute(
        "SELECT c.id, c.session_id, c.section = %(exchange)s, c.embedding_model,"
        f" length(c.text_search) FROM indexed_chunks c {only} ORDER BY c.id",
        params,
    ).fetchall()
    chunk_ids = np.array([r[0] for r in rows], dtype=np.int64)
    postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    # Each posting packed as (chunk id, term frequency) in one aggregate, so the two can never
    # part; unordered, since ordering each list costs PostgreSQL a sort per lexeme (4x slower).
    for lexeme, packed in cur.execute(
        f"""
        SELECT u.lexeme, string_agg(int8send(c.id) || int2send(
                   LEAST(GREATEST(cardinality(u.positions), 1), 32767)::int2), ''::bytea)
        FROM indexed_chunks c {only}, unnest(c.text_search) u GROUP BY u.lexeme
        """,
        params,
    ):
        posting = np.frombuffer(packed, dtype=_POSTING)
        at = np.searchsorted(chunk_ids, posting["id"])
        order = np.argsort(at)
        postings[lexeme] = (at[order].astype(np.int32), posting["tf"][order].astype(np.float32))
    return Segment(
        ids=chunk_ids,
        sessions=np.array([sessions.code(r[1]) for r in rows], dtype=np.int32),
        exchange=np.array([r[2] for r in rows], dtype=bool),
        models=np.array([models.code(r[3]) for r in rows], dtype=np.int32),
        length=np.array([r[4] for r in rows], dtype=np.float64),
        live=np.ones(len(rows), dtype=bool),
        postings=postings,
    )


def _load_facts(
    cur: psycopg.Cursor[tuple[Any, ...]], sessions: Names, agents: Names, persons: Names
) -> SessionColumns:
    """Every memory's importance, date, privacy, agent and person, numbered as the postings
    number sessions."""
    rows = cur.execute(
        "SELECT session_id, domain = %s OR private, importance,"
        " EXTRACT(EPOCH FROM COALESCE(ended_at, started_at, ingested_at))::float8, agent,"
        " person FROM memories",
        (PRIVATE_DOMAIN,),
    ).fetchall()
    codes = np.array([sessions.code(r[0]) for r in rows], dtype=np.int64)
    size = len(sessions.names)
    known, private = np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)
    importance, dated = np.zeros(size), np.zeros(size)
    agent = np.full(size, -1, dtype=np.int32)
    known[codes] = True
    private[codes] = [bool(r[1]) for r in rows]
    importance[codes] = [float(r[2]) for r in rows]
    dated[codes] = [float(r[3]) for r in rows]
    agent[codes] = [agents.code(r[4]) for r in rows]
    person = np.full(size, -1, dtype=np.int32)
    person[codes] = [persons.code(r[5]) if r[5] is not None else -1 for r in rows]
    return SessionColumns(known, private, agent, importance, dated, person)


def _merge(segments: Sequence[Segment]) -> Segment:
    """One segment of the live rows of many, built in memory (rows in chunk id order)."""
    kept = [np.flatnonzero(s.live) for s in segments]
    ids = np.concatenate([s.ids[k] for s, k in zip(segments, kept, strict=True)])
    order = np.argsort(ids, kind="stable")
    # Where each old row lands: -1 if it was deleted.
    place = np.empty(len(ids), dtype=np.int64)
    place[order] = np.arange(len(ids))
    moves, offset = [], 0
    for s, k in zip(segments, kept, strict=True):
        move = np.full(len(s.ids), -1, dtype=np.int64)
        move[k] = place[offset : offset + len(k)]
        moves.append(move)
        offset += len(k)

    def gather(field: str) -> np.ndarray:
        pieces = [getattr(s, field)[k] for s, k in zip(segments, kept, strict=True)]
        return np.concatenate(pieces)[order]

    pieces: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for s, move in zip(segments, moves, strict=True):
        for lexeme, (rows, tf) in s.postings.items():
            moved = move[rows]
            alive = moved >= 0
            if alive.any():
                pieces.setdefault(lexeme, []).append((moved[alive], tf[alive]))
    postings = {}
    for lexeme, parts in pieces.items():
        rows = np.concatenate([r for r, _ in parts])
        tf = np.concatenate([t for _, t in parts])
        by_row = np.argsort(rows)
        postings[lexeme] = (rows[by_row].astype(np.int32), tf[by_row])
    return Segment(
        ids=ids[order],
        sessions=gather("sessions"),
        exchange=gather("exchange"),
        models=gather("models"),
        length=gather("length"),
        live=np.ones(len(ids), dtype=bool),
        postings=postings,
    )
