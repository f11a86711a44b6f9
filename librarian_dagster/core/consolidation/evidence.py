"""What one redacted session offers consolidation: the commands it ran and whether they passed,
what the failed ones said, and the files it changed, relative to its repository's root."""

import re
from dataclasses import dataclass
from datetime import datetime

from librarian_dagster.core.capture.session import CHANGE, Session, ToolUse
from librarian_dagster.core.capture.touches import normal_path
from librarian_dagster.core.digest.distil import error_lines

PATH = re.compile(
    r"(?<![\w.])(?:~|\.{1,2})?(?:/[\w.@-]+)+/?"  # absolute, from home or from here
    r"|\b[\w.@-]+(?:/[\w.@-]+)*\.[A-Za-z]\w{0,5}\b"  # relative, with an extension
)
"""A file's path as an error line writes it: absolute, or relative with an extension."""

MAX_FAILURE_LINES = 3
"""A failed command's output is read for this many lines that say what failed."""
ASKED_CHARS = 600
COMMAND_WORDS = 3
"""A command is known by its first words (`go test -v`, `mise run lint`): its arguments vary."""
GENERIC_PROGRAMS = frozenset((
    "awk", "bash", "cat", "cd", "chmod", "cp", "curl", "date", "diff", "echo", "export",
    "find", "gh", "git", "grep", "head", "jq", "kill", "less", "ls", "mkdir", "mv", "open",
    "printf", "ps", "pwd", "rg", "rm", "sed", "sleep", "sort", "source", "tail", "tee", "test",
    "touch", "tree", "true", "uniq", "wc", "which", "xargs",
))  # fmt: skip
"""Programs whose use says nothing about a project: files looked at, git and GitHub chores."""
_REVERT = re.compile(r"\bgit\s+revert\b")
_SEGMENT_END = re.compile(r"&&|\|\||[|;\n]|\s\d?>")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
_SHORT_OPTION = re.compile(r"^-[A-Za-z]{1,2}$")
"""`-o`, `-C`: an option whose value is cut off by COMMAND_WORDS, so it is left out too."""
_NOT_A_FAILURE = re.compile(
    r"\b(INFO|DEBUG|TRACE)\b"  # a log line that names a field "failed_..."
    r"|[{};]\s*$|\s:=\s|^\s*(func|def|return|if|class)\b|\d→"  # code, as a tool showed it
)
_RUNNER_TAG = re.compile(r"^\s*\[[\w:.-]+\]\s*")
_QUOTED = re.compile(r"`[^`]*`|'[^'\s][^']*'|\"[^\"]*\"")
_POSITION = re.compile(r":\d+(?::\d+)?\b")
_NUMBER = re.compile(r"\b0x[0-9a-f]+\b|\d+(?:\.\d+)*", re.IGNORECASE)
_GENERIC_WORDS = frozenset(("error", "errors", "failed", "fail", "failure", "task", "exit",
                            "code", "status", "fatal", "warn", "warning", "trace"))  # fmt: skip


@dataclass(frozen=True)
class Failure:
    command: str
    """The failed command's first words (`command_words`)."""
    lines: tuple[str, ...]
    """What its output said failed, verbatim (redacted)."""
    then: str | None
    """The first later command of the same program that passed, by its first words."""
    changed: tuple[str, ...]
    """Files the session changed from the failure on, relative to its root."""


@dataclass(frozen=True)
class Evidence:
    session_id: str
    started_at: datetime | None
    agent: str
    changed: tuple[str, ...]
    """Every file it changed, relative to its repository's root, in first-changed order."""
    passed: tuple[str, ...]
    """The commands (first words) that ran and did not fail, in first-run order."""
    failures: tuple[Failure, ...]
    reverted: bool = False
    """It ran `git revert`."""
    asked: tuple[str, ...] = ()
    """What the person typed, each prompt cut to `ASKED_CHARS`."""


def command_words(command: str) -> str | None:
    """A command's first words, past `cd DIR &&`, variable assignments and what pipes or
    redirects it; None for a generic program (`GENERIC_PROGRAMS`) or nothing at all."""
    for segment in _SEGMENT_END.split(command):
        words = [w for w in segment.split() if not _ASSIGNMENT.match(w)]
        while words and words[0] in ("sudo", "time", "command", "exec", "env"):
            words = [w for w in words[1:] if not _ASSIGNMENT.match(w)]
        if not words or words[0] == "cd":
            continue
        if words[0].rsplit("/", 1)[-1] in GENERIC_PROGRAMS:
            return None
        kept = words[:COMMAND_WORDS]
        if len(kept) > 1 and _SHORT_OPTION.match(kept[-1]):
            kept = kept[:-1]
        return " ".join(kept)
    return None


def says_what_failed(line: str) -> bool:
    """Whether an error line says what failed: not a wrapper's "[lint] ERROR task failed", a
    log line or a line of code that only holds the word "error", nor a bare path or name."""
    if _NOT_A_FAILURE.search(line):
        return False
    words = re.findall(r"[a-z_][\w.]*", failure_key(line))
    return len([w for w in words if w not in _GENERIC_WORDS and len(w) > 1]) >= 2


def failure_key(line: str) -> str:
    """A failure's line as it is compared: positions, numbers, paths, quoted names and the
    runner's `[tags]` left out, so that the same error in another file, line or name, or after
    another count of tests, is the same."""
    line = _QUOTED.sub("Q", _RUNNER_TAG.sub("", _POSITION.sub("", line)))
    return " ".join(_NUMBER.sub("N", PATH.sub("P", line)).casefold().split())


def relative(path: str, root: str, cwd: str | None) -> str | None:
    """`path` relative to `root`, in '/' spelling; None when it lies outside."""
    full = normal_path(path, cwd)
    prefix = root.rstrip("/") + "/"
    if full is None or not full.startswith(prefix):
        return None
    return full[len(prefix) :]


def evidence_of(session: Session, root: str) -> Evidence:
    """The evidence of a redacted `session` whose repository's root is `root`."""
    runs: list[tuple[ToolUse, str, list[str]]] = []  # (use, its words, what it said failed)
    changes: list[tuple[int, str]] = []  # (runs so far, file)
    pending: list[ToolUse] = []
    asked: list[str] = []
    reverted = False
    for turn in session.turns:
        if turn.kind == "prompt" and turn.agent_id is None and turn.text.strip():
            asked.append(turn.text.strip()[:ASKED_CHARS])
        for use in turn.tool_uses:
            reverted = reverted or bool(use.command and _REVERT.search(use.command))
            pending.append(use)
            if use.action == CHANGE:
                for path in use.file_paths:
                    rel = relative(path, root, session.cwd)
                    if rel:
                        changes.append((len(runs), rel))
            words = command_words(use.command) if use.command else None
            if words:
                runs.append((use, words, []))
        if turn.kind == "tool_result" and pending:
            use = pending.pop(0)
            if use.is_error and runs and runs[-1][0] is use and turn.text:
                said = error_lines(turn.text, MAX_FAILURE_LINES)
                runs[-1][2].extend(line for line in said if says_what_failed(line))
    return Evidence(
        session_id=session.session_id,
        started_at=session.started_at,
        agent=session.agent,
        changed=tuple(dict.fromkeys(path for _, path in changes)),
        passed=tuple(dict.fromkeys(words for use, words, _ in runs if not use.is_error)),
        failures=_failures(runs, changes),
        reverted=reverted,
        asked=tuple(asked),
    )


def _failures(
    runs: list[tuple[ToolUse, str, list[str]]], changes: list[tuple[int, str]]
) -> tuple[Failure, ...]:
    found = []
    for i, (use, words, said) in enumerate(runs):
        if not use.is_error or not said:
            continue
        program = words.split()[0]
        then = next(
            (i2 for i2 in range(i + 1, len(runs))
             if not runs[i2][0].is_error and runs[i2][1].split()[0] == program),
            None,
        )  # fmt: skip
        end = len(runs) if then is None else then
        changed = dict.fromkeys(path for at, path in changes if i < at <= end)
        found.append(Failure(words, tuple(said), runs[then][1] if then is not None else None,
                             tuple(changed)))  # fmt: skip
    return tuple(found)
