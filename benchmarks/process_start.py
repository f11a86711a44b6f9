"""The CPU a process of ours takes to import what it runs, with the cyclic garbage collector left
on during those imports and with it off (`core.commandline.imports_uncollected`, as shipped).

Each figure is a new Python process importing one module, as the process named starts: its user
and system CPU (os.wait4), the median over `--repeat` starts, the two ways taken in turn.

    uv run python benchmarks/process_start.py [--repeat 9]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from _results import add_record_option, record

REPO = Path(__file__).resolve().parents[1]

STARTS = {
    "code server (its Dagster)": "librarian_dagster.dagster_code_server",
    "code server, run worker, ingest (the definitions)": "librarian_dagster.definitions",
    "recall server": "mcp_server.__main__",
    "Dagster's webserver": "librarian_dagster.dagster_webserver",
    "Dagster's daemon": "librarian_dagster.dagster_daemon",
}
# Each start's column in the recorded row (--record): its CPU collector on -> off.
COLUMNS = {
    "librarian_dagster.definitions": "definitions s",
    "librarian_dagster.dagster_webserver": "webserver s",
    "librarian_dagster.dagster_code_server": "code server s",
    "mcp_server.__main__": "recall server s",
    "librarian_dagster.dagster_daemon": "daemon s",
}

# The child: with `collected`, imports_uncollected made a no-op before anything imports it.
_CHILD = """
import contextlib, importlib, sys
if sys.argv[2] == "collected":
    import librarian_dagster.core.commandline as commandline
    commandline.imports_uncollected = contextlib.nullcontext
importlib.import_module(sys.argv[1])
"""


def cpu_of(module: str, way: str) -> float:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, module, way], cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"importing {module} failed")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    add_record_option(parser)
    args = parser.parse_args()
    rows = []
    for name, module in STARTS.items():
        taken: dict[str, list[float]] = {"collected": [], "uncollected": []}
        for _ in range(args.repeat):
            for way, seen in taken.items():
                seen.append(cpu_of(module, way))
        before, after = (statistics.median(taken[w]) for w in ("collected", "uncollected"))
        rows.append({"process": name, "module": module, "collected_s": round(before, 3),
                     "uncollected_s": round(after, 3),
                     "saved": round(1 - after / before, 3)})  # fmt: skip
    print(json.dumps({"python": platform.python_version(), "repeat": args.repeat, "rows": rows}))
    print("\n| process | imports | collector on | off while importing | saved |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['process']} | `{r['module']}` | {r['collected_s']:.2f} s | "
              f"{r['uncollected_s']:.2f} s | {r['saved']:.0%} |")  # fmt: skip
    if args.record:
        by_module = {r["module"]: r for r in rows}
        saved = sorted(r["saved"] for r in rows)
        record("process_start", {
            **{column: f"{by_module[m]['collected_s']:.2f} -> {by_module[m]['uncollected_s']:.2f}"
               for m, column in COLUMNS.items()},
            "saved": f"{saved[0]:.0%}-{saved[-1]:.0%}",
        })  # fmt: skip


if __name__ == "__main__":
    main()
