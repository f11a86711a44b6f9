"""Ingest the dev corpus with the offline providers, through the same Dagster assets as the CLI.

A fresh backfill of the corpus twice in one go, each into a home of its own: one session per run
(what the sensor does for a session that settles) and many sessions per run (`librarian ingest`,
`librarian backfill` and UI backfills, docs/decisions/0014). Prints sessions/s, MB/s, peak memory
and the machine's load (it is shared: a busy machine makes both slower), and beside it the
embedding-only floor: the same chunks embedded alone, in the same process, right after (the
encoder is the work no ingest can skip). Ends with one JSON line of the last mode: `sessions`,
`memories`, `seconds`, `sessions_per_s`, `embedding_floor_sessions_per_s`. Usage:

    uv run python benchmarks/ingest.py [--limit N] [--per-run 25] [--only single|many] [--home DIR]

--home keeps the many-per-run memory (benchmarks/recall.py can then score it); by default
temporary homes are used and removed. The embedded PostgreSQL runs in its own process: its memory
is not in the peak figure, which is this (Python) process's maximum resident set.
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _corpus import unpack_corpus
from _results import add_record_option, record
from _stages import StageClock, dagster_split, server_cpu_seconds

from librarian_dagster.core.assembly.store import open_store
from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.database import release_embedded_server
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.defs.partitions import SESSIONS_PER_RUN
from librarian_dagster.ingest import ingest_sessions, open_instance


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="keep the many-per-run result here")
    parser.add_argument("--limit", type=int, default=0, help="only the first N sessions")
    parser.add_argument("--per-run", type=int, default=SESSIONS_PER_RUN)
    parser.add_argument("--only", choices=("single", "many"), help="run one of the two modes")
    add_record_option(parser)
    args = parser.parse_args()

    corpus = unpack_corpus()
    sessions = sorted(session_files_for([corpus]), key=lambda s: s.session_id)
    if args.limit:
        sessions = sessions[: args.limit]
    size = sum(p.stat().st_size for s in sessions for p in s.paths)
    largest = max(p.stat().st_size for s in sessions for p in s.paths)
    print(f"corpus:          {len(sessions)} sessions, {size / 1e6:.1f} MB, "
          f"largest file {largest / 1e6:.1f} MB")  # fmt: skip

    modes = [("one session per run", 1, None), (f"{args.per_run} per run", args.per_run, args.home)]
    if args.only:
        modes = [modes[0] if args.only == "single" else modes[1]]
    failed = 0
    figures: list[dict[str, Any]] = []
    for label, per_run, keep in modes:
        figure, failures = _backfill(label, sessions, corpus, per_run, size, keep)
        figures.append(figure)
        failed += failures
    if len(figures) == 2:
        ratio = figures[1]["sessions_per_s"] / figures[0]["sessions_per_s"]
        print(f"\nmany per run / one per run: {ratio:.1f}x")
    print(json.dumps(figures[-1]))
    if args.record:
        last = figures[-1]
        record("ingest", {
            "mode": modes[-1][0], "sessions": last["sessions"], "chunks": last["chunks"],
            "failed": failed, "s": last["seconds"], "sessions/s": last["sessions_per_s"],
            "floor sessions/s": last["embedding_floor_sessions_per_s"],
            "of floor": f"{last['of_floor']:.0%}",
        })  # fmt: skip
    return 1 if failed else 0


def _backfill(
    label: str,
    sessions: list[SessionFiles],
    corpus: Path,
    per_run: int,
    size: int,
    keep: Path | None,
) -> tuple[dict[str, Any], int]:
    home = keep or Path(tempfile.mkdtemp(prefix="librarian-bench-"))
    settings = Settings.from_env({"LIBRARIAN_HOME": str(home), "LIBRARIAN_MIRROR": str(corpus)})
    instance = open_instance(settings)
    load_before = os.getloadavg()
    server_before = server_cpu_seconds(settings.pgdata)
    cpu_before = time.process_time()
    started = time.perf_counter()
    with StageClock().watching() as clock:
        outcomes = ingest_sessions(sessions, settings, instance, per_run=per_run)
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    server_after = server_cpu_seconds(settings.pgdata)
    server = None if server_before is None or server_after is None else server_after - server_before
    load_after = os.getloadavg()
    runs = len(instance.get_run_records())
    split = dagster_split(instance)
    dispose_instance(instance)
    with open_store(settings) as store:
        stats = store.memories.stats()
        with store.database.connection() as conn:
            texts = [r["text"] for r in conn.execute("SELECT text FROM indexed_chunks ORDER BY id")]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    by_status: dict[str, int] = {}
    for o in outcomes:
        by_status[o.status] = by_status.get(o.status, 0) + 1
    ingested = by_status.get("ingested", 0)
    chunks = sum(o.chunks for o in outcomes)
    rate = len(outcomes) / elapsed
    print(f"\n== {label} ==")
    print(
        f"sessions:        {len(outcomes)} ({', '.join(f'{n} {s}' for s, n in by_status.items())})"
        f" in {runs} runs"
    )
    print(f"memories:        {stats.sessions} in the store for {ingested} ingested"
          f" ({'exactly one each' if stats.sessions == ingested else 'MISMATCH'}),"
          f" {stats.chunks} chunks ({chunks} reported)")  # fmt: skip
    print(f"wall time:       {elapsed:.1f} s")
    print(f"throughput:      {rate:.2f} sessions/s, {size / 1e6 / elapsed:.2f} MB/s")
    print(f"per session:     median {statistics.median(o.seconds for o in outcomes):.2f} s "
          "(a run's wall time shared by its sessions)")  # fmt: skip
    print(f"load average:    {load_before[0]:.1f} before, {load_after[0]:.1f} after "
          f"({os.cpu_count()} cores)")  # fmt: skip
    print(f"peak memory:     {peak_mb:.0f} MB (this process so far; PostgreSQL not included)")
    stages = _print_stages(clock, elapsed, cpu, server, split)
    embedding, embedding_cpu = _embedding_seconds(texts)
    floor = len(outcomes) / embedding
    print(f"embedding floor: {floor:.2f} sessions/s (its {len(texts)} chunks embedded alone in "
          f"{embedding:.1f} s, {embedding_cpu:.1f} s CPU): the ingest runs at {rate / floor:.0%} "
          f"of it; load {os.getloadavg()[0]:.1f}")  # fmt: skip
    for o in outcomes:
        if o.status == "failed":
            print(f"FAILED {o.session_id}: {o.detail}")
    if keep is None:
        release_embedded_server(settings)
        shutil.rmtree(home, ignore_errors=True)
    else:
        print(f"memory kept in:  {home}")
    mismatch = stats.sessions != ingested
    figure = {
        "sessions": len(outcomes),
        "memories": stats.sessions,
        "chunks": stats.chunks,
        "seconds": round(elapsed, 1),
        "sessions_per_s": round(rate, 3),
        "embedding_floor_sessions_per_s": round(floor, 3),
        "of_floor": round(rate / floor, 3),
        "cpu_seconds": round(cpu, 1),
        "server_cpu_seconds": None if server is None else round(server, 1),
        "floor_cpu_seconds": round(embedding_cpu, 1),
        "load": [round(load_before[0], 1), round(load_after[0], 1)],
        "stages": stages,
    }
    return figure, by_status.get("failed", 0) + int(mismatch)


def _print_stages(
    clock: StageClock, elapsed: float, cpu: float, server: float | None, split: dict[str, float]
) -> dict[str, dict[str, float]]:
    """Each stage's wall and CPU seconds, and what is left of them: Dagster's own."""
    measured_wall, measured_cpu = sum(clock.wall.values()), sum(clock.cpu.values())
    rows = {s: (clock.wall[s], clock.cpu[s]) for s in sorted(clock.wall, key=clock.wall.get)[::-1]}
    rest_wall, rest_cpu = elapsed - measured_wall, cpu - measured_cpu
    # Outside the runs: creating each (and its planned events), reading its result; inside, what
    # the steps' compute left: events, step start and end, inputs and outputs handled.
    rows["dagster: outside runs"] = (elapsed - split["runs"], None)
    rows["dagster: in runs"] = (rest_wall - (elapsed - split["runs"]), None)
    rows["dagster (all)"] = (rest_wall, rest_cpu)
    print("by stage:        wall s (share)   CPU s (share): this process, all its threads")
    for stage, (wall, stage_cpu) in rows.items():
        cpu_text = "" if stage_cpu is None else f"{stage_cpu:7.1f} ({stage_cpu / cpu:4.0%})"
        print(f"  {stage:22} {wall:7.1f} ({wall / elapsed:4.0%})  {cpu_text}")
    server_text = "?" if server is None else f"{server:.1f}"
    print(f"  {'total':22} {elapsed:7.1f}          {cpu:7.1f}   (+ PostgreSQL: "
          f"{server_text} s CPU, Librarian's and Dagster's)")  # fmt: skip
    return {
        s: {"wall": round(w, 2), "cpu": None if c is None else round(c, 2)}
        for s, (w, c) in rows.items()
    }


def _embedding_seconds(texts: list[str]) -> tuple[float, float]:
    """How long the configured local embedder takes for these texts alone, as the stage batches
    them (a session's chunks at a time is what the stage does; all at once is the floor)."""
    from librarian_dagster.core.models.minilm import local_embedder

    embedder = local_embedder()
    embedder.embed_documents(texts[:8])  # loaded already by the ingest; warm either way
    started, cpu = time.perf_counter(), time.process_time()
    embedder.embed_documents(texts)
    return time.perf_counter() - started, time.process_time() - cpu


if __name__ == "__main__":
    sys.exit(main())
