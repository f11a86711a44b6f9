"""What the recall server remembers, asked for any agent's hook: the past sessions that bear on a
prompt (`POST /recall`); at the first Read or edit of a file in a session, the earlier sessions
that changed it (`POST /history`). The server writes the text (core/recall/hook_text.py); this
finds what to ask with (prompt, file, cwd, branch, remote), asks within a deadline, hands it on.

The request runs in a daemon thread waited for at most the deadline (a server that trickles
bytes resets a socket's timeout, a name lookup ignores it); a server that missed one is left
alone a while (librarian_hooklib.hung_lately). Every failure adds nothing. The server's text is
untrusted: dropped over MAX_CONTEXT_CHARS, never a permission decision. `socket` and `threading`
load only to ask, `ssl` only for https: `http.client` would cost ~32 ms (docs/decisions/0033).
"""

import json
import os
import stat
import time

import librarian_hooklib as lib

DEFAULT_URL = "http://127.0.0.1:3201/recall"
MIN_TIMEOUT_MS, MAX_TIMEOUT_MS = 50, 5000  # hooks.json gives a hook 10 s
LIMIT = 3  # chunks or sessions asked for: the few best, not a page of results
MAX_PROMPT_CHARS = 8000  # the endpoint's limit; it looks up what the user typed, at most 2,000
MAX_PATH_CHARS = 4096  # the endpoint's limit for a cwd or a path; a longer one is not sent
MAX_RESPONSE_BYTES = 1024 * 1024
MAX_CONTEXT_CHARS = 10000  # Claude Code spills a longer hook output to a file
MAX_GIT_WALK = 64  # folders looked at on the way up to the one holding `.git`
MAX_GIT_READ = 4200  # bytes of `.git`, HEAD or a config read: a ref line is short
MAX_TOOL_TEXT = 8000  # a patch names its files in its headers, a command its operands
MAX_TOUCHED = 20
SEEN = "history seen"


class Failed(Exception):
    """The server could not be asked or gave no usable answer; the message is safe to log."""


def _skipped(env, what: str, *switches: str) -> str | None:
    """Why `what` is not asked at all: switched off, or the server hung lately."""
    if any((env.get(n) or "").strip().lower() in ("off", "0", "false", "no") for n in switches):
        return f"{what} off"
    return f"{what} skipped (server hung lately)" if lib.hung_lately(env) else None


def _ms(env, name: str, default: int) -> int:
    try:
        return max(MIN_TIMEOUT_MS, min(MAX_TIMEOUT_MS, int(env.get(name, default))))
    except ValueError:
        return default


def _budget(env, name: str, body: dict) -> dict:
    """The user's budget, sent as it is: the server keeps it within what a hook hands on."""
    value = (env.get(name) or "").strip()
    if value.removeprefix("-").isdigit():
        body["budget"] = int(value)
    return body


def url_of(env, name: str) -> str:
    """`/<name>` beside `LIBRARIAN_RECALL_URL`'s `/recall`, else beside the MCP URL's `/mcp`."""
    mcp = (env.get("LIBRARIAN_MCP_URL") or "").rstrip("/")
    url = env.get("LIBRARIAN_RECALL_URL") or (mcp and mcp.removesuffix("/mcp") + "/recall")
    return (url or DEFAULT_URL).rstrip("/").removesuffix("/recall") + "/" + name


def sendable(text, limit: int) -> bool:
    """Whether the endpoint takes `text` as it is: a refused request would cost the answer."""
    if not isinstance(text, str) or not 0 < len(text) <= limit or "\x00" in text:
        return False
    try:
        return bool(text.encode("utf-8"))  # a lone surrogate (a \ud800 escape) cannot go
    except UnicodeEncodeError:
        return False


def _cwd(event: dict) -> str | None:
    cwd = event.get("cwd")
    ok = isinstance(cwd, str) and sendable(cwd, MAX_PATH_CHARS) and os.path.isabs(cwd)
    return cwd if ok else None


# -- the request ---------------------------------------------------------------------------------


def ask(env, what: str, body: dict, timeout_ms: int) -> tuple[dict | None, str]:
    """(the answer or None, what happened for the log), within `timeout_ms`; never raises. A
    failure says our words or an exception's class only: never an address, prompt or token."""
    start = time.perf_counter()
    url, token, timeout = url_of(env, what), env.get("LIBRARIAN_MCP_TOKEN") or "", timeout_ms / 1e3
    try:
        data = json.dumps(body).encode("ascii")
        answer = within(timeout, lambda: fetch(url, data, token, timeout))
    except (Failed, OSError, ValueError) as exc:
        why = str(exc) if isinstance(exc, Failed) else type(exc).__name__
        lib.count_hang(env, why == "timeout")
        return None, f"failed ({why}) in {(time.perf_counter() - start) * 1e3:.0f}ms"
    lib.count_hang(env, False)
    return answer, f"in {(time.perf_counter() - start) * 1e3:.0f}ms"


def told(what: str, answer: dict, said: str) -> tuple[str | None, str]:
    """The server's text for the agent, and what it says of it, for the log."""
    text, note = answer.get("context"), answer.get("note")
    if text is not None and (not isinstance(text, str) or len(text) > MAX_CONTEXT_CHARS):
        return None, f"{what} not a context {said}"
    if text:
        return text, f"{what} added {answer.get('sessions')} sessions, {len(text)} chars {said}"
    why = f" ({note})" if isinstance(note, str) and len(note) < 200 else ""
    return None, f"{what} none{why} {said}"


def fetch(url: str, body: bytes, token: str, timeout_s: float) -> dict:
    """One POST in HTTP/1.0 over a socket written here (the answer is all the server sends
    before it closes, never chunked), TLS for https; the answer as a dict, else Failed."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, https = parts.hostname, parts.scheme == "https"
    if parts.scheme not in ("http", "https") or not host:
        raise Failed("bad url")
    port = parts.port or (443 if https else 80)
    netloc = f"[{host}]" if ":" in host else host
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = (f"POST {parts.path or '/'} HTTP/1.0\r\nHost: {netloc}:{port}\r\n"
            f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\n{auth}\r\n")  # fmt: skip
    received, size = [], 0
    sock = socket.create_connection((host, port), timeout=timeout_s)
    if https:
        import ssl  # only for a server elsewhere: its import is most of http.client's cost

        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
    with sock:
        sock.sendall(head.encode("latin-1") + body)
        while chunk := sock.recv(65536):
            received.append(chunk)
            if (size := size + len(chunk)) > MAX_RESPONSE_BYTES + 65536:
                raise Failed("answer too large")
    return _answer(b"".join(received))


def _answer(received: bytes) -> dict:
    head, found, data = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.split(b"\r\n")
    words = status_line.split()
    if not found or len(words) < 2 or not words[0].startswith(b"HTTP/1.") or not words[1].isdigit():
        raise Failed("not an HTTP answer")
    for line in header_lines:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            if len(data) < int(value):
                raise Failed("answer cut short")
            data = data[: int(value)]
    if (status := int(words[1])) != 200:
        raise Failed(f"refused ({status})" if status in (401, 403) else f"http {status}")
    try:
        answer = json.loads(data.decode("utf-8"))
    except ValueError:
        raise Failed("answer is not JSON") from None
    if not isinstance(answer, dict):
        raise Failed("answer is not an object")
    return answer


def within(timeout_s: float, work):
    """`work()`'s value, or Failed("timeout") once `timeout_s` has passed: the call runs in a
    daemon thread, abandoned past the deadline (it dies with the process)."""
    import threading

    done: list = []  # (True, the value) or (False, the exception), for the waiting thread

    def run() -> None:
        try:
            done.append((True, work()))
        except BaseException as exc:
            done.append((False, exc))

    worker = threading.Thread(target=run, name="librarian-ask", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not done or isinstance(done[0][1], TimeoutError):  # the join's deadline or the socket's
        raise Failed("timeout")
    if not done[0][0]:
        raise done[0][1]
    return done[0][1]


# -- where the question comes from: git's files, read as git reads them -------------------------


def _read_start(path: str) -> str:
    """The first MAX_GIT_READ bytes of a regular file as text, else "". Opened without
    blocking and checked before reading: a FIFO named HEAD must not hang the hook."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return ""
    try:
        return os.read(fd, MAX_GIT_READ).decode() if stat.S_ISREG(os.fstat(fd).st_mode) else ""
    except (OSError, UnicodeDecodeError):
        return ""
    finally:
        os.close(fd)


def git(cwd: str) -> tuple[str | None, str | None]:
    """The top folder of the checkout (or worktree) holding `cwd`, the first `.git` at or above it
    as git finds it, and its git folder: `.git`, or for a worktree or submodule the folder its
    `gitdir: <path>` file names (relative to the folder holding it). (None, None) outside one."""
    try:
        folder = os.path.abspath(cwd)
        for _ in range(MAX_GIT_WALK):
            dotgit = os.path.join(folder, ".git")
            if os.path.isdir(dotgit):
                return folder, dotgit
            if os.path.exists(dotgit):
                line = (_read_start(dotgit) + "\n").splitlines()[0]
                gitdir = line.removeprefix("gitdir:").strip()
                ok = line.startswith("gitdir:") and gitdir and "\0" not in gitdir
                return folder, os.path.join(folder, gitdir) if ok else None
            if os.path.dirname(folder) == folder:
                break
            folder = os.path.dirname(folder)
    except (OSError, ValueError):
        pass
    return None, None


def git_branch(gitdir: str | None) -> str | None:
    """The branch of `ref: refs/heads/<name>` in HEAD; a detached or odd HEAD names none (git
    refuses spaces and control characters in a name: a HEAD with them is not git's)."""
    head = _read_start(os.path.join(gitdir, "HEAD")) if gitdir else ""
    line = (head + "\n").splitlines()[0].strip()
    name = line.removeprefix("ref: refs/heads/")
    if name == line or not sendable(name, 200):
        return None
    return None if any(c.isspace() or not c.isprintable() for c in name) else name


def git_remote(gitdir: str | None) -> str | None:
    """The `origin` remote (else the first) in the repository's git config (a worktree's is its
    main repository's), without a user or password: with a file's history question it tells the
    server a teammate's checkout named otherwise."""
    import re

    if gitdir is None:
        return None
    common = _read_start(os.path.join(gitdir, "commondir")).strip()
    urls: dict[str, str] = {}
    section = ""
    for raw in _read_start(os.path.join(gitdir, common, "config")).splitlines():
        line = raw.strip()
        if line.startswith("["):
            section = line
        elif section.startswith("[remote ") and line.partition("=")[0].strip() == "url":
            urls.setdefault(section, line.partition("=")[2].strip())
    url = urls.get('[remote "origin"]') or next(iter(urls.values()), None)
    if not url or not sendable(url, 400):
        return None
    return re.sub(r"^([a-z][a-z0-9+.-]*://)[^/@]*@", r"\1", url, flags=re.I)


# -- the prompt, and a file's history ------------------------------------------------------------


def recall(event: dict, env) -> tuple[str | None, str]:
    """(text or None, outcome for the log) for a prompt, asked with where it comes from (its cwd
    and branch: that project's sessions, and that branch's, rank first). Never raises."""
    try:
        prompt = event.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            return None, "recall skipped (no prompt)"
        if skipped := _skipped(env, "recall", "LIBRARIAN_RECALL"):
            return None, skipped
        timeout = _ms(env, "LIBRARIAN_RECALL_TIMEOUT_MS", 800)
        body = {"prompt": prompt[:MAX_PROMPT_CHARS], "limit": LIMIT, "deadline_ms": timeout}
        if cwd := _cwd(event):
            body["cwd"] = cwd
            if branch := git_branch(git(cwd)[1]):
                body["git_branch"] = branch
        answer, said = ask(env, "recall", _budget(env, "LIBRARIAN_RECALL_BUDGET", body), timeout)
        return told("recall", answer, said) if answer is not None else (None, f"recall {said}")
    except Exception as exc:
        return None, f"recall error: {type(exc).__name__}"


def touched(event: dict, agent: str, env) -> tuple[str, list[str], str]:
    """(action, files, outcome) of a tool call that names no file (a shell command, a patch), as
    the server's reader of `agent` says (`POST /touches`); relative paths joined to the cwd."""
    try:
        if skipped := _skipped(env, "history", "LIBRARIAN_HISTORY", "LIBRARIAN_RECALL"):
            return "", [], skipped
        name, tool_input = event.get("tool_name"), event.get("tool_input")
        if not isinstance(name, str) or not isinstance(tool_input, dict):
            return "", [], "no tool call"
        shortened = {k: v[:MAX_TOOL_TEXT] if isinstance(v, str) else v
                     for k, v in tool_input.items()}  # fmt: skip
        cwd = _cwd(event)
        body = {"agent": agent, "tool_name": name[:200], "tool_input": shortened}
        timeout = _ms(env, "LIBRARIAN_HISTORY_TIMEOUT_MS", 300)
        answer, said = ask(env, "touches", {**body, "cwd": cwd} if cwd else body, timeout)
        action, paths = (answer or {}).get("action"), (answer or {}).get("paths")
        if not isinstance(action, str) or not isinstance(paths, list):
            return "", [], f"touches {said if answer is None else 'failed (no paths)'}"
        base = cwd or lib.event_cwd(event, env)
        files = [os.path.normpath(os.path.join(base, p)) for p in paths[:MAX_TOUCHED]
                 if sendable(p, MAX_PATH_CHARS)]  # fmt: skip
        return action, files, f"{action or 'nothing'} of {len(files)} files {said}"
    except Exception as exc:
        return "", [], f"touches error: {type(exc).__name__}"


def _history_body(event: dict, path: str) -> dict:
    body: dict = {"path": path, "limit": LIMIT}
    root, gitdir = git(os.path.dirname(path))
    remote = git_remote(gitdir)
    for key, value, limit in (
        ("cwd", _cwd(event), MAX_PATH_CHARS), ("root", root, MAX_PATH_CHARS),
        ("remote", remote, 400),
        # The task at hand: the server reads it from the live transcript, by the agent's
        # reader; a plugin whose agent keeps no transcript file sends the latest prompt.
        ("transcript_path", event.get("transcript_path"), MAX_PATH_CHARS),
        ("task", event.get("task"), 2000), ("subagent", event.get("agent_id"), 200),
        ("session_id", event.get("session_id"), 200),
    ):  # fmt: skip
        if sendable(value, limit):
            body[key] = value
    return body


def history(event: dict, path: str, env) -> tuple[str | None, str]:
    """(text or None, outcome for the log) for a touch of `path`. Never raises."""
    try:
        if skipped := _skipped(env, "history", "LIBRARIAN_HISTORY", "LIBRARIAN_RECALL"):
            return None, skipped
        if not sendable(path, MAX_PATH_CHARS):
            return None, "history skipped (path)"
        if f"{os.sep}{lib.LIBRARY_DIRNAME}{os.sep}" in path:
            return None, "history skipped (library note)"
        # Once per file and session, per agent: a subagent has a context of its own.
        import zlib

        state = lib.open_session_state(event, ".seen", env)
        key = f"{event.get('agent_id') or ''}\x00{path}".encode("utf-8", "replace")
        marker = f"{state}.{zlib.crc32(key):08x}{len(key):x}" if state else None
        if not lib.first_time(marker):  # two parallel Reads cannot both ask
            return None, SEEN
        timeout = _ms(env, "LIBRARIAN_HISTORY_TIMEOUT_MS", 300)
        body = _budget(env, "LIBRARIAN_HISTORY_BUDGET", _history_body(event, path))
        answer, said = ask(env, "history", body, timeout)
        if answer is None:
            if marker is not None:
                import contextlib

                with contextlib.suppress(OSError):
                    os.remove(marker)  # asked again at a later touch
            return None, f"history {said}"
        return told("history", answer, said)
    except Exception as exc:
        return None, f"history error: {type(exc).__name__}"


def first_history(event: dict, paths: list[str], env) -> tuple[str | None, str]:
    """The history of the first of a tool call's files not seen yet in this session."""
    text, outcome = None, "no file"
    for path in paths:
        text, outcome = history(event, path, env)  # never raises
        if outcome != SEEN:
            break
    return text, outcome
