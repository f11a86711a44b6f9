"""Shared plumbing for the Librarian hooks: run wrapper, debug log, library discovery, state.

Standard library only, and only cheap modules at import time: every hook process pays for its
imports on every tool call (Python itself already costs 10-20 ms to start). Modules that only the
Stop hook needs live in `librarian_routing.py`. `json` is the one costly import every hook needs
(under `python3 -S` it pulls in `re` and `enum`); its private C parts would be faster, but we use
public, documented APIs only (numbers in docs/decisions/0004).
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

# Bounded debug log: one rotation keeps at most about twice this on disk.
LOG_MAX_BYTES = 256 * 1024
# Per-session state files older than this are swept when a new session starts.
STATE_MAX_AGE_S = 7 * 24 * 3600


def log_path(env=None, agent: str | None = None) -> str:
    """LIBRARIAN_LOG; else Claude Code's hooks log to ~/.claude/librarian.log, where the design
    says to look, and another agent's (`agent`) to a file of its own outside ~/.claude:
    $XDG_STATE_HOME (~/.local/state)/librarian/AGENT.log."""
    env = os.environ if env is None else env
    explicit = env.get("LIBRARIAN_LOG")
    if explicit:
        return explicit
    if agent is None or agent == "claude-code":
        return os.path.join(os.path.expanduser("~"), ".claude", "librarian.log")
    state = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "librarian", agent + ".log")


def log_line(hook: str, outcome: str, ms: float, env=None, agent: str | None = None) -> None:
    """Append one line (hook, outcome, milliseconds); never raises: a log must not break a hook."""
    try:
        path = log_path(env, agent)
        try:
            if os.stat(path).st_size > LOG_MAX_BYTES:
                os.replace(path, path + ".1")
        except OSError:
            pass
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        # One write() of a short line in append mode: concurrent hooks do not interleave mid-line.
        line = f"{stamp} {hook} {ms:.1f}ms {outcome}".replace("\n", " ")[:1000] + "\n"
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line)
    except Exception:
        pass


def read_event() -> dict:
    raw = sys.stdin.buffer.read()
    event = json.loads(raw.decode("utf-8", errors="replace") or "{}")
    if not isinstance(event, dict):
        raise ValueError("hook input is not a JSON object")
    return event


def run(hook: str, handle, agent: str | None = None) -> int:
    """Read the event, call `handle(event) -> (output | None, outcome)`, print, log (`agent`'s
    log, log_path); always exit 0.

    Output is serialised before anything is printed, so an internal error leaves stdout empty and
    Claude Code carries on exactly as if the hook were not installed.
    """
    start = time.perf_counter()
    try:
        output, outcome = handle(read_event())
        # ASCII-only (json's default): no console code page on Windows can garble it.
        text = json.dumps(output) if output else ""
    except BaseException as exc:  # the session must survive anything we do
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            outcome = f"error: {type(exc).__name__}"
        else:
            outcome = f"error: {type(exc).__name__}: {str(exc)[:200]}"
        text = ""
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
    cwd = event.get("cwd") or env.get("CLAUDE_PROJECT_DIR") or os.getcwd()
    return os.path.abspath(cwd)


def state_dir(env=None) -> str:
    env = os.environ if env is None else env
    explicit = env.get("LIBRARIAN_STATE_DIR")
    if explicit:
        return explicit
    # CLAUDE_PLUGIN_DATA survives plugin updates; CLAUDE_PLUGIN_ROOT does not.
    plugin_data = env.get("CLAUDE_PLUGIN_DATA")
    if plugin_data:
        return os.path.join(plugin_data, "state")
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
        if now - os.stat(stamp).st_mtime < 24 * 3600:
            return
    except OSError:
        pass
    try:
        with open(stamp, "w", encoding="utf-8"):
            pass
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.name != ".last-prune" and now - entry.stat().st_mtime > STATE_MAX_AGE_S:
                os.remove(entry.path)
        except OSError:
            pass


UNREACHABLE_S, UNREACHABLE_MAX_S = 30, 600  # a server that missed a deadline is left alone
UNREACHABLE_MARK = ".history-unreachable"  # whichever hook saw it hang (named when one did)


def _unreachable(env) -> str:
    return os.path.join(state_dir(env), UNREACHABLE_MARK)


def _hangs(env) -> tuple[int, float]:
    """Deadlines missed in a row, and when the last was (0, 0.0 when none)."""
    path = _unreachable(env)
    try:
        with open(path, encoding="ascii") as fh:
            count = int(fh.read(20) or 0)
        return count, os.stat(path).st_mtime
    except (OSError, ValueError):
        return 0, 0.0


def left_alone_s(count: int) -> float:
    """How long a server that missed `count` deadlines in a row is left alone: a breaker with
    backoff (30 s, 1, 2, 4, 8 min, then 10), so one that keeps hanging costs a deadline per
    window. One that is down refuses at once and never trips it."""
    if count <= 0:
        return 0.0
    return min(UNREACHABLE_S * 2 ** min(count - 1, 10), UNREACHABLE_MAX_S)


def hung_lately(env) -> bool:
    """Whether the recall server missed its last deadline within its window (a file's stat);
    after it, one hook asks again, and its answer clears the mark."""
    count, when = _hangs(env)
    return time.time() - when < left_alone_s(count)


def count_hang(env, hung: bool) -> None:
    """One more deadline missed, or none (an answer, or a failure that came at once)."""
    path = _unreachable(env)
    try:
        if hung:
            count, _ = _hangs(env)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="ascii") as fh:  # a torn read counts as none
                fh.write(str(count + 1))
        elif os.path.exists(path):
            os.remove(path)
    except OSError:
        pass


def load_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.loads(fh.read())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_json_atomic(path: str, data: dict) -> None:
    # Write then rename: a reader (or a crash) never sees half a state file.
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(data))
    os.replace(tmp, path)


def open_session_state(event: dict, suffix: str, env=None):
    """Return the state-file path for this session (None without a session id).

    The first time a session is seen, old state files are swept, so the folder stays small.
    """
    sid = event.get("session_id")
    if not sid:
        return None
    directory = state_dir(env)
    path = os.path.join(directory, session_key(sid) + suffix)
    if not os.path.exists(path):
        os.makedirs(directory, exist_ok=True)
        prune_state(directory, time.time())
    return path
