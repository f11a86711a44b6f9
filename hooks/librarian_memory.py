"""What the recall server remembers, asked for any agent's hook: the past sessions that bear on a
prompt (`POST /recall`); at the first Read or edit of a file in a session, the earlier sessions
that changed it (`POST /history`). The server writes the text (core/recall/hook_text.py); this
finds what to ask with (prompt, file, cwd, branch, remote), asks within a deadline, hands it on.

The whole request runs in a daemon thread waited for at most the deadline: per-socket timeouts
alone would not bound it (a server that trickles bytes resets them, a name lookup ignores them).
A server that missed a deadline is left alone a while (librarian_hooklib.hung_lately). Every
failure adds nothing. The server's text is untrusted: dropped over MAX_CONTEXT_CHARS, never a
permission decision. `socket` and `threading` load only when the server is asked, `ssl` only for
https: `http.client` would cost ~32 ms under `python3 -S` (docs/decisions/0033).
"""

import json
import os
import stat
import time

import librarian_hooklib as lib

DEFAULT_URL = "http://127.0.0.1:3201/recall"
MIN_TIMEOUT_MS, MAX_TIMEOUT_MS = 50, 5000  # hooks.json gives a hook 10 s
LIMIT = 3  # chunks or sessions asked for: the few best, not a page of results
MAX_QUERY_CHARS = 2000  # the endpoint's limit: the start of a long prompt says what it is about
MAX_PATH_CHARS = 4096  # the endpoint's limit for a cwd or a path; a longer one is not sent
MAX_RESPONSE_BYTES = 1024 * 1024
MAX_CONTEXT_CHARS = 10000  # Claude Code spills a longer hook output to a file
MAX_GIT_WALK = 64  # folders looked at on the way up to the one holding `.git`
MAX_GIT_READ = 4200  # bytes of `.git`, HEAD or a config read: a ref line is short
MAX_TOOL_TEXT = 8000  # a patch names its files in its headers, a command its operands
MAX_TOUCHED = 20
OFF = ("off", "0", "false", "no")
SEEN = "history seen"
HOOK_CONTEXT = ("<hook_context>", "</hook_context>")


class Failed(Exception):
    """The server could not be asked or gave no usable answer; the message is safe to log."""


def _off(env, *names: str) -> bool:
    return any((env.get(name) or "").strip().lower() in OFF for name in names)


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
    url = env.get("LIBRARIAN_RECALL_URL") or ""
    mcp = (env.get("LIBRARIAN_MCP_URL") or "").rstrip("/")
    if not url and mcp:
        url = (mcp[: -len("/mcp")] if mcp.endswith("/mcp") else mcp) + "/recall"
    url = (url or DEFAULT_URL).rstrip("/")
    return (url[: -len("/recall")] if url.endswith("/recall") else url) + "/" + name


def sendable(text, limit: int) -> bool:
    """Whether the endpoint takes `text` as it is: a refused request would cost the answer."""
    if not isinstance(text, str) or not text or len(text) > limit or "\x00" in text:
        return False
    try:
        text.encode("utf-8")  # a lone surrogate (a \ud800 escape in the event) cannot go
    except UnicodeEncodeError:
        return False
    return True


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


def told(answer: dict) -> tuple[str | None, str]:
    """The server's text for the agent, and what it says of it."""
    text, note = answer.get("context"), answer.get("note")
    if text is not None and (not isinstance(text, str) or len(text) > MAX_CONTEXT_CHARS):
        return None, "not a context"
    if text:
        return text, f"added {answer.get('sessions')} sessions, {len(text)} chars"
    return None, f"none ({note})" if isinstance(note, str) and len(note) < 200 else "none"


def fetch(url: str, body: bytes, token: str, timeout_s: float) -> dict:
    """One POST in HTTP/1.0 over a socket written here (the answer is all the server sends
    before it closes, never chunked), TLS for https; the answer as a dict, else Failed."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Failed("bad url")
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    status, data = _post(parts, body, headers, timeout_s)
    if status in (401, 403):
        raise Failed(f"refused ({status})")
    if status != 200:
        raise Failed(f"http {status}")
    try:
        answer = json.loads(data.decode("utf-8"))
    except ValueError:
        raise Failed("answer is not JSON") from None
    if not isinstance(answer, dict):
        raise Failed("answer is not an object")
    return answer


def _post(parts, body: bytes, headers: dict, timeout_s: float) -> tuple[int, bytes]:
    import socket

    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    netloc = f"[{host}]" if ":" in host else host
    lines = [
        f"POST {parts.path or '/'} HTTP/1.0",
        f"Host: {netloc}:{port}",
        f"Content-Length: {len(body)}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    received, size = [], 0
    sock = socket.create_connection((host, port), timeout=timeout_s)
    if parts.scheme == "https":
        import ssl  # only for a server elsewhere: its import is most of http.client's cost

        sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
    with sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        while chunk := sock.recv(65536):
            received.append(chunk)
            size += len(chunk)
            if size > MAX_RESPONSE_BYTES + 65536:
                raise Failed("answer too large")
    head, found, data = b"".join(received).partition(b"\r\n\r\n")
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
    return int(words[1]), data


def within(timeout_s: float, work):
    """`work()`'s value, or Failed("timeout") once `timeout_s` has passed: the call runs in a
    daemon thread, abandoned past the deadline (it dies with the process)."""
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
    if worker.is_alive() or isinstance(box.get("error"), TimeoutError):
        raise Failed("timeout")  # the join's deadline, or the socket's own (the same one)
    if "error" in box:
        raise box["error"]
    return box["answer"]


# -- where the question comes from: git's files, read as git reads them -------------------------


def _read_start(path: str) -> str | None:
    """The first MAX_GIT_READ bytes of a regular file as text, else None. Opened without
    blocking and checked before reading: a FIFO named HEAD must not hang the hook."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, MAX_GIT_READ).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def _dotgit(cwd: str) -> tuple[str, str, int] | None:
    """The first `.git` at or above `cwd`, as git finds it: (its folder, its path, its mode)."""
    try:
        folder = os.path.abspath(cwd)
        for _ in range(MAX_GIT_WALK):
            dotgit = os.path.join(folder, ".git")
            try:
                return folder, dotgit, os.stat(dotgit).st_mode
            except OSError:
                if os.path.dirname(folder) == folder:
                    return None
                folder = os.path.dirname(folder)
    except (OSError, ValueError):
        pass
    return None


def git_root(cwd: str) -> str | None:
    """The top folder of the checkout (or worktree) holding `cwd`, or None."""
    found = _dotgit(cwd)
    return found[0] if found else None


def _gitdir(cwd: str) -> str | None:
    """The git folder of the repository holding `cwd`: `.git`, or for a worktree or submodule
    the folder its `gitdir: <path>` file names (relative to the folder holding it)."""
    found = _dotgit(cwd)
    if found is None or stat.S_ISDIR(found[2]):
        return found[1] if found else None
    line = ((_read_start(found[1]) or "") + "\n").splitlines()[0]
    gitdir = line.removeprefix("gitdir:").strip()
    ok = line.startswith("gitdir:") and gitdir and "\0" not in gitdir
    return os.path.join(found[0], gitdir) if ok else None


def git_branch(cwd: str) -> str | None:
    """The branch of `ref: refs/heads/<name>` in HEAD; a detached or odd HEAD names none (git
    refuses spaces and control characters in a name: a HEAD with them is not git's)."""
    gitdir = _gitdir(cwd)
    text = _read_start(os.path.join(gitdir, "HEAD")) if gitdir else None
    line = text.splitlines()[0].strip() if text else ""
    name = line.removeprefix("ref: refs/heads/")
    if name == line or not sendable(name, 200):
        return None
    return None if any(c.isspace() or not c.isprintable() for c in name) else name


def git_remote(cwd: str) -> str | None:
    """The `origin` remote (else the first) in the repository's git config (a worktree's is its
    main repository's), without a user or password: with a file's history question it tells the
    server a teammate's checkout named otherwise."""
    import re

    gitdir = _gitdir(cwd)
    if gitdir is None:
        return None
    common = (_read_start(os.path.join(gitdir, "commondir")) or "").strip()
    urls: dict[str, str] = {}
    section = ""
    for raw in (_read_start(os.path.join(gitdir, common, "config")) or "").splitlines():
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


def typed(prompt):
    """The words the user typed: Gemini CLI, headless, puts its SessionStart hooks' context
    (`<hook_context>...</hook_context>\\n\\n`) before the prompt it hands BeforeAgent."""
    opening, closing = HOOK_CONTEXT
    rest = prompt.lstrip() if isinstance(prompt, str) else ""
    if not rest.startswith(opening):
        return prompt
    while rest.startswith(opening) and closing in rest:
        rest = rest[rest.index(closing) + len(closing) :].lstrip()
    return rest


def recall(event: dict, env) -> tuple[str | None, str]:
    """(text or None, outcome for the log) for a prompt, asked with where it comes from (its cwd
    and branch: that project's sessions, and that branch's, rank first). Never raises."""
    try:
        prompt = typed(event.get("prompt"))
        if _off(env, "LIBRARIAN_RECALL"):
            return None, "recall off"
        if not isinstance(prompt, str) or not prompt.strip():
            return None, "recall skipped (no prompt)"
        if lib.hung_lately(env):
            return None, "recall skipped (server hung lately)"
        timeout = _ms(env, "LIBRARIAN_RECALL_TIMEOUT_MS", 800)
        body = {"prompt": prompt[:MAX_QUERY_CHARS], "limit": LIMIT, "deadline_ms": timeout}
        cwd = _cwd(event)
        if cwd:
            body["cwd"] = cwd
            branch = git_branch(cwd)
            if branch:
                body["git_branch"] = branch
        answer, said = ask(env, "recall", _budget(env, "LIBRARIAN_RECALL_BUDGET", body), timeout)
        if answer is None:
            return None, f"recall {said}"
        text, outcome = told(answer)
        return text, f"recall {outcome} {said}"
    except Exception as exc:
        return None, f"recall error: {type(exc).__name__}"


def touched(event: dict, agent: str, env) -> tuple[str, list[str], str]:
    """(action, files, outcome) of a tool call that names no file (a shell command, a patch), as
    the server's reader of `agent` says (`POST /touches`); relative paths joined to the cwd."""
    try:
        if _off(env, "LIBRARIAN_HISTORY", "LIBRARIAN_RECALL"):
            return "", [], "history off"
        if lib.hung_lately(env):
            return "", [], "history skipped (server hung lately)"
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


def _marker(event: dict, path: str, env) -> str | None:
    """This file's once-per-session marker (per agent: a subagent has a context of its own),
    taken with O_EXCL so that two parallel Reads cannot both add it; None without a session."""
    import zlib

    state = lib.open_session_state(event, ".seen", env)
    if state is None:
        return None
    key = f"{event.get('agent_id') or ''}\x00{path}".encode("utf-8", "replace")
    return f"{state}.{zlib.crc32(key):08x}{len(key):x}"


def _take(marker: str | None) -> bool:
    """Whether this is the first touch: the marker was not there and now is."""
    try:
        if marker is not None:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:
        pass  # no state can be kept: better twice than never
    return True


def _history_body(event: dict, path: str, env) -> dict:
    body: dict = _budget(env, "LIBRARIAN_HISTORY_BUDGET", {"path": path, "limit": LIMIT})
    root = git_root(os.path.dirname(path))
    remote = git_remote(root) if root else None
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
        if _off(env, "LIBRARIAN_HISTORY", "LIBRARIAN_RECALL"):
            return None, "history off"
        if not sendable(path, MAX_PATH_CHARS):
            return None, "history skipped (path)"
        if f"{os.sep}{lib.LIBRARY_DIRNAME}{os.sep}" in path:
            return None, "history skipped (library note)"
        if lib.hung_lately(env):
            return None, "history skipped (server hung lately)"
        marker = _marker(event, path, env)
        if not _take(marker):
            return None, SEEN
        timeout = _ms(env, "LIBRARIAN_HISTORY_TIMEOUT_MS", 300)
        answer, said = ask(env, "history", _history_body(event, path, env), timeout)
        if answer is None:
            if marker is not None:
                import contextlib

                with contextlib.suppress(OSError):
                    os.remove(marker)  # asked again at a later touch
            return None, f"history {said}"
        text, outcome = told(answer)
        return text, f"history {outcome} {said}"
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
