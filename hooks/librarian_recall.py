"""Recall for the UserPromptSubmit hook: past sessions that bear on the prompt, or nothing.

Asks the recall server's `POST /recall` (beside /mcp) about the prompt and turns a non-empty
answer into a short context naming the sessions and their best bullets. The server decides what
is relevant (its threshold); an empty answer, and every failure, adds nothing.

The user is waiting for the prompt to go: the whole request (name lookup, connect, send, read)
runs in a daemon thread that we wait for at most `LIBRARIAN_RECALL_TIMEOUT_MS`. Per-socket
timeouts alone would not bound it: a server that trickles bytes resets them on every read, and a
name lookup ignores them. Past the deadline the thread is abandoned and dies with the process.

Each session is named with its dates, branch and the files it changed, and with its agent when
that is not Claude Code (whose hook this is): "Codex session ...". For the sessions of this
repository, git (a subprocess, within what is left of the same deadline) says how many of those
files changed since the session ended, and in how many commits: a memory of code that has moved
on is marked, not trusted blindly. Outside a repository, or past the deadline, nothing is said.

The request says where the prompt comes from: the session's cwd and its git branch (read from
`.git/HEAD`, `git_branch`), so the server ranks this project's sessions, and earlier work on this
branch, first. The branch is read in the same thread, within the same deadline: a slow or hostile
file system costs the context, never the prompt.

`socket` and `threading` are imported only when a prompt is really asked about, and
`http.client` only for an https server: it costs ~32 ms under `python3 -S` (`fetch`).
"""

import json
import os
import re
import stat
import time

import librarian_hooklib as lib

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
MAX_CWD_CHARS = 4096  # the endpoint's limit; a longer cwd is not sent (it would be refused)
MAX_BRANCH_CHARS = 200  # likewise for the branch
# Folders looked at on the way up from cwd to the one holding `.git`: no checkout is deeper.
MAX_GIT_WALK = 64
# Bytes read of `.git` (a `gitdir:` file) or HEAD: a ref line is short, a path at most PATH_MAX.
MAX_GIT_READ = 4200
SHOWN_FILES = 3  # of a session's changed files, named in its context
MAX_FILES = 20  # read of an answer's list (the server sends at most this many)
# git's own time for the staleness check is bounded by what is left of the deadline, and it is
# not started with less than this left: a check cut short says nothing, at the price of a process.
MIN_GIT_MS = 40
MAX_GIT_COMMITS = 1000  # commits read since a session ended: enough to say "1000+"
OFF = ("off", "0", "false", "no")
# How people name each agent: a copy of core/capture/readers.py's LABELS (a test keeps them
# equal), since importing the readers would cost every prompt their import.
AGENT_LABELS = {
    "claude-code": "Claude Code",
    "codex": "Codex",
    "gemini": "Gemini CLI",
    "opencode": "OpenCode",
    "copilot": "Copilot CLI",
    "pi": "Pi",
}
HOME_AGENT = "claude-code"
"""The agent whose plugin these hooks are: its sessions are named plainly, "session ...".
Another agent's configuration names its own after the script (`run-hook.sh pre_tool_use.py
codex`, as `librarian connect` writes it)."""
HEADER = (
    "Librarian remembers past sessions that may bear on this prompt (from memory, possibly out "
    "of date; the MCP tool get_digest with a session_id returns the whole session):"
)


class RecallFailed(Exception):
    """The server could not be asked or gave no usable answer; the message is safe to log."""


def agent_argument(argv: list[str]) -> str:
    """The agent named after the script, else HOME_AGENT."""
    name = argv[1] if len(argv) > 1 else ""
    return name if name in AGENT_LABELS else HOME_AGENT


def event_name(event: dict, default: str) -> str:
    """The event's own name, for the output's `hookEventName`: the same scripts answer Claude
    Code's and Codex's UserPromptSubmit and PreToolUse, and Gemini CLI's BeforeAgent and
    AfterTool, which take the same output under their own names."""
    name = event.get("hook_event_name")
    if isinstance(name, str) and 0 < len(name) <= 40 and name.isalpha():
        return name
    return default


def int_env(env, name: str, default: int, low: int, high: int) -> int:
    try:
        value = int(env.get(name, default))
    except ValueError:
        value = default
    return max(low, min(high, value))


def budget_from(env) -> int:
    return int_env(env, "LIBRARIAN_RECALL_BUDGET", DEFAULT_BUDGET, MIN_BUDGET, MAX_BUDGET)


def timeout_from(env) -> float:
    """The deadline in seconds."""
    ms = int_env(
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


HOOK_CONTEXT = ("<hook_context>", "</hook_context>")


def typed(prompt):
    """The words the user typed. Gemini CLI, headless, hands BeforeAgent the prompt with the
    context of its SessionStart hooks put before it (`<hook_context>...</hook_context>\n\n`):
    that is not what the prompt asks about."""
    if not isinstance(prompt, str):
        return prompt
    opening, closing = HOOK_CONTEXT
    rest = prompt.lstrip()
    if not rest.startswith(opening):
        return prompt
    while rest.startswith(opening) and closing in rest:
        rest = rest[rest.index(closing) + len(closing) :].lstrip()
    return rest


def skip_reason(prompt) -> str | None:
    if not isinstance(prompt, str) or not prompt.strip():
        return "no prompt"
    if prompt.lstrip().startswith("/"):
        return "slash command"
    if len(prompt.split()) < MIN_WORDS:
        return "short prompt"
    return None


def _read_start(path: str) -> str | None:
    """The first MAX_GIT_READ bytes of a regular file as text; None for anything else.

    Opened without blocking and checked before reading: a FIFO or a device named HEAD must not
    hang the hook (a plain open() of a FIFO waits for a writer).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_GIT_READ)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _branch_in(head_path: str) -> str | None:
    """`ref: refs/heads/<name>` -> name; a detached or odd HEAD names no branch."""
    text = _read_start(head_path)
    if not text:
        return None
    line = text.splitlines()[0].strip()
    prefix = "ref: refs/heads/"
    if not line.startswith(prefix):
        return None
    name = line[len(prefix) :]
    # Git refuses spaces and control characters in a branch name; a HEAD with them is not git's.
    if not sendable(name, MAX_BRANCH_CHARS) or any(
        c.isspace() or not c.isprintable() for c in name
    ):
        return None
    return name


def _dotgit(cwd: str) -> tuple[str, str, int] | None:
    """The first `.git` at or above `cwd` (at most MAX_GIT_WALK folders up), as git finds it:
    (the folder holding it, its path, its mode); None where there is none. Never raises."""
    try:
        folder = os.path.abspath(cwd)
        for _ in range(MAX_GIT_WALK):
            dotgit = os.path.join(folder, ".git")
            try:
                return folder, dotgit, os.stat(dotgit).st_mode
            except OSError:
                pass
            parent = os.path.dirname(folder)
            if parent == folder:
                return None
            folder = parent
    except (OSError, ValueError):
        pass
    return None


def git_root(cwd: str) -> str | None:
    """The top folder of the checkout (or worktree) holding `cwd`, or None; never raises."""
    found = _dotgit(cwd)
    return found[0] if found else None


def _gitdir(cwd: str) -> str | None:
    """The git folder of the repository holding `cwd`, or None; never raises.

    The first `.git` above `cwd` decides, as it does for git itself: a folder, or, for a
    worktree or submodule, a file `gitdir: <path>` (relative to the folder holding it)."""
    found = _dotgit(cwd)
    if found is None:
        return None
    folder, dotgit, mode = found
    if stat.S_ISDIR(mode):
        return dotgit
    text = _read_start(dotgit) or ""
    line = text.splitlines()[0] if text else ""
    gitdir = line.removeprefix("gitdir:").strip()
    if not line.startswith("gitdir:") or not gitdir or "\0" in gitdir:
        return None
    return os.path.join(folder, gitdir)


def git_branch(cwd: str) -> str | None:
    """The branch checked out in the repository holding `cwd` (HEAD in its git folder), or
    None; never raises."""
    gitdir = _gitdir(cwd)
    return _branch_in(os.path.join(gitdir, "HEAD")) if gitdir else None


def git_remote(cwd: str) -> str | None:
    """The `origin` remote (else the first) of the repository holding `cwd`, as its git config
    says, without a user or password in it; None where there is none. Never raises.

    For a worktree, the config is the main repository's (`commondir` beside its gitdir). Sent
    with a file's history question, it tells the server a teammate's checkout of the same
    repository in a folder named otherwise."""
    gitdir = _gitdir(cwd)
    if gitdir is None:
        return None
    common = (_read_start(os.path.join(gitdir, "commondir")) or "").strip()
    if common:
        gitdir = os.path.join(gitdir, common)
    return _remote_in(_read_start(os.path.join(gitdir, "config")) or "")


def _remote_in(config: str) -> str | None:
    urls: dict[str, str] = {}
    section = ""
    for raw in config.splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
        elif section.startswith("[remote ") and line.partition("=")[0].strip() == "url":
            urls.setdefault(section, line.partition("=")[2].strip())
    url = urls.get('[remote "origin"]') or next(iter(urls.values()), None)
    if not url or not sendable(url, 400):
        return None
    # `https://user:token@host/...`: the credential stays on this machine.
    return re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", r"\1", url, flags=re.I)


def request_body(query: str, cwd: str | None) -> bytes:
    """The POST body: the query, and where it is asked from when that is known."""
    body: dict = {"query": query, "limit": LIMIT}
    if cwd:
        body["cwd"] = cwd
        branch = git_branch(cwd)
        if branch:
            body["git_branch"] = branch
    return json.dumps(body).encode("ascii")


def fetch(url: str, body: bytes, token: str, timeout_s: float) -> dict:
    """One POST; the answer as a dict. Raises RecallFailed (or OSError) on anything else.

    Plain HTTP goes over a socket written here: `http.client` costs 32 ms to import under
    `python3 -S` (the email parser and ssl it loads), a third of what a file's first Read may
    spend (docs/decisions/0033). HTTPS, to a server elsewhere, goes through `http.client`.
    """
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RecallFailed("bad url")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    if parts.scheme == "http":
        status, data = _post_plain(parts, body, headers, timeout_s)
    else:
        status, data = _post_tls(parts, body, headers, timeout_s)
    if status in (401, 403):
        raise RecallFailed(f"refused ({status})")
    if status != 200:
        raise RecallFailed(f"http {status}")
    if len(data) > MAX_RESPONSE_BYTES:
        raise RecallFailed("answer too large")
    try:
        answer = json.loads(data.decode("utf-8"))
    except ValueError:
        raise RecallFailed("answer is not JSON") from None
    if not isinstance(answer, dict):
        raise RecallFailed("answer is not an object")
    return answer


def _post_tls(parts, body: bytes, headers: dict, timeout_s: float) -> tuple[int, bytes]:
    import http.client

    conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout_s)
    try:
        conn.request("POST", parts.path or "/", body=body, headers=headers)
        response = conn.getresponse()
        return response.status, response.read(MAX_RESPONSE_BYTES + 1)
    except http.client.HTTPException as exc:  # not an HTTP server, or it hung up mid-answer
        raise RecallFailed(type(exc).__name__) from None
    finally:
        conn.close()


def _post_plain(parts, body: bytes, headers: dict, timeout_s: float) -> tuple[int, bytes]:
    """HTTP/1.1 with `Connection: close`: the answer is all the server sends before it closes."""
    import socket

    host = parts.hostname
    port = parts.port or 80
    netloc = f"[{host}]" if ":" in host else host
    lines = [f"POST {parts.path or '/'} HTTP/1.1", f"Host: {netloc}:{port}",
             f"Content-Length: {len(body)}", "Connection: close"]  # fmt: skip
    lines += [f"{name}: {value}" for name, value in headers.items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    received, size = [], 0
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(request)
        while chunk := sock.recv(65536):
            received.append(chunk)
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES + 65536:
                raise RecallFailed("answer too large")
    head, found, data = b"".join(received).partition(b"\r\n\r\n")
    status_line, *header_lines = head.split(b"\r\n")
    words = status_line.split()
    if not found or len(words) < 2 or not words[0].startswith(b"HTTP/1.") or not words[1].isdigit():
        raise RecallFailed("not an HTTP answer")
    names = {line.partition(b":")[0].strip().lower(): line.partition(b":")[2].strip()
             for line in header_lines}  # fmt: skip
    if names.get(b"transfer-encoding", b"").lower() == b"chunked":
        data = _unchunked(data)
    elif names.get(b"content-length", b"").isdigit():
        length = int(names[b"content-length"])
        if len(data) < length:
            raise RecallFailed("answer cut short")
        data = data[:length]
    return int(words[1]), data


def _unchunked(data: bytes) -> bytes:
    out, at = [], 0
    while True:
        end = data.find(b"\r\n", at)
        if end < 0:
            raise RecallFailed("answer cut short")
        try:
            size = int(data[at:end].split(b";")[0], 16)
        except ValueError:
            raise RecallFailed("not an HTTP answer") from None
        if size == 0:
            return b"".join(out)
        out.append(data[end + 2 : end + 2 + size])
        if len(out[-1]) < size:
            raise RecallFailed("answer cut short")
        at = end + 2 + size + 2


def within(timeout_s: float, work):
    """`work()`'s value, or RecallFailed("timeout") once `timeout_s` has passed: the call runs
    in a daemon thread, abandoned past the deadline (it dies with the process)."""
    import threading

    box: dict = {}

    def run() -> None:
        try:
            box["answer"] = work()
        except BaseException as exc:  # handed to the waiting thread, which decides
            box["error"] = exc

    worker = threading.Thread(target=run, name="librarian-ask", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise RecallFailed("timeout")
    if "error" in box:
        if isinstance(box["error"], TimeoutError):
            # The call's own socket deadline (the same one) can fire just before the join's:
            # either way the server did not answer in time.
            raise RecallFailed("timeout")
        raise box["error"]
    return box["answer"]


def ask(url: str, query: str, token: str, timeout_s: float, cwd: str | None = None) -> dict:
    """The branch look-up and `fetch` within a hard deadline; RecallFailed("timeout") past it."""
    return within(timeout_s, lambda: fetch(url, request_body(query, cwd), token, timeout_s))


def clean(value, limit: int = 2000) -> str:
    """One line, no control characters: a memory must not reshape the context around it."""
    if not isinstance(value, str):
        return ""
    text = " ".join(value.split())  # newlines and tabs (all whitespace) become single spaces
    return "".join(c for c in text[:limit] if c.isprintable())


def session_word(agent, person=None) -> str:
    """How a line names a session: "session" for Claude Code's, "Codex session" for another
    agent's (a name this copy does not know as it is, when it looks like a name); a teammate's
    says whose: "alice's Codex session", "alice's session"."""
    name = agent if isinstance(agent, str) else ""
    if name in AGENT_LABELS:
        word = "session" if name == HOME_AGENT else f"{AGENT_LABELS[name]} session"
    elif 0 < len(name) <= 40 and name.isascii() and name.replace("-", "").isalnum():
        word = f"{name} session"
    else:
        word = "session"
    who = clean(person, 64)
    return f"{who}'s {word}" if who and who != own_person() else word


def own_person() -> str:
    """Whose this machine's sessions are: LIBRARIAN_PERSON, else the login name (a session of
    theirs is not named for them)."""
    named = os.environ.get("LIBRARIAN_PERSON", "").strip()
    if named:
        return named
    import getpass  # only for a line that names a person: the hook's start stays as it was

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def sessions_of(answer: dict) -> list[dict]:
    """Results grouped by session, best session first; malformed entries are skipped.

    A session's lines are its `highlights` (the digest's distilled lines), never the matched
    chunk's text, which may be an exchange window (the past prompt's own words); an answer
    without highlights (an older server) gives its digest bullets instead.
    """
    results = answer.get("results")
    if not isinstance(results, list):
        raise RecallFailed("answer has no results list")
    sessions: dict[str, dict] = {}
    for item in results:
        if not isinstance(item, dict):
            continue
        sid, text = clean(item.get("session_id"), 200), clean(item.get("text"))
        if not sid or not text:
            continue
        highlights = item.get("highlights")
        session = sessions.setdefault(
            sid,
            {
                "id": sid,
                "project": clean(item.get("project"), 100),
                "agent": item.get("agent"),
                "person": item.get("person"),
                # ISO instants: the days are shown, git reads the end whole (--since).
                "started": clean(item.get("started_at"), 40),
                "ended": clean(item.get("date"), 40),
                "files": _files(item.get("files")),
                "here": item.get("context") in ("project", "branch"),
                "stale": "",
                "branch": clean(item.get("git_branch"), MAX_BRANCH_CHARS),
                "title": clean(item.get("title"), 200).replace('"', "'"),
                "summary": clean(item.get("summary"), 400),
                "bullets": [],
            },
        )
        if isinstance(highlights, list):
            lines = [clean(h, 400) for h in highlights]
        else:
            lines = [text] if item.get("section") != "exchange" else []
        for line in lines:
            if line and line != session["summary"] and line not in session["bullets"]:
                session["bullets"].append(line)
    for session in sessions.values():
        if session["files"]:
            more = len(session["files"]) - SHOWN_FILES
            session["bullets"].append(
                "files: "
                + ", ".join(session["files"][:SHOWN_FILES])
                + (f" (+{more} more)" if more > 0 else "")
            )
    return list(sessions.values())


def _files(value) -> list[str]:
    if not isinstance(value, list):
        return []
    return [n for n in (clean(v, 300) for v in value[:MAX_FILES]) if n]


def mark_stale(sessions: list[dict], cwd: str | None, deadline: float) -> None:
    """For each session of this repository that changed files: how many of them changed since it
    ended, in how many commits (`session["stale"]`). One `git log` per session, each bounded by
    what is left before `deadline` (a perf_counter time); silent on any failure."""
    if not cwd:
        return
    import subprocess

    for session in sessions:
        left = deadline - time.perf_counter()
        if not (session["here"] and session["files"] and session["ended"]):
            continue
        if left * 1000 < MIN_GIT_MS:
            return
        try:
            done = subprocess.run(
                ["git", "-C", cwd, "log", f"--since={session['ended']}",
                 f"--max-count={MAX_GIT_COMMITS}", "--format=%x1e", "--name-only",
                 "--relative", "HEAD", "--"],
                capture_output=True, timeout=left, check=False, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return
        if done.returncode != 0:
            return  # not a repository, no commit yet, no git: nothing to say
        output = done.stdout.decode("utf-8", "replace")
        commits = output.count("\x1e")
        touched = {line.strip() for line in output.splitlines()} - {"", "\x1e"}
        changed = sum(f in touched for f in session["files"])
        if commits:
            many = f"{commits}+" if commits >= MAX_GIT_COMMITS else str(commits)
            session["stale"] = (
                f"{changed} of its {len(session['files'])} files changed since, {many} commits"
            )
        else:
            session["stale"] = "no commits since"


def dates(started: str, ended: str) -> str:
    """`2026-01-10 to 2026-01-11` from two ISO instants, one day when they share it."""
    started, ended = started[:10], ended[:10]
    return f"{started} to {ended}" if started and ended and started != ended else ended


def _head(session: dict, with_summary: bool) -> str:
    when = dates(session["started"], session["ended"])
    where = ", ".join(x for x in (session["project"], when) if x)
    if session["branch"]:
        where += (", " if where else "") + "branch " + session["branch"]
    if session["stale"]:
        where += f"; {session['stale']}"
    head = f"- {session_word(session.get('agent'), session.get('person'))} {session['id']}" + (
        f" ({where})" if where else ""
    )
    if session["title"]:
        head += f' "{session["title"]}"'
    return head + (f": {session['summary']}" if with_summary and session["summary"] else "")


def render(sessions: list[dict], budget: int) -> tuple[str | None, int]:
    """The context, at most `budget` characters, and how many sessions it names.

    Whole lines or nothing: a bullet cut in half can read as a different fact. The budget goes
    first to naming the sessions (best first), then to their summaries, then to their bullets
    one round at a time: a second session named beats a third bullet about the first.
    """
    used = len(HEADER)
    heads: list[str] = []
    for session in sessions:
        line = _head(session, False)
        if used + 1 + len(line) > budget:
            break  # later sessions are less relevant anyway
        heads.append(line)
        used += 1 + len(line)
    if not heads:
        return None, 0
    named = sessions[: len(heads)]
    for i, session in enumerate(named):
        fuller = _head(session, True)
        if used + len(fuller) - len(heads[i]) <= budget:
            used += len(fuller) - len(heads[i])
            heads[i] = fuller
    shown: list[list[str]] = [[] for _ in named]
    for row in range(max(len(s["bullets"]) for s in named)):
        for i, session in enumerate(named):
            if row < len(session["bullets"]):
                line = "  - " + session["bullets"][row]
                if used + 1 + len(line) <= budget:
                    shown[i].append(line)
                    used += 1 + len(line)
    lines = [HEADER]
    for head, bullets in zip(heads, shown, strict=True):
        lines += [head, *bullets]
    return "\n".join(lines), len(heads)


def context(event: dict, env) -> tuple[str | None, str]:
    """(text or None, outcome for the log). Never raises: recall must not cost the reminder."""
    start = time.perf_counter()
    try:
        if (env.get("LIBRARIAN_RECALL") or "").strip().lower() in OFF:
            return None, "recall off"
        prompt = typed(event.get("prompt"))
        reason = skip_reason(prompt)
        if reason or not isinstance(prompt, str):
            return None, f"recall skipped ({reason})"
        if lib.hung_lately(env):
            return None, "recall skipped (server hung lately)"
        token = env.get("LIBRARIAN_MCP_TOKEN") or ""
        cwd = event.get("cwd")
        if not isinstance(cwd, str) or not sendable(cwd, MAX_CWD_CHARS) or not os.path.isabs(cwd):
            cwd = None
        try:
            query = prompt[:MAX_QUERY_CHARS]
            timeout = timeout_from(env)
            answer = ask(recall_url(env), query, token, timeout, cwd)
            sessions = sessions_of(answer)
            mark_stale(sessions, cwd, start + timeout)
        except (RecallFailed, OSError, ValueError) as exc:
            # The exception's class and our own messages only: OS errors can carry addresses,
            # and nothing here may carry the prompt or the token.
            why = str(exc) if isinstance(exc, RecallFailed) else type(exc).__name__
            lib.count_hang(env, why == "timeout")
            return None, f"recall failed ({why}) {_ms(start)}"
        lib.count_hang(env, False)
        text, named = render(sessions, budget_from(env))
        if text is None:
            return None, f"recall nothing relevant {_ms(start)}"
        return text, f"recall added {named} sessions, {len(text)} chars {_ms(start)}"
    except Exception as exc:
        return None, f"recall error: {type(exc).__name__} {_ms(start)}"


def sendable(text, limit: int) -> bool:
    """Whether the endpoint takes `text` as it is: a refused request would cost the recall."""
    if not isinstance(text, str) or not text or len(text) > limit or "\x00" in text:
        return False
    try:
        text.encode("utf-8")  # a lone surrogate (a \ud800 escape in the event) cannot go
    except UnicodeEncodeError:
        return False
    return True


def _ms(start: float) -> str:
    return f"in {(time.perf_counter() - start) * 1000.0:.0f}ms"
