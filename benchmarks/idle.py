"""`librarian up` when nothing happens: the memory each of its processes holds (PSS, so a library
two processes share is counted once between them) and the CPU each uses, PostgreSQL included.

Starts `librarian up` on `--home` (a store already ingested, not in use; else a new empty one),
waits until it has started and no run has gone for `--settle` seconds, then samples every
process of `up`'s tree and the embedded PostgreSQL's for `--seconds`, and the server processes
of the connections opened and closed meanwhile (the postmaster's ended children: a client that
connects for each query pays there). Prints the figures by role (PSS in MB, CPU as a share of
one core over the window) as JSON, then as a markdown table.

    uv run python benchmarks/idle.py [--home H] [--seconds 60] [--settle 60]
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from _results import add_record_option, record

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def role(proc: psutil.Process) -> str:
    """What a process of `up` is, from its command line."""
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return "gone"
    for needle, name in (
        ("librarian_dagster.cli.main up", "librarian up"),
        (" dagster dev", "dagster dev (supervisor)"),
        ("dagster-webserver", "webserver"),
        ("dagster_webserver", "webserver"),
        ("dagster-daemon", "daemon"),
        ("dagster._daemon", "daemon"),
        ("dagster_daemon", "daemon"),
        ("api grpc", "code server"),
        ("code-server", "code server"),
        ("mcp_server", "recall server"),
        ("resource_tracker", "multiprocessing's resource tracker"),
        ("postgres", "postgresql"),
    ):
        if needle in line:
            return name
    return line[:60]


def postmaster(pgdata: Path) -> psutil.Process | None:
    try:
        return psutil.Process(int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0]))
    except (OSError, ValueError, psutil.Error):
        return None


def processes(up: psutil.Process, pgdata: Path) -> list[psutil.Process]:
    found = [up, *up.children(recursive=True)]
    master = postmaster(pgdata)
    if master is not None:
        found += [master, *master.children(recursive=True)]
    return list({p.pid: p for p in found}.values())


def reaped_cpu(master: psutil.Process | None) -> float:
    """CPU seconds of the postmaster's children that have ended: a server process per
    connection, so a client that connects for each query costs here, not in its own row."""
    if master is None:
        return 0.0
    try:
        times = master.cpu_times()
    except psutil.Error:
        return 0.0
    return times.children_user + times.children_system


def runs_going(up: psutil.Process) -> bool:
    """Whether one of `up`'s processes is a run's worker (`dagster api execute_run`)."""
    try:
        return any("execute_run" in " ".join(p.cmdline()) for p in up.children(recursive=True))
    except psutil.Error:
        return True


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", type=Path, help="a LIBRARIAN_HOME not in use, to idle on")
    parser.add_argument("--mirror", type=Path, help="the mirror it watches (default: empty)")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=60.0)
    add_record_option(parser)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="librarian-idle-"))
    work.chmod(0o755)  # as root the embedded server runs as its own user
    home = args.home or work / "home"
    mirror = args.mirror or work / "mirror"
    mirror.mkdir(parents=True, exist_ok=True)
    missing = str(work / "none")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    env |= {"LIBRARIAN_HOME": str(home), "LIBRARIAN_MIRROR": str(mirror)}
    env |= {f"LIBRARIAN_{n}": missing for n in ("CODEX_SESSIONS", "GEMINI_SESSIONS",
            "OPENCODE_DATA", "COPILOT_SESSIONS", "PI_SESSIONS")}  # fmt: skip
    ui, mcp = _free_port(), _free_port()
    command = [sys.executable, "-m", "librarian_dagster.cli.main", "up", "--ui-port", str(ui),
               "--mcp-port", str(mcp)]  # fmt: skip
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 600
        for url in (f"http://127.0.0.1:{mcp}/mcp", f"http://127.0.0.1:{ui}/server_info"):
            while True:
                assert proc.poll() is None and time.monotonic() < deadline, "up did not start"
                try:
                    httpx.get(url, timeout=2)
                    break
                except httpx.HTTPError:
                    time.sleep(1)
        up = psutil.Process(proc.pid)
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < args.settle:
            if runs_going(up):
                quiet_since = time.monotonic()
            time.sleep(2)
        watched = processes(up, home / "pgdata")
        master = postmaster(home / "pgdata")
        before = {p.pid: sum(p.cpu_times()[:2]) for p in watched}
        reaped_before = reaped_cpu(master)
        time.sleep(args.seconds)
        rows: dict[str, list[float]] = {}
        # Connections opened and closed within the window: not in any process's row above.
        reaped = reaped_cpu(master) - reaped_before
        rows["postgresql, connections that came and went"] = [0, 0.0, 100 * reaped / args.seconds]
        for p in watched:
            try:
                cpu = sum(p.cpu_times()[:2]) - before[p.pid]
                pss = p.memory_full_info().pss / 2**20
            except psutil.Error:
                continue
            entry = rows.setdefault(role(p), [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += pss
            entry[2] += 100 * cpu / args.seconds
        total_pss = sum(r[1] for r in rows.values())
        total_cpu = sum(r[2] for r in rows.values())
        ordered = sorted(rows.items(), key=lambda kv: -kv[1][1])
        result = {name: {"processes": n, "pss_mb": round(m, 1), "cpu_pct": round(c, 2)}
                  for name, (n, m, c) in ordered}  # fmt: skip
        print(json.dumps({"processes": result, "total_pss_mb": round(total_pss, 1),
                          "total_cpu_pct_of_one_core": round(total_cpu, 2)}))  # fmt: skip
        print("| process | count | PSS MB | CPU % of a core |")
        print("| --- | --- | --- | --- |")
        for name, row in result.items():
            print(f"| {name} | {row['processes']} | {row['pss_mb']} | {row['cpu_pct']} |")
        print(f"| all | {sum(r[0] for r in rows.values())} | {total_pss:.1f} | {total_cpu:.2f} |")
        if args.record:
            of = {name: result.get(name, {}) for name in ("recall server", "librarian up")}
            record("idle", {
                "PSS MB": round(total_pss, 1), "CPU % of a core": round(total_cpu, 2),
                "processes": sum(r[0] for r in rows.values()),
                "recall server MB": of["recall server"].get("pss_mb", "-"),
                "librarian up MB": of["librarian up"].get("pss_mb", "-"),
            })  # fmt: skip
        return 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
