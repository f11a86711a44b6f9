"""File history for the PreToolUse hook: at the first Read or edit of a file in a session, the
earlier sessions that changed it, and why.

Asks the recall server's `POST /history` (beside /recall) with the file, the session's cwd, the
checkout's root where git has one here, and the live transcript (in which the server's reader of
the agent finds the task at hand: the latest prompt, or a subagent's own task), and turns a
non-empty answer into a short context: each session's agent where it is not Claude Code
("Codex session ..."), full id, dates and branch, what it did, the digest lines that name the
file and whether the file changed since. The server decides which sessions and in what order.

Another agent's tool call (a shell command, a patch) names no file: the server's reader of that
agent says which files it touches (`POST /touches`, `touched`), by the rule its transcripts are
read by, and the first of them not seen yet in the session is asked about.

Once per file per agent of a session (a subagent has a context of its own): a marker file,
taken with O_EXCL, so two parallel Reads of one file cannot both add it. A failed ask gives the
marker back, so a later touch asks again.

The agent is waiting for its tool call: the request runs within `LIBRARIAN_HISTORY_TIMEOUT_MS`
(librarian_recall.within). A server that is down refuses at once and costs a few milliseconds;
one that hangs costs the whole deadline, so once it missed one it is left alone for a while, and
longer while it keeps missing them (librarian_hooklib.hung_lately, which the prompt hook keeps
too). Everything fails open: no context, the
tool call goes on as it would without it.
"""

import json
import os
import time

import librarian_hooklib as lib
import librarian_recall as recall

DEFAULT_BUDGET = 1200
DEFAULT_TIMEOUT_MS = 300
LIMIT = 3
MAX_PATH_CHARS = 4096
MAX_TOOL_TEXT = 8000
MAX_TOUCHED = 20
SEEN = "history seen"
HEADER = (
    "Librarian remembers earlier sessions that worked on {path} (from memory, possibly out of "
    "date; the MCP tool get_digest with a session_id returns the whole session):"
)


def _beside_recall(env, name: str) -> str:
    """An endpoint beside the prompt hook's: its `/recall` -> `/<name>`."""
    url = recall.recall_url(env).rstrip("/")
    if url.endswith("/recall"):
        return url[: -len("/recall")] + "/" + name
    return url + "/" + name


def history_url(env) -> str:
    return _beside_recall(env, "history")


def _timeout_s(env) -> float:
    return recall.int_env(env, "LIBRARIAN_HISTORY_TIMEOUT_MS", DEFAULT_TIMEOUT_MS,
                          recall.MIN_TIMEOUT_MS, recall.MAX_TIMEOUT_MS) / 1000.0  # fmt: skip


def _shortened(tool_input: dict) -> dict:
    """The tool's input with each string cut to MAX_TOOL_TEXT: a patch names its files in its
    headers, a command its operands, long before the body's limit."""
    return {k: v[:MAX_TOOL_TEXT] if isinstance(v, str) else v for k, v in tool_input.items()}


def touched(event: dict, agent: str, env) -> tuple[str, list[str], str]:
    """(action, files, outcome) of the tool call in `event`, as the server's reader of `agent`
    says (`POST /touches`): an agent whose tools take a command or a patch, not a file path.
    Relative paths are joined to the event's cwd. Never raises: no files on any failure."""
    start = time.perf_counter()
    try:
        if _off(env):
            return "", [], "history off"
        if lib.hung_lately(env):
            return "", [], "history skipped (server hung lately)"
        name, tool_input = event.get("tool_name"), event.get("tool_input")
        if not isinstance(name, str) or not isinstance(tool_input, dict):
            return "", [], "no tool call"
        body: dict = {"agent": agent, "tool_name": name[:200], "tool_input": _shortened(tool_input)}
        cwd = event.get("cwd")
        if isinstance(cwd, str) and recall.sendable(cwd, MAX_PATH_CHARS) and os.path.isabs(cwd):
            body["cwd"] = cwd
        timeout = _timeout_s(env)
        token = env.get("LIBRARIAN_MCP_TOKEN") or ""
        url = _beside_recall(env, "touches")
        data = json.dumps(body).encode("ascii")
        try:
            answer = recall.within(timeout, lambda: recall.fetch(url, data, token, timeout))
        except (recall.RecallFailed, OSError, ValueError) as exc:
            why = str(exc) if isinstance(exc, recall.RecallFailed) else type(exc).__name__
            lib.count_hang(env, why == "timeout")
            return "", [], f"touches failed ({why}) {_ms(start)}"
        action, paths = answer.get("action"), answer.get("paths")
        if not isinstance(action, str) or not isinstance(paths, list):
            return "", [], f"touches failed (no paths) {_ms(start)}"
        base = cwd if isinstance(cwd, str) and os.path.isabs(cwd) else lib.event_cwd(event, env)
        files = [
            os.path.normpath(os.path.join(base, p))
            for p in paths[:MAX_TOUCHED]
            if isinstance(p, str) and recall.sendable(p, MAX_PATH_CHARS)
        ]
        return action, files, f"{action or 'nothing'} of {len(files)} files {_ms(start)}"
    except Exception as exc:
        return "", [], f"touches error: {type(exc).__name__} {_ms(start)}"


def _off(env) -> bool:
    return any(
        (env.get(name) or "").strip().lower() in recall.OFF
        for name in ("LIBRARIAN_HISTORY", "LIBRARIAN_RECALL")
    )


def _marker(event: dict, path: str, env) -> str | None:
    """This file's once-per-session marker (per agent); None without a session id."""
    import zlib

    state = lib.open_session_state(event, ".seen", env)
    if state is None:
        return None
    who = str(event.get("agent_id") or "")
    key = f"{who}\x00{path}".encode("utf-8", "replace")
    return f"{state}.{zlib.crc32(key):08x}{len(key):x}"


def _take(marker: str | None) -> bool:
    """Whether this is the first touch: the marker was not there and now is."""
    if marker is None:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:
        return True  # no state can be kept: better twice than never
    return True


def _give_back(marker: str | None) -> bool:
    """Remove the marker, so that a later touch asks again; whether it was there."""
    if marker is None:
        return False
    try:
        os.remove(marker)
    except OSError:
        return False
    return True


def request_body(event: dict, path: str) -> bytes:
    body: dict = {"path": path, "limit": LIMIT}
    cwd = event.get("cwd")
    if isinstance(cwd, str) and recall.sendable(cwd, MAX_PATH_CHARS) and os.path.isabs(cwd):
        body["cwd"] = cwd
    root = recall.git_root(os.path.dirname(path))
    if root and recall.sendable(root, MAX_PATH_CHARS):
        body["root"] = root
        remote = recall.git_remote(root)
        if remote:
            body["remote"] = remote
    # The task (the latest prompt, or a subagent's own) is the server's to read from the live
    # transcript, by the agent's reader: no hook parses a transcript.
    transcript = event.get("transcript_path")
    if isinstance(transcript, str) and recall.sendable(transcript, MAX_PATH_CHARS):
        body["transcript_path"] = transcript
    subagent = event.get("agent_id")
    if isinstance(subagent, str) and recall.sendable(subagent, 200):
        body["subagent"] = subagent
    sid = event.get("session_id")
    if isinstance(sid, str) and recall.sendable(sid, 200):
        body["session_id"] = sid
    return json.dumps(body).encode("ascii")


def _line(item: dict) -> str | None:
    sid = recall.clean(item.get("session_id"), 200)
    if not sid:
        return None
    where = [
        recall.dates(recall.clean(item.get("started_at"), 40), recall.clean(item.get("date"), 40))
    ]
    branch = recall.clean(item.get("git_branch"), recall.MAX_BRANCH_CHARS)
    if branch:
        where.append("branch " + branch)
    edits = item.get("edits") if isinstance(item.get("edits"), int) else 0
    plural = "s" if edits != 1 else ""
    where.append(f"changed it ({edits} edit{plural})" if item.get("changed") else "read it")
    since = recall.clean(item.get("changed_since"), 60)
    if since:
        where.append(f"the file {since}")
    word = recall.session_word(item.get("agent"), item.get("person"))
    head = f"- {word} {sid} (" + "; ".join(w for w in where if w) + ")"
    title = recall.clean(item.get("title"), 200).replace('"', "'")
    summary = recall.clean(item.get("summary"), 400)
    return head + (f' "{title}"' if title else "") + (f": {summary}" if summary else "")


def render(answer: dict, shown_path: str, budget: int) -> tuple[str | None, int]:
    """The context, at most `budget` characters of whole lines, and how many sessions it names:
    every session's line first (the most recent changer is the first), then their digest lines
    that name the file, then their highlights, a round at a time."""
    results = answer.get("results")
    if not isinstance(results, list):
        raise recall.RecallFailed("answer has no results list")
    text = HEADER.format(path=shown_path)
    used, heads, extras = len(text), [], []
    for item in results:
        line = _line(item) if isinstance(item, dict) else None
        if line is None or used + 1 + len(line) > budget:
            continue
        heads.append(line)
        used += 1 + len(line)
        lines = [recall.clean(x, 400) for x in (item.get("lines") or [])[:2]]
        lines += [recall.clean(x, 400) for x in (item.get("highlights") or [])[:2]]
        extras.append([x for i, x in enumerate(lines) if x and x not in lines[:i]])
    if not heads:
        return None, 0
    shown: list[list[str]] = [[] for _ in heads]
    for row in range(max(len(e) for e in extras)):
        for i, lines in enumerate(extras):
            if row < len(lines) and used + 5 + len(lines[row]) <= budget:
                shown[i].append("  - " + lines[row])
                used += 5 + len(lines[row])
    out = [text]
    for head, bullets in zip(heads, shown, strict=True):
        out += [head, *bullets]
    return "\n".join(out), len(heads)


def context(event: dict, path: str, env) -> tuple[str | None, str]:
    """(text or None, outcome for the log) for a touch of `path`. Never raises."""
    start = time.perf_counter()
    try:
        if _off(env):
            return None, "history off"
        if not recall.sendable(path, MAX_PATH_CHARS):
            return None, "history skipped (path)"
        if f"{os.sep}{lib.LIBRARY_DIRNAME}{os.sep}" in path:
            return None, "history skipped (library note)"
        if lib.hung_lately(env):
            return None, "history skipped (server hung lately)"
        marker = _marker(event, path, env)
        if not _take(marker):
            return None, SEEN
        timeout = _timeout_s(env)
        token = env.get("LIBRARIAN_MCP_TOKEN") or ""
        url = history_url(env)
        try:
            answer = recall.within(
                timeout, lambda: recall.fetch(url, request_body(event, path), token, timeout)
            )
            shown = recall.clean(answer.get("path"), 300) or os.path.basename(path)
            budget = recall.int_env(env, "LIBRARIAN_HISTORY_BUDGET", DEFAULT_BUDGET,
                                    recall.MIN_BUDGET, recall.MAX_BUDGET)  # fmt: skip
            text, named = render(answer, shown, budget)
        except (recall.RecallFailed, OSError, ValueError) as exc:
            _give_back(marker)
            why = str(exc) if isinstance(exc, recall.RecallFailed) else type(exc).__name__
            lib.count_hang(env, why == "timeout")
            return None, f"history failed ({why}) {_ms(start)}"
        lib.count_hang(env, False)
        if text is None:
            return None, f"history none {_ms(start)}"
        return text, f"history added {named} sessions, {len(text)} chars {_ms(start)}"
    except Exception as exc:
        return None, f"history error: {type(exc).__name__} {_ms(start)}"


def _ms(start: float) -> str:
    return f"in {(time.perf_counter() - start) * 1000.0:.0f}ms"
