"""Shared plumbing for the Librarian hooks: run wrapper, debug log, library discovery, state, and
the breaker that leaves a hung server alone.

Standard library only, and only cheap modules at import time: every hook process pays for its
imports on every tool call (Python itself already costs 10-20 ms to start). `json` is the one
costly import every hook needs (under `python3 -S` it pulls in `re` and `enum`); its private C
parts would be faster, but we use public, documented APIs only (docs/decisions/0004).
"""

import json
import os
import sys
import time

# The library's folder name, walk-up and LIBRARIAN_PATH rule are defined once, in the module the
# importer uses too (docs/decisions/0004). The plugin folder is the repository, so its package is
# one level up; appended, not inserted, so nothing there can shadow the standard library.
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from librarian_dagster.core.library.paths import LIBRARY_DIRNAME as LIBRARY_DIRNAME
from librarian_dagster.core.library.paths import find_library as find_library

SCRATCH_NAME = ".scratch.md"
LOG_MAX_BYTES = 256 * 1024  # one rotation keeps at most about twice this on disk
STATE_MAX_AGE_S = 7 * 24 * 3600  # per-session state files older than this are swept
UNREACHABLE_S, UNREACHABLE_MAX_S = 30, 600  # a server that missed a deadline is left alone
UNREACHABLE_MARK = ".history-unreachable"  # whichever hook saw it hang (named when one did)


def log_path(env=None, agent: str | None = None) -> str:
    """LIBRARIAN_LOG; else Claude Code's hooks log to ~/.claude/librarian.log, where the design
    says to look, and another agent's (`agent`) to a file of its own outside ~/.claude:
    $XDG_STATE_HOME (~/.local/state)/librarian/AGENT.log."""
    env = os.environ if env is None else env
    if env.get("LIBRARIAN_LOG"):
        return env["LIBRARIAN_LOG"]
    if agent is None or agent == "claude-code":
        return os.path.join(os.path.expanduser("~"), ".claude", "librarian.log")
    state = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "librarian", agent + ".log")


def log_line(hook: str, outcome: str, ms: float, env=None, agent: str | None = None) -> None:
    """Append one line (hook, outcome, milliseconds); never raises: a log must not break a hook."""
    try:
        path = log_path(env, agent)
        if os.path.exists(path) and os.stat(path).st_size > LOG_MAX_BYTES:
            os.replace(path, path + ".1")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        # One write() of a short line in append mode: concurrent hooks do not interleave mid-line.
        line = f"{stamp} {hook} {ms:.1f}ms {outcome}".replace("\n", " ")[:1000] + "\n"
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)
    except Exception:
        pass


def run(hook: str, handle, agent: str | None = None) -> int:
    """Read the event, call `handle(event) -> (output | None, outcome)`, print, log (`agent`'s
    log, log_path); always exit 0. Output is serialised before anything is printed, so an
    internal error leaves stdout empty and the agent carries on as if the hook were not there."""
    start = time.perf_counter()
    try:
        event = json.loads(sys.stdin.buffer.read().decode("utf-8", errors="replace") or "{}")
        if not isinstance(event, dict):
            raise ValueError("hook input is not a JSON object")
        output, outcome = handle(event)
        # ASCII-only (json's default): no console code page on Windows can garble it.
        text = json.dumps(output) if output else ""
    except BaseException as exc:  # the session must survive anything we do
        detail = "" if isinstance(exc, KeyboardInterrupt | SystemExit) else f": {str(exc)[:200]}"
        outcome, text = f"error: {type(exc).__name__}{detail}", ""
    if text:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except Exception:
            outcome += " (stdout failed)"
    log_line(hook, outcome, (time.perf_counter() - start) * 1000.0, agent=agent)
    return 0


def event_cwd(event: dict, env=None) -> str:
    env = os.environ if env is None else env
    return os.path.abspath(event.get("cwd") or env.get("CLAUDE_PROJECT_DIR") or os.getcwd())


def state_dir(env=None) -> str:
    """LIBRARIAN_STATE_DIR; else under CLAUDE_PLUGIN_DATA, which survives plugin updates
    (CLAUDE_PLUGIN_ROOT does not); else ~/.claude/librarian/state."""
    env = os.environ if env is None else env
    if env.get("LIBRARIAN_STATE_DIR"):
        return env["LIBRARIAN_STATE_DIR"]
    if env.get("CLAUDE_PLUGIN_DATA"):
        return os.path.join(env["CLAUDE_PLUGIN_DATA"], "state")
    return os.path.join(os.path.expanduser("~"), ".claude", "librarian", "state")


def session_key(session_id) -> str:
    """A file-name-safe key for a session id (they are UUIDs, but we do not trust stdin)."""
    sid = str(session_id or "")
    if sid and len(sid) <= 100 and all(c.isalnum() or c in "-_" for c in sid):
        return sid
    import hashlib  # only for odd ids; keeps the common path's imports minimal

    return "h" + hashlib.sha256(sid.encode("utf-8", "replace")).hexdigest()[:32]


def prune_state(directory: str, now: float) -> None:
    """Remove week-old state files, at most once a day (a stamp file records the last sweep)."""
    stamp = os.path.join(directory, ".last-prune")
    try:
        if os.path.exists(stamp) and now - os.stat(stamp).st_mtime < 24 * 3600:
            return
        open(stamp, "w").close()
        for entry in os.scandir(directory):
            if entry.name != ".last-prune" and now - entry.stat().st_mtime > STATE_MAX_AGE_S:
                os.remove(entry.path)
    except OSError:
        pass  # swept again another day


def open_session_state(event: dict, suffix: str, env=None) -> str | None:
    """The state-file path for this session (None without a session id). The first time a
    session is seen, old state files are swept, so the folder stays small."""
    if not event.get("session_id"):
        return None
    directory = state_dir(env)
    path = os.path.join(directory, session_key(event["session_id"]) + suffix)
    if not os.path.exists(path):
        os.makedirs(directory, exist_ok=True)
        prune_state(directory, time.time())
    return path


def first_time(marker: str | None) -> bool:
    """Whether `marker` (a state file; None without a session) was not there and now is: taken
    with O_EXCL, so that two racing hooks cannot both take it. Where no state can be kept, every
    time is the first: better twice than never."""
    try:
        if marker is not None:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:
        pass
    return True


def _hangs(env) -> tuple[int, float, str]:
    """Deadlines missed in a row, when the last was (0, 0.0 when none), and the mark's path."""
    path = os.path.join(state_dir(env), UNREACHABLE_MARK)
    try:
        with open(path, encoding="ascii") as fh:
            return int(fh.read(20) or 0), os.stat(path).st_mtime, path
    except (OSError, ValueError):
        return 0, 0.0, path


def left_alone_s(count: int) -> float:
    """How long a server that missed `count` deadlines in a row is left alone: a breaker with
    backoff (30 s, 1, 2, 4, 8 min, then 10), so one that keeps hanging costs a deadline per
    window. One that is down refuses at once and never trips it."""
    return min(UNREACHABLE_S * 2 ** min(count - 1, 10), UNREACHABLE_MAX_S) if count > 0 else 0.0


def hung_lately(env) -> bool:
    """Whether the recall server missed its last deadline within its window (a file's stat);
    after it, one hook asks again, and its answer clears the mark."""
    count, when, _ = _hangs(env)
    return time.time() - when < left_alone_s(count)


def count_hang(env, hung: bool) -> None:
    """One more deadline missed, or none (an answer, or a failure that came at once)."""
    count, _, path = _hangs(env)
    try:
        if hung:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="ascii") as fh:  # a torn read counts as none
                fh.write(str(count + 1))
        elif os.path.exists(path):
            os.remove(path)
    except OSError:
        pass
