"""Faults injected into a live `librarian up` over dev sessions: how soon each is seen, how soon
it heals (or how `up` exits), what was said, and whether every session still got one memory.

A fresh LIBRARIAN_HOME, a mirror of `--sessions` dev sessions (the sensor ingests them while the
faults come), Telegram's Bot API stood in for on 127.0.0.1 (tests/telegram_fake.py). The faults,
one after the other, each once everything is healthy again:
- `postgres SIGKILL`: the embedded PostgreSQL's postmaster killed, as the OOM killer would;
- `postgres SIGSTOP 60 s`: stopped (a hang), continued after 60 s if still there;
- `mcp SIGKILL`: the recall server killed;
- `dagster daemon SIGKILL`, `dagster webserver SIGKILL`: the daemon, or the UI's webserver,
  under `librarian up` killed (each is started again alone);
- `run worker SIGKILL`: the first ingest run's worker killed as it runs (first, while the
  sensor's runs are going);
- `mirror unreadable 2 min`: a file in the mirror folder's place, then the folder back;
- last, once ingest is done, `LIBRARIAN_HOME full`: its filesystem (a 1 GB tmpfs mounted for
  the run, where this machine allows it; said and left out where not) filled to 16 MB free.
For each: seconds to the first alert (detection), seconds until everything answers again (the
recall server's `/recall`, the UI's `/server_info`, a daemon process, the database), or `up`'s
exit code and last line; the alerts' texts. Then: of the sessions in the mirror, how many have
exactly one memory once ingest is done.

    uv run python benchmarks/faults.py [--sessions 30] [--keep DIR]
"""

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import unpack_corpus  # noqa: E402
from benchmarks._results import add_record_option, record  # noqa: E402
from tests.telegram_fake import CHAT_ID, TOKEN, fake_telegram  # noqa: E402

HEAL_LIMIT_S = 180


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Live:
    """One `librarian up` and what the faults need to find in it."""

    def __init__(
        self, home: Path, mirror: Path, telegram_url: str | None, *,
        more_env: dict[str, str] | None = None, token: str | None = None,
    ) -> None:  # fmt: skip
        """`up` started on `home`; with `token`, the recall server is asked as its holder (a
        home with a token file serves only those with a token)."""
        self.home = home
        self.mirror = mirror
        self.sessions: list[Path] = []
        self.ui, self.mcp = free_port(), free_port()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        env = {k: v for k, v in os.environ.items() if not k.startswith("LIBRARIAN_")}
        env.update({"LIBRARIAN_HOME": str(home), "LIBRARIAN_MIRROR": str(mirror)})
        env.update(more_env or {})
        if telegram_url is not None:
            env.update({"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_CHAT_ID": CHAT_ID,
                        "LIBRARIAN_TELEGRAM_BASE_URL": telegram_url})  # fmt: skip
        self.env = env
        self.log = open(home.parent / "up.log", "w", encoding="utf-8")  # noqa: SIM115
        self.up = self.start()

    def start(self) -> subprocess.Popen:
        """`librarian up` on this home and these ports (again, once the last one is gone)."""
        return subprocess.Popen(
            [sys.executable, "-m", "librarian_dagster.cli.main", "up", "--ui-port", str(self.ui),
             "--mcp-port", str(self.mcp)],
            env=self.env, stdout=subprocess.DEVNULL, stderr=self.log, start_new_session=True,
        )  # fmt: skip

    def postmaster(self) -> psutil.Process:
        first = (self.home / "pgdata" / "postmaster.pid").read_text().split("\n", 1)[0]
        return psutil.Process(int(first))

    def descendants(self, word: str) -> list[psutil.Process]:
        found = []
        for p in psutil.Process(self.up.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if word in " ".join(p.cmdline()):
                    found.append(p)
        return found

    def healthy(self) -> bool:
        try:
            recall = httpx.post(
                f"http://127.0.0.1:{self.mcp}/recall",
                json={"query": "health check"},
                headers=self.headers,
                timeout=5,
            )
            ui = httpx.get(f"http://127.0.0.1:{self.ui}/server_info", timeout=5)
        except httpx.HTTPError:
            return False
        daemon = self.descendants("dagster_daemon") or self.descendants("dagster-daemon")
        return recall.status_code == 200 and ui.status_code == 200 and bool(daemon)

    def wait_healthy(self, limit: float) -> float | None:
        started = time.monotonic()
        while time.monotonic() - started < limit:
            if self.up.poll() is not None:
                return None
            if self.healthy():
                return time.monotonic() - started
            time.sleep(1)
        return None

    def last_line(self) -> str:
        self.log.flush()
        lines = (self.home.parent / "up.log").read_text(encoding="utf-8").splitlines()
        return next((line for line in reversed(lines) if line.startswith("librarian up")), "")


def kill_postgres(live: Live) -> None:
    live.postmaster().kill()


def stop_postgres(live: Live) -> None:
    postmaster = live.postmaster()
    postmaster.suspend()

    def resume() -> None:
        time.sleep(60)
        with contextlib.suppress(psutil.Error):
            postmaster.resume()

    threading.Thread(target=resume, daemon=True).start()


def kill_mcp(live: Live) -> None:
    [server] = [
        p for p in psutil.Process(live.up.pid).children() if "mcp_server" in " ".join(p.cmdline())
    ]
    server.kill()


def kill_run_worker(live: Live) -> float:
    """The sessions put in the mirror, and the first run's worker killed as it runs; returns
    when (monotonic), so that the wait for the first run is not counted as detection."""
    for source in live.sessions:
        shutil.copy2(source, live.mirror / source.name)  # their own, settled, mtimes
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        # A run's process (spawned by the code server) is the one whose compute logs a
        # `watch_orphans.py <run pid> <tail pid>` follows.
        for watcher in live.descendants("watch_orphans.py"):
            with contextlib.suppress(psutil.Error, ValueError, IndexError):
                args = watcher.cmdline()
                script = next(i for i, a in enumerate(args) if a.endswith("watch_orphans.py"))
                worker = psutil.Process(int(args[script + 1]))
                time.sleep(0.5)  # into its stages
                worker.kill()
                return time.monotonic()
        time.sleep(0.05)
    raise RuntimeError("no run started within 180 s")


def hide_mirror(live: Live) -> None:
    """The mirror made unreadable for 2 minutes: a file in its place (root reads through any
    permission bits, so chmod would not do), then the folder back."""
    mirror = Path(live.env["LIBRARIAN_MIRROR"])
    aside = mirror.with_name(mirror.name + ".aside")
    mirror.rename(aside)
    mirror.write_text("not a folder")

    def restore() -> None:
        time.sleep(120)
        mirror.unlink()
        aside.rename(mirror)

    threading.Thread(target=restore, daemon=True).start()


def kill_webserver(live: Live) -> None:
    for webserver in live.descendants("dagster_webserver") or live.descendants("dagster-webserver"):
        webserver.kill()


def kill_daemon(live: Live) -> None:
    daemons = live.descendants("dagster_daemon") or live.descendants("dagster-daemon")
    for daemon in daemons:
        daemon.kill()


FAULTS: list[tuple[str, Callable[[Live], float | None], str]] = [
    # (name, inject, a word of the alerts it should raise: others, digests and gaps, are not it)
    ("run worker SIGKILL (first run)", kill_run_worker, "failed"),
    ("postgres SIGKILL", kill_postgres, "database"),
    ("postgres SIGSTOP 60 s", stop_postgres, "database"),
    ("mcp SIGKILL", kill_mcp, "mcp exited"),
    ("dagster daemon SIGKILL", kill_daemon, "dagster daemon exited"),
    ("dagster webserver SIGKILL", kill_webserver, "dagster webserver exited"),
    ("mirror unreadable 2 min", hide_mirror, "mirror folder"),
]


def fill_home(live: Live, telegram, mounted: subprocess.CompletedProcess) -> tuple:
    """LIBRARIAN_HOME's filesystem filled to 16 MB free: `up` should say so and exit naming it."""
    name = "LIBRARIAN_HOME full"
    if mounted.returncode != 0:
        return (name, "-", f"not injected: no small filesystem here ({mounted.stderr.strip()})",
                "", "")  # fmt: skip
    said, began = len(telegram.texts), time.monotonic()
    free = shutil.disk_usage(live.home).free
    with open(live.home / "filler", "wb") as filler:
        os.posix_fallocate(filler.fileno(), 0, max(0, free - 16 * 2**20))
    detected = None
    while time.monotonic() - began < HEAL_LIMIT_S and live.up.poll() is None:
        if detected is None and any("LIBRARIAN_HOME" in t for t in telegram.texts[said:]):
            detected = time.monotonic() - began
        time.sleep(0.5)
    texts = " / ".join(t[:140] for t in telegram.texts[said:] if "LIBRARIAN_HOME" in t)
    code = live.up.poll()
    outcome = (
        f"up exited {code} after {time.monotonic() - began:.0f} s: {live.last_line()}"
        if code is not None else f"up still running after {HEAL_LIMIT_S} s"
    )  # fmt: skip
    return (name, f"{detected:.0f}" if detected is not None else "never", outcome, texts, "")


def memories_of(env: dict[str, str], session_ids: list[str]) -> int:
    done = subprocess.run(
        [sys.executable, "-c",
         "import sys; from librarian_dagster.core.settings import Settings; "
         "from librarian_dagster.core.assembly.store import open_store; "
         "s = open_store(Settings.from_env()); "
         "print(len(s.memories.remembered(sys.argv[1:]))); s.close()", *session_ids],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return int(done.stdout.strip() or -1)


def reruns_of(env: dict[str, str]) -> int:
    """Runs the incident_rerun_sensor asked for: sessions an incident had failed."""
    done = subprocess.run(
        [sys.executable, "-c",
         "import dagster as dg; from librarian_dagster.defs.monitoring import RERUN_OF_TAG; "
         "from librarian_dagster.core.settings import Settings; "
         "i = dg.DagsterInstance.from_config(str(Settings.from_env().dagster_home)); "
         "print(sum(RERUN_OF_TAG in r.dagster_run.tags for r in i.get_run_records())); "
         "i.dispose()"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return int(done.stdout.strip() or -1)


def figures(rows: list[tuple], healed_in: dict[str, float], held: str, reruns: int) -> dict:
    """The run's row: seconds to the first alert / until everything answers, of the faults the
    docs quote, how many of the faults injected were alerted, and the sessions' memories."""
    seen = {name: detected for name, detected, *_ in rows}

    def both(name: str) -> str:
        healed = f"{healed_in[name]:.0f}" if name in healed_in else "-"
        return f"{seen.get(name, '-')} / {healed}"

    injected = [s for s in seen.values() if s != "-"]
    return {
        "worker kill s": both("run worker SIGKILL (first run)"),
        "pg kill s": both("postgres SIGKILL"),
        "pg stop s": both("postgres SIGSTOP 60 s"),
        "mcp kill s": both("mcp SIGKILL"),
        "daemon kill s": both("dagster daemon SIGKILL"),
        "alerted": f"{sum(s != 'never' for s in injected)}/{len(injected)}",
        "one memory": held,
        "run again": reruns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--keep", type=Path)
    add_record_option(parser)
    args = parser.parse_args()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="faults-"))
    mirror = scratch / "mirror" / "-Users-dev-cli"
    mirror.mkdir(parents=True, exist_ok=True)
    sources = sorted(unpack_corpus().glob("*.jsonl"))[: args.sessions]
    ids = [s.stem for s in sources]
    rows = []
    healed_in: dict[str, float] = {}  # fault -> seconds from it until everything answers again
    (scratch / "home").mkdir(exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1g", "tmpfs", str(scratch / "home")],
        capture_output=True, text=True,
    )  # fmt: skip
    held = reruns = -1  # said as such if the run stops before it counts
    with fake_telegram() as telegram:
        live = Live(scratch / "home", scratch / "mirror", telegram.url)
        live.mirror, live.sessions = mirror, sources  # the first fault puts them in
        try:
            first = live.wait_healthy(300)
            print(f"up healthy after {first} s", flush=True)
            for name, inject, word in FAULTS:
                if live.up.poll() is not None:
                    rows.append((name, "-", "-", f"up had exited ({live.up.returncode})", ""))
                    continue
                said = len(telegram.texts)
                began = time.monotonic()
                began = inject(live) or began
                detected = None
                while time.monotonic() - began < HEAL_LIMIT_S and detected is None:
                    if any(word in t for t in telegram.texts[said:]):
                        detected = time.monotonic() - began
                    time.sleep(0.5)
                time.sleep(2)
                if name.startswith("mirror"):  # healthy all along: healed when it is said
                    while (
                        not any("answers again" in t for t in telegram.texts[said:])
                        and time.monotonic() - began < 240
                    ):
                        time.sleep(1)
                healed = live.wait_healthy(HEAL_LIMIT_S)
                texts = " / ".join(
                    t.replace("\n", " ")[:140] for t in telegram.texts[said:] if word in t
                )
                if live.up.poll() is not None:
                    outcome = f"up exited {live.up.returncode}: {live.last_line()}"
                elif healed is None:
                    outcome = f"not healed in {HEAL_LIMIT_S} s"
                elif name.startswith("mirror"):  # the fault itself lasts 120 s
                    outcome = f"said back {time.monotonic() - began - 120:.0f} s after restored"
                else:
                    healed_in[name] = time.monotonic() - began
                    outcome = f"healed in {healed_in[name]:.0f} s"
                seen = f"{detected:.0f}" if detected is not None else "never"
                rows.append((name, seen, outcome, texts, ""))
                print(rows[-1], flush=True)
                time.sleep(10)
            deadline = time.monotonic() + 600
            held = memories_of(live.env, ids)
            while held < len(ids) and time.monotonic() < deadline and live.up.poll() is None:
                time.sleep(10)
                held = memories_of(live.env, ids)
            reruns = reruns_of(live.env)
            rows.append(fill_home(live, telegram, mounted))
        finally:
            if live.up.poll() is None:
                live.up.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    live.up.wait(60)
            if live.up.poll() is None:
                os.killpg(live.up.pid, signal.SIGKILL)
    print("\n| fault | detected (s) | outcome | alerts |\n|---|---|---|---|")
    for name, seen, outcome, texts, _ in rows:
        print(f"| {name} | {seen} | {outcome} | {texts} |")
    print(f"\nsessions with exactly one memory: {held} of {len(ids)} in the mirror")
    print(f"sessions run again after an incident failed them: {reruns}")
    if args.record:
        record("faults", figures(rows, healed_in, f"{held}/{len(ids)}", reruns))
    if mounted.returncode == 0:
        subprocess.run(["umount", "-l", str(scratch / "home")], check=False)
    if args.keep is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
