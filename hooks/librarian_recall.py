"""Recall for the UserPromptSubmit hook: past sessions that bear on the prompt, or nothing.

Asks the recall server's `POST /recall` (beside /mcp) about the prompt and turns a non-empty
answer into a short context naming the sessions and their best bullets. The server decides what
is relevant (its threshold); an empty answer, and every failure, adds nothing.

The user is waiting for the prompt to go: the whole request (name lookup, connect, send, read)
runs in a daemon thread that we wait for at most `LIBRARIAN_RECALL_TIMEOUT_MS`. Per-socket
timeouts alone would not bound it: a server that trickles bytes resets them on every read, and a
name lookup ignores them. Past the deadline the thread is abandoned and dies with the process.

`http.client` and `threading` are imported only when a prompt is really asked about: `http.client`
costs ~20 ms under `python3 -S`, which a short prompt or a slash command should not pay.
"""

import json
import time

HOOK_PART = "recall"
DEFAULT_URL = "http://127.0.0.1:3201/recall"
DEFAULT_BUDGET = 1500
MIN_BUDGET = 200
# Claude Code spills hook output strings above 10,000 characters to a file.
MAX_BUDGET = 10000
DEFAULT_TIMEOUT_MS = 800
MIN_TIMEOUT_MS = 50
# hooks.json gives the hook 10 s; the deadline must leave the rest of it room to finish.
MAX_TIMEOUT_MS = 5000
MIN_WORDS = 4
LIMIT = 3  # chunks asked for: pushed context should be the few best, not a page of results
MAX_QUERY_CHARS = 2000  # the endpoint's limit: the start of a long prompt says what it is about
MAX_RESPONSE_BYTES = 1024 * 1024
OFF = ("off", "0", "false", "no")
HEADER = (
    "Librarian remembers past sessions that may bear on this prompt (from memory, possibly out "
    "of date; the MCP tool get_digest with a session_id returns the whole session):"
)


class RecallFailed(Exception):
    """The server could not be asked or gave no usable answer; the message is safe to log."""


def _int_env(env, name: str, default: int, low: int, high: int) -> int:
    try:
        value = int(env.get(name, default))
    except ValueError:
        value = default
    return max(low, min(high, value))


def budget_from(env) -> int:
    return _int_env(env, "LIBRARIAN_RECALL_BUDGET", DEFAULT_BUDGET, MIN_BUDGET, MAX_BUDGET)


def timeout_from(env) -> float:
    """The deadline in seconds."""
    ms = _int_env(
        env, "LIBRARIAN_RECALL_TIMEOUT_MS", DEFAULT_TIMEOUT_MS, MIN_TIMEOUT_MS, MAX_TIMEOUT_MS
    )
    return ms / 1000.0


def recall_url(env) -> str:
    """`LIBRARIAN_RECALL_URL`, else the MCP URL with its last segment `/mcp` -> `/recall`."""
    explicit = env.get("LIBRARIAN_RECALL_URL")
    if explicit:
        return explicit
    mcp = (env.get("LIBRARIAN_MCP_URL") or "").rstrip("/")
    if not mcp:
        return DEFAULT_URL
    if mcp.endswith("/mcp"):
        return mcp[: -len("/mcp")] + "/recall"
    return mcp + "/recall"  # an MCP URL with another path: the endpoint sits beside it


def skip_reason(prompt) -> str | None:
    if not isinstance(prompt, str) or not prompt.strip():
        return "no prompt"
    if prompt.lstrip().startswith("/"):
        return "slash command"
    if len(prompt.split()) < MIN_WORDS:
        return "short prompt"
    return None


def fetch(url: str, query: str, token: str, timeout_s: float) -> dict:
    """One POST; the answer as a dict. Raises RecallFailed (or OSError) on anything else."""
    import http.client
    from urllib.parse import urlsplit  # already loaded by http.client

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RecallFailed("bad url")
    make = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = make(parts.hostname, parts.port, timeout=timeout_s)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    body = json.dumps({"query": query, "limit": LIMIT}).encode("ascii")
    try:
        conn.request("POST", parts.path or "/", body=body, headers=headers)
        response = conn.getresponse()
        data = response.read(MAX_RESPONSE_BYTES + 1)
    except http.client.HTTPException as exc:  # not an HTTP server, or it hung up mid-answer
        raise RecallFailed(type(exc).__name__) from None
    finally:
        conn.close()
    if response.status in (401, 403):
        raise RecallFailed(f"refused ({response.status})")
    if response.status != 200:
        raise RecallFailed(f"http {response.status}")
    if len(data) > MAX_RESPONSE_BYTES:
        raise RecallFailed("answer too large")
    try:
        answer = json.loads(data.decode("utf-8"))
    except ValueError:
        raise RecallFailed("answer is not JSON") from None
    if not isinstance(answer, dict):
        raise RecallFailed("answer is not an object")
    return answer


def ask(url: str, query: str, token: str, timeout_s: float) -> dict:
    """`fetch` within a hard deadline; raises RecallFailed("timeout") past it."""
    import threading

    box: dict = {}

    def work() -> None:
        try:
            box["answer"] = fetch(url, query, token, timeout_s)
        except BaseException as exc:  # handed to the waiting thread, which decides
            box["error"] = exc

    worker = threading.Thread(target=work, name="librarian-recall", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise RecallFailed("timeout")
    if "error" in box:
        raise box["error"]
    return box["answer"]


def _clean(value, limit: int = 2000) -> str:
    """One line, no control characters: a memory must not reshape the context around it."""
    if not isinstance(value, str):
        return ""
    text = " ".join(value.split())  # newlines and tabs (all whitespace) become single spaces
    return "".join(c for c in text[:limit] if c.isprintable())


def sessions_of(answer: dict) -> list[dict]:
    """Results grouped by session, best session first; malformed entries are skipped."""
    results = answer.get("results")
    if not isinstance(results, list):
        raise RecallFailed("answer has no results list")
    sessions: dict[str, dict] = {}
    for item in results:
        if not isinstance(item, dict):
            continue
        sid, text = _clean(item.get("session_id"), 200), _clean(item.get("text"))
        if not sid or not text:
            continue
        session = sessions.setdefault(
            sid,
            {
                "id": sid,
                "project": _clean(item.get("project"), 100),
                "date": _clean(item.get("date"), 10),  # ISO: the day is enough
                "summary": _clean(item.get("summary"), 400),
                "bullets": [],
            },
        )
        if text != session["summary"] and text not in session["bullets"]:
            session["bullets"].append(text)
    return list(sessions.values())


def render(sessions: list[dict], budget: int) -> tuple[str | None, int]:
    """The context, at most `budget` characters, and how many sessions it names.

    Whole lines or nothing: a bullet cut in half can read as a different fact. A session's
    line loses its summary before the session is dropped; bullets that do not fit are left out.
    """
    lines = [HEADER]
    used = len(HEADER)
    named = 0
    for session in sessions:
        where = ", ".join(x for x in (session["project"], session["date"]) if x)
        head = f"- session {session['id']}" + (f" ({where})" if where else "")
        for line in (f"{head}: {session['summary']}" if session["summary"] else head, head):
            if used + 1 + len(line) <= budget:
                lines.append(line)
                used += 1 + len(line)
                named += 1
                break
        else:
            break  # not even the bare line fits: later sessions are less relevant anyway
        for bullet in session["bullets"]:
            line = "  - " + bullet
            if used + 1 + len(line) <= budget:
                lines.append(line)
                used += 1 + len(line)
    if not named:
        return None, 0
    return "\n".join(lines), named


def context(event: dict, env) -> tuple[str | None, str]:
    """(text or None, outcome for the log). Never raises: recall must not cost the reminder."""
    start = time.perf_counter()
    try:
        if (env.get("LIBRARIAN_RECALL") or "").strip().lower() in OFF:
            return None, "recall off"
        prompt = event.get("prompt")
        reason = skip_reason(prompt)
        if reason or not isinstance(prompt, str):
            return None, f"recall skipped ({reason})"
        token = env.get("LIBRARIAN_MCP_TOKEN") or ""
        try:
            answer = ask(recall_url(env), prompt[:MAX_QUERY_CHARS], token, timeout_from(env))
            sessions = sessions_of(answer)
        except (RecallFailed, OSError, ValueError) as exc:
            # The exception's class and our own messages only: OS errors can carry addresses,
            # and nothing here may carry the prompt or the token.
            why = str(exc) if isinstance(exc, RecallFailed) else type(exc).__name__
            return None, f"recall failed ({why}) {_ms(start)}"
        text, named = render(sessions, budget_from(env))
        if text is None:
            return None, f"recall nothing relevant {_ms(start)}"
        return text, f"recall added {named} sessions, {len(text)} chars {_ms(start)}"
    except Exception as exc:
        return None, f"recall error: {type(exc).__name__} {_ms(start)}"


def _ms(start: float) -> str:
    return f"in {(time.perf_counter() - start) * 1000.0:.0f}ms"
