"""Ingest the dev corpus with the offline providers, through the same Dagster assets as the CLI.

Prints sessions/s, MB/s, peak memory, and where the time went. Usage:

    uv run python benchmarks/ingest.py [--home DIR] [--limit N]

--home keeps the ingested memory (benchmarks/recall.py can then score it); by default a
temporary home is used and removed. The embedded PostgreSQL runs in its own process: its memory
is not in the peak figure, which is this (Python) process's maximum resident set.
"""

import argparse
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _corpus import unpack_corpus

from librarian_dagster.core.database import release_embedded_server
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.transcripts import session_files_for
from librarian_dagster.ingest import ingest_sessions, open_instance


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="keep the result here (default: a temp folder)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N sessions")
    args = parser.parse_args()

    corpus = unpack_corpus()
    sessions = sorted(session_files_for([corpus]), key=lambda s: s.session_id)
    if args.limit:
        sessions = sessions[: args.limit]
    size = sum(p.stat().st_size for s in sessions for p in s.paths)
    largest = max(p.stat().st_size for s in sessions for p in s.paths)

    home = args.home or Path(tempfile.mkdtemp(prefix="librarian-bench-"))
    settings = Settings.from_env({"LIBRARIAN_HOME": str(home), "LIBRARIAN_MIRROR": str(corpus)})
    instance = open_instance(settings)
    started = time.perf_counter()
    outcomes = ingest_sessions(sessions, settings, instance)
    elapsed = time.perf_counter() - started
    instance.dispose()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    by_status: dict[str, int] = {}
    for o in outcomes:
        by_status[o.status] = by_status.get(o.status, 0) + 1
    per_session = [o.seconds for o in outcomes]
    chunks = sum(o.chunks for o in outcomes)
    print(
        f"sessions:        {len(outcomes)} ({', '.join(f'{n} {s}' for s, n in by_status.items())})"
    )
    print(f"input:           {size / 1e6:.1f} MB, largest file {largest / 1e6:.1f} MB")
    print(f"chunks:          {chunks}")
    print(f"wall time:       {elapsed:.1f} s")
    rate = f"{len(outcomes) / elapsed:.2f} sessions/s, {size / 1e6 / elapsed:.2f} MB/s"
    print(f"throughput:      {rate}")
    print(
        f"per session:     median {statistics.median(per_session):.2f} s, "
        f"max {max(per_session):.2f} s"
    )
    print(f"peak memory:     {peak_mb:.0f} MB (this process; PostgreSQL not included)")
    for o in outcomes:
        if o.status == "failed":
            print(f"FAILED {o.session_id}: {o.detail}")
    if args.home is None:
        release_embedded_server(settings)
        shutil.rmtree(home, ignore_errors=True)
    else:
        print(f"memory kept in:  {home}")
    return 1 if by_status.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main())
