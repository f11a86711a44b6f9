"""Where an ingest's time goes: each stage's wall and CPU time, Dagster's own the rest.

`StageClock.watching()` wraps the functions each stage spends its time in (the parser, the
redaction, the leak check, the digester, the chunkers, the embedder, the store's writes and
reads, the staging IO manager, the run's resources) for the span of a `with` block. Times are
exclusive: a measured call inside another (the digester reading the store) counts for the inner
one only. CPU is this process's, every thread (the embedder's batches run on a pool of them).
What the measured calls leave of the runs' wall time is Dagster's own: the run's creation
and end, its event log, the steps' bookkeeping (`dagster_split` splits it with the run and step
stats Dagster records, `DagsterInstance.get_run_stats` and `get_run_step_stats`). The embedded
PostgreSQL serves both Librarian's tables and Dagster's storage from processes of its own:
`server_cpu_seconds` reads their CPU time from /proc.
"""

import functools
import importlib
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# stage -> (module, attribute path) of what it spends its time in. A function a module imported
# by name is patched in that module (where the stage's code looks it up at call time). One the
# code does not have (another version of it) is passed over.
WATCHED: dict[str, list[tuple[str, str]]] = {
    "parse": [("librarian_dagster.defs.assets.transcript", "parse_session")],
    "redact": [("librarian_dagster.defs.assets.transcript", "redact_session")],
    "leak check": [
        ("librarian_dagster.defs.assets.transcript", "find_secrets"),
        ("librarian_dagster.defs.assets.transcript", "find_secrets_many"),
    ],
    "digest": [("librarian_dagster.core.digest.policy", "DigestPolicy.digest")],
    "chunking": [
        ("librarian_dagster.defs.assets.digest_chunks", "chunk_digest"),
        ("librarian_dagster.defs.assets.exchange_chunks", "chunk_exchanges"),
    ],
    "embedding": [("librarian_dagster.core.models.minilm", "LocalMiniLMEmbedder.embed_documents")],
    "store write": [("librarian_dagster.core.store.memories", "Memories.replace_memory")],
    "bm25 postings": [("librarian_dagster.core.recall.search", "Search.keep_postings")],
    "store reads": [
        ("librarian_dagster.core.store.memories", f"Memories.{name}")
        for name in ("stored_vectors", "memory_record", "top_tags")
    ]
    + [
        ("librarian_dagster.core.store.ledger", f"Ledger.{name}")
        for name in (
            "session_source",
            "skip_list",
            "known_cwds",
            "nothing_to_remember",
            "deferred",
            "record_nothing_to_remember",
            "tokens_spent_today",
            "record_usage",
            "clear_deferral",
        )
    ],
    "staging write": [("librarian_dagster.defs.staging", "StagingIOManager.handle_output")],
    "staging read": [("librarian_dagster.defs.staging", "StagingIOManager.load_input")],
    "resources": [
        ("librarian_dagster.defs.resources", "StoreResource.setup_for_execution"),
        ("librarian_dagster.defs.resources", "StoreResource.teardown_after_execution"),
    ],
}


@dataclass
class _Frame:
    stage: str
    wall: float
    cpu: float
    inner_wall: float = 0.0
    inner_cpu: float = 0.0


@dataclass
class StageClock:
    wall: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    _stack: list[_Frame] = field(default_factory=list)

    @contextmanager
    def watching(self) -> Iterator["StageClock"]:
        with ExitStack() as undo:
            for stage, targets in WATCHED.items():
                for module, path in targets:
                    undo.enter_context(self._patched(stage, module, path))
            yield self

    @contextmanager
    def _patched(self, stage: str, module: str, path: str) -> Iterator[None]:
        *owners, name = path.split(".")
        owner: Any = importlib.import_module(module)
        for part in owners:
            owner = getattr(owner, part)
        if name not in owner.__dict__:
            yield
            return
        original = owner.__dict__[name]
        setattr(owner, name, self._timed(stage, original))
        try:
            yield
        finally:
            setattr(owner, name, original)

    def _timed(self, stage: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            frame = _Frame(stage, time.perf_counter(), time.process_time())
            self._stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                self._stack.pop()
                wall = time.perf_counter() - frame.wall
                cpu = time.process_time() - frame.cpu
                self.wall[stage] = self.wall.get(stage, 0.0) + wall - frame.inner_wall
                self.cpu[stage] = self.cpu.get(stage, 0.0) + cpu - frame.inner_cpu
                self.calls[stage] = self.calls.get(stage, 0) + 1
                if self._stack:
                    self._stack[-1].inner_wall += wall
                    self._stack[-1].inner_cpu += cpu

        return timed


def dagster_split(instance: Any) -> dict[str, float]:
    """Wall seconds of the runs (start to end) and of their steps, from Dagster's own stats."""
    runs = steps = 0.0
    for record in instance.get_run_records():
        run_id = record.dagster_run.run_id
        stats = instance.get_run_stats(run_id)
        if stats.start_time and stats.end_time:
            runs += stats.end_time - stats.start_time
        for step in instance.get_run_step_stats(run_id):
            if step.start_time and step.end_time:
                steps += step.end_time - step.start_time
    return {"runs": runs, "steps": steps}


def server_cpu_seconds(pgdata: Path) -> float | None:
    """CPU seconds of the PostgreSQL server under `pgdata` so far: the postmaster, the backends
    it reaped and those still running. None when it cannot be read (another OS, no server)."""
    try:
        postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
        tick = _clock_ticks()
        total = 0.0
        total = _ticks(postmaster, reaped=True) / tick
        for pid in _children(postmaster):
            try:
                total += _ticks(pid, reaped=False) / tick
            except OSError:
                continue  # a backend that ended meanwhile: its time is the postmaster's now
        return total
    except (OSError, ValueError, IndexError):
        return None


def _ticks(pid: int, *, reaped: bool) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # utime, stime, cutime, cstime: fields 14-17 of proc(5), 11-14 counted after the name.
    return int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _clock_ticks() -> int:
    import os

    return os.sysconf("SC_CLK_TCK")
