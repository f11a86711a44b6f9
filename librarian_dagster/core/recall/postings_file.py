"""The BM25 postings of one store kept in a file, read through memory maps and, for the
postings themselves, slice by slice (docs/decisions/0032).

A process that searches needs the postings of the question's few lexemes, not all of them: loading
every posting from PostgreSQL took 1.7 s at 100,000 chunks and 23.5 s at a million, which a
one-shot `librarian search` paid for one answer and a recall server at every start. So whoever has
the postings in memory writes them here, once, as flat arrays, and the next process maps the file
and touches only the pages of the lexemes it scores; what the store gained or lost since is caught
up from the database as the in-memory index always did (core/recall/lexical.py).

Files per store, named by the store's identity (a store made anew reuses chunk ids): the base,
`STORE.postings`, and segment files beside it, `STORE.TOKEN.postings`, each some chunks' postings
(the process that writes the store adds one per run, docs/decisions/0041). Every file is written
to a temporary name and renamed, so a reader sees a whole file or none; files may cover the same
chunks (a chunk id's postings never change), and a reader keeps one copy (core/recall/lexical.py).
Writers take `writing`'s lock; readers take none.

Beside them, `STORE.live.json`, written by whoever last wrote the files under the lock: the
store's generation they were brought up to, each file's name and size, and the chunk ids they
hold whose chunks were gone by then. A reader that finds the store still at that generation and
those very files knows which chunks are live without reading every id from the store (0.4 s at a
million chunks, most of a new recall server's first answer).

Layout: 8 bytes of magic, the header's length (8 bytes, little-endian), the header as JSON (the
store, the session and model names the rows are numbered by, each array's dtype, offset and
length), then the arrays, each at an offset that is a multiple of 64.
"""

import bisect
import fcntl
import json
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

_MAGIC = b"LBRPOST1"
_ALIGN = 64

ROW_ARRAYS = ("ids", "sessions", "exchange", "models", "length")
"""The per-row arrays of a segment (core/recall/lexical.py's `Segment`), in the file by name."""


class PackedPostings(Mapping[str, tuple[np.ndarray, np.ndarray]]):
    """lexeme -> (rows holding it, ascending; its term frequency in each), from flat arrays:
    the lexemes' UTF-8 bytes end to end in byte order, and each one's postings as a slice of the
    rows and frequencies. A lookup is a binary search; nothing is read until it is asked for."""

    def __init__(
        self,
        words: np.ndarray,
        word_starts: np.ndarray,
        starts: np.ndarray,
        rows: "np.ndarray | FileArray",
        tf: "np.ndarray | FileArray",
    ) -> None:
        self._words, self._word_starts = words, word_starts
        self._starts, self._rows, self._tf = starts, rows, tf

    @classmethod
    def of(cls, postings: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> "PackedPostings":
        """The same postings, packed (as a segment held in memory is before it is written)."""
        keys = sorted(postings, key=lambda w: w.encode())
        encoded = [w.encode() for w in keys]
        word_starts = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=word_starts[1:])
        starts = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum([len(postings[w][0]) for w in keys], out=starts[1:])
        empty_rows, empty_tf = np.zeros(0, np.int32), np.zeros(0, np.float32)
        return cls(
            np.frombuffer(b"".join(encoded), dtype=np.uint8),
            word_starts,
            starts,
            np.concatenate([postings[w][0] for w in keys] or [empty_rows]).astype(np.int32),
            np.concatenate([postings[w][1] for w in keys] or [empty_tf]).astype(np.float32),
        )

    def arrays(self) -> "dict[str, np.ndarray | FileArray]":
        return {
            "words": self._words,
            "word_starts": self._word_starts,
            "starts": self._starts,
            "rows": self._rows,
            "tf": self._tf,
        }

    def _word(self, i: int) -> bytes:
        return self._words[self._word_starts[i] : self._word_starts[i + 1]].tobytes()

    def _slice(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        start, end = int(self._starts[i]), int(self._starts[i + 1])
        return self._rows[start:end], self._tf[start:end]

    def __getitem__(self, lexeme: str) -> tuple[np.ndarray, np.ndarray]:
        key = lexeme.encode()
        i = bisect.bisect_left(range(len(self)), key, key=self._word)
        if i == len(self) or self._word(i) != key:
            raise KeyError(lexeme)
        return self._slice(i)

    def __iter__(self) -> Iterator[str]:
        return (self._word(i).decode() for i in range(len(self)))

    def __len__(self) -> int:
        return len(self._word_starts) - 1

    def items(self) -> Iterator[tuple[str, tuple[np.ndarray, np.ndarray]]]:  # type: ignore[override]
        # Every posting (a merge's): read whole once, not a read per lexeme.
        rows, tf, starts = np.asarray(self._rows), np.asarray(self._tf), self._starts
        for i in range(len(self)):
            start, end = int(starts[i]), int(starts[i + 1])
            yield self._word(i).decode(), (rows[start:end], tf[start:end])


def base_file(folder: Path, store: str) -> Path:
    """The store's base file: all its chunks as of the last merge into one."""
    return folder / f"{store}.postings"


def segment_file(folder: Path, store: str) -> Path:
    """A new, unused name for a segment file of the store."""
    return folder / f"{store}.{uuid.uuid4().hex}.postings"


def files(folder: Path, store: str) -> list[Path]:
    """The store's files: its base first (when there is one), then its segment files by name."""
    base = base_file(folder, store)
    try:
        segments = sorted(p for p in folder.glob(f"{store}.*.postings") if p != base)
    except OSError:
        return []
    return ([base] if base.exists() else []) + segments


def record_file(folder: Path, store: str) -> Path:
    """Where the files' record is kept: what they hold as of which generation."""
    return folder / f"{store}.live.json"


def write_record(
    folder: Path, store: str, generation: int, held: Mapping[str, int], dead: np.ndarray
) -> None:
    """Record that the store at `generation` is what the files named in `held` (with their
    sizes) hold, less the chunk ids `dead`; atomically, as the files are written."""
    path = record_file(folder, store)
    body = json.dumps({"generation": generation, "files": dict(held), "dead": dead.tolist()})
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(body)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_record(folder: Path, store: str) -> tuple[int, dict[str, int], np.ndarray] | None:
    """The generation, files (name: size) and dead ids last recorded; None when there is none
    or it cannot be read."""
    try:
        found = json.loads(record_file(folder, store).read_text(encoding="utf-8"))
        return (
            int(found["generation"]),
            {str(k): int(v) for k, v in found["files"].items()},
            np.array(found["dead"], dtype=np.int64),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def lock(folder: Path, store: str, wait: bool) -> BinaryIO | None:
    """The store's writers' lock, held until the file returned is closed; None while another
    process holds it, unless `wait`. Only its holder writes or deletes the store's files."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = (folder / f".{store}.lock").open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        handle.close()
        return None
    return handle


def delete_all(folder: Path) -> int:
    """Every store's files in `folder` deleted (`librarian forget`), each store's while holding
    its writers' lock: a writer that read the store before the forget finishes first, and its
    files go too; one after reads the store without what was forgotten. How many were."""
    deleted = 0
    stores = {p.name.split(".")[0] for p in folder.glob("*.postings")}
    for store in sorted(stores):
        held = lock(folder, store, wait=True)
        try:
            for path in files(folder, store):
                path.unlink(missing_ok=True)
                deleted += 1
            record_file(folder, store).unlink(missing_ok=True)
        finally:
            if held is not None:
                held.close()
    return deleted


def write(
    path: Path,
    store: str,
    rows: Mapping[str, np.ndarray],
    postings: PackedPostings,
    sessions: list[str],
    models: list[str],
) -> None:
    """Write one segment's rows and postings for `store`, atomically (a temporary file renamed)."""
    arrays: dict[str, np.ndarray | FileArray] = {
        **{name: rows[name] for name in ROW_ARRAYS},
        **postings.arrays(),
    }
    layout: dict[str, tuple[str, int, int]] = {}
    offset = 0
    for name, array in arrays.items():
        layout[name] = (array.dtype.str, offset, len(array))
        offset += _aligned(array.nbytes)
    header = json.dumps(
        {"store": store, "sessions": sessions, "models": models, "arrays": layout}
    ).encode()
    base = _aligned(16 + len(header))
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(_MAGIC + len(header).to_bytes(8, "little") + header)
            for name, array in arrays.items():
                out.seek(base + layout[name][1])
                out.write(np.ascontiguousarray(array).tobytes())
            out.truncate(base + offset)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read(
    path: Path, store: str
) -> tuple[dict[str, np.ndarray], PackedPostings, list[str], list[str]] | None:
    """The rows, postings and names written for `store`, mapped from the file; None when there
    is no file, it is another store's, or it cannot be read whole (then it is rewritten)."""
    try:
        with path.open("rb") as source:
            start = source.read(16)
            if len(start) < 16 or start[:8] != _MAGIC:
                return None
            length = int.from_bytes(start[8:], "little")
            header: dict[str, Any] = json.loads(source.read(length))
        if header.get("store") != store:
            return None
        base = _aligned(16 + length)
        size = path.stat().st_size
        arrays: dict[str, np.ndarray] = {}
        read_by_slice: dict[str, FileArray] = {}
        handle = path.open("rb")  # the slices' reads: closed with the last array that reads it
        for name, (dtype, offset, count) in header["arrays"].items():
            kind = np.dtype(dtype)
            if base + offset + count * kind.itemsize > size:
                handle.close()
                return None
            if name in _READ_BY_SLICE:
                read_by_slice[name] = FileArray(handle, kind, base + offset, count)
                continue
            # Plain arrays over the map (the map lives as long as they do): numpy's memmap
            # class costs microseconds a slice, and a lookup slices twenty times.
            arrays[name] = (
                np.memmap(path, dtype=kind, mode="r", offset=base + offset, shape=(count,)).view(
                    np.ndarray
                )
                if count
                else np.zeros(0, dtype=kind)
            )
        postings = PackedPostings(
            arrays["words"], arrays["word_starts"], arrays["starts"],
            read_by_slice["rows"], read_by_slice["tf"],
        )  # fmt: skip
        return arrays, postings, header["sessions"], header["models"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


_READ_BY_SLICE = ("rows", "tf")
"""The postings themselves, 8 bytes each (most of a file), read a lexeme's slice at a time."""


class FileArray:
    """A one-dimensional array in a file, read slice by slice with `pread`.

    For the postings, where a map would do: what a map's reader touched stays in its resident
    memory, so a recall server asked questions over a million chunks came to hold 315 MB of the
    file's pages beside its own 379 MB. What `pread` reads sits in the kernel's page cache,
    shared and given back under pressure, and each slice is the caller's to drop.
    """

    def __init__(self, handle: BinaryIO, dtype: np.dtype, offset: int, count: int) -> None:
        self._handle, self.dtype, self._offset, self._count = handle, dtype, offset, count

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        return self._count * self.dtype.itemsize

    def __getitem__(self, part: slice) -> np.ndarray:
        start, stop, step = part.indices(self._count)
        if step != 1:
            raise ValueError("a file array reads contiguous slices only")
        size = max(stop - start, 0) * self.dtype.itemsize
        data = os.pread(self._handle.fileno(), size, self._offset + start * self.dtype.itemsize)
        if len(data) != size:
            raise OSError(f"{self._handle.name}: {len(data)} of {size} bytes read")
        return np.frombuffer(data, dtype=self.dtype)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)


def _aligned(size: int) -> int:
    """`size` rounded up to the next multiple of _ALIGN."""
    return -(-size // _ALIGN) * _ALIGN
