"""What a capture-gap tick costs over the dev corpus's mirror (199 sessions), in milliseconds.

Usage (from the repository root):

    uv run python benchmarks/alerts.py [--repeat 5]

Three states of the same mirror, each evaluated `--repeat` times through the real sensor (the
embedded PostgreSQL, a Dagster instance on it, alerts to the log):
- nothing requested, nothing ingested: every session is late, and each costs a Dagster lookup
  for its `transcript` stage (the worst case);
- every session just requested by the sessions sensor: none is due yet (a first backfill);
- every session ingested (memories stand in for it): the steady state.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import unpack_corpus  # noqa: E402
from benchmarks._results import add_record_option, record  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    add_record_option(parser)
    args = parser.parse_args()

    import dagster as dg

    from librarian_dagster.core.assembly.store import open_store
    from librarian_dagster.core.capture.claude_code.files import discover_sessions
    from librarian_dagster.core.settings import Settings
    from librarian_dagster.dagster_internals import dispose_instance
    from librarian_dagster.definitions import build_definitions
    from librarian_dagster.defs.resources import build_resources
    from librarian_dagster.ingest import open_instance

    mirror = unpack_corpus()
    home = Path(tempfile.mkdtemp(prefix="librarian-bench-alerts-"))
    settings = Settings.from_env({"LIBRARIAN_HOME": str(home), "LIBRARIAN_MIRROR": str(mirror)})
    store = open_store(settings)  # left for the process's exit to close, with the rest
    instance = open_instance(settings)
    definitions = build_definitions(settings)
    sensor = definitions.resolve_sensor_def("capture_gap_alerts")
    resources = build_resources(settings)
    sessions = discover_sessions(mirror)

    def ticks(label: str) -> float:
        times, cursor, result = [], None, None
        for _ in range(args.repeat):
            started = time.perf_counter()
            with dg.build_sensor_context(
                instance=instance, cursor=cursor, definitions=definitions, resources=resources
            ) as context:
                result = sensor(context)
            times.append((time.perf_counter() - started) * 1000)
            cursor = result.cursor  # type: ignore[union-attr]
        print(
            f"{label:44} median {statistics.median(times):7.1f} ms, "
            f"min {min(times):7.1f} ms  ({result.skip_reason})"  # type: ignore[union-attr]
        )
        return round(statistics.median(times), 1)

    print(f"{len(sessions)} sessions in the mirror")
    late = ticks("nothing requested or ingested (all late)")
    store.ledger.record_sources([(s, s.fingerprint()) for s in sessions])
    requested = ticks("all requested just now (none due yet)")
    with store.database.connection() as conn, conn.transaction():
        # Memories stand in for a finished ingest: only `ingested_at` is read by the tick.
        conn.execute(
            """
            INSERT INTO memories (session_id, project, digest, digest_text, summary, domain,
                importance, content_hash, digest_version, digest_model, embedding_model)
            SELECT session_id, 'p', '{}'::jsonb, '', '', 'technical', 3, '', 1, 'm', 'e'
            FROM session_sources
            """
        )
    ingested = ticks("all ingested (steady state)")
    dispose_instance(instance)
    if args.record:
        record("alerts", {
            "sessions": len(sessions), "all late ms": late, "none due ms": requested,
            "all ingested ms": ingested,
        })  # fmt: skip


if __name__ == "__main__":
    main()
