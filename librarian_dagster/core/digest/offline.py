"""The offline digester: the digest distilled from what the session itself says, with no network.

It fills the schema (core/digest/schema.py) deterministically with short lines in the session's
own words (core/digest/distil.py picks them): the plan and the prompts that asked for something,
the causes and failures met, the commits, pull requests, decisions and outcomes, and what is
left. It needs no key, so the whole product runs on a fresh machine; an LLM digester
(core/digest/llm.py) writes better prose into the same fields.
"""

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath, PureWindowsPath

from librarian_dagster.core.capture.session import CHANGE, READ, SEARCH, Session, Turn
from librarian_dagster.core.digest.distil import (
    TEXT_CHARS,
    Plan,
    closing_lead,
    commit_subjects,
    cut,
    error_line,
    findings,
    is_filler,
    lead,
    marked,
    outcomes,
    plan_of,
    pull_request_numbers,
    pull_request_title,
    sentences,
)
from librarian_dagster.core.digest.schema import DIGEST_VERSION, Digest, DigestResult

# -- what the session says ------------------------------------------------------------------------


@dataclass
class Exchange:
    """One typed prompt and everything the main agent did until the next one."""

    prompt: str
    replies: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    files_edited: list[str] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def exchanges(turns: Iterable[Turn]) -> list[Exchange]:
    """Group the main dialogue into exchanges; subagent turns count toward the current one."""
    result: list[Exchange] = []
    pending_errors: set[int] = set()
    for turn in turns:
        if turn.kind == "prompt" and turn.agent_id is None:
            text = _clean(turn.text)
            # A bare slash command (/clear, /model, /exit) steers the tool, it asks for nothing.
            if text and not _BARE_COMMAND.match(text):
                result.append(Exchange(prompt=text))
            continue
        if not result:
            # Work before any typed prompt (a resumed or compacted session): a synthetic one.
            result.append(Exchange(prompt=""))
        current = result[-1]
        if turn.kind == "text" and turn.agent_id is None and turn.text.strip():
            current.replies.append(turn.text.strip())
        for use in turn.tool_uses:
            current.tools.append(use.name)
            if use.action == CHANGE:
                current.files_edited.extend(use.file_paths)
            elif use.action in (READ, SEARCH):
                current.files_read.extend(use.file_paths)
            if use.command:
                current.commands.append(use.command)
            if use.is_error:
                pending_errors.add(len(result) - 1)
        if turn.kind == "tool_result" and (len(result) - 1) in pending_errors and turn.text:
            # What failed, not the bare "Exit code 1" above it.
            failed = error_line(turn.text)
            if failed and len(current.errors) < 3:
                current.errors.append(failed)
            pending_errors.discard(len(result) - 1)
    return result


# -- the offline digester -------------------------------------------------------------------------

_PROBLEM_WORDS = re.compile(
    r"\b(error|errors|fail\w*|bug|broken|crash\w*|exception|panic\w*|traceback|wrong|"
    r"doesn'?t work|not working|issue|regress\w*|flaky|hang\w*|timeout|leak\w*|"
    r"erro|falha\w*|quebr\w*|não funciona)\b",
    re.IGNORECASE,
)
_LANGUAGES = {
    ".py": "python", ".go": "go", ".rs": "rust", ".ts": "typescript", ".tsx": "typescript",
    ".js": "javascript", ".jsx": "javascript", ".java": "java", ".kt": "kotlin", ".rb": "ruby",
    ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cs": "csharp", ".swift": "swift",
    ".sql": "sql", ".sh": "shell", ".md": "docs", ".yaml": "yaml", ".yml": "yaml",
    ".toml": "toml", ".json": "json", ".css": "css", ".html": "html", ".php": "php",
}  # fmt: skip
_COMMAND_TAGS = {
    "git": "git", "gh": "github", "docker": "docker", "pytest": "testing", "go": "go",
    "npm": "npm", "pnpm": "npm", "yarn": "npm", "cargo": "rust", "make": "make", "uv": "python",
    "pip": "python", "kubectl": "kubernetes", "terraform": "terraform", "psql": "postgres",
}  # fmt: skip

DIGEST_BUDGET = 1_650
"""Characters of summary and bullets a digest holds at most (its headings and files line aside):
about 2,000 rendered at most. Lines are taken a section at a time, best first, until it is
spent (docs/decisions/0031 measures the sizes tried)."""
_MAX_FILES = 6


RULES_VERSION = 1
"""Bump when the offline digester's rules change: its memories are digested again on their next
run (`model_name` is part of a digest's key), an LLM's are not paid for again."""


class OfflineDigester:
    """Distils the digest from the session's own words and actions; deterministic, no network.

    Each section gets candidate lines, best first (core/digest/distil.py picks them): what we
    worked on is the plan the session started from and the prompts that asked for something;
    the problem, the causes the replies name, the prompts that report a fault and the line of
    a failed command that says what failed; how it was solved, the subjects of the commits the
    session wrote, the pull requests it opened or worked on, the decisions its replies state and
    what each closing reply says was done; what is left, the replies' sentences about next steps
    and TODOs. The sections then take a line each in turn until DIGEST_BUDGET is spent, so a
    long session fills its digest with its best lines, not its first ones.
    """

    model_name = f"offline-v{DIGEST_VERSION}.{RULES_VERSION}"

    def digest(self, session: Session, known_tags: Sequence[str] = ()) -> DigestResult:
        parts = [_bounded(x) for x in exchanges(session.turns)]
        asked = [x for x in parts if x.prompt and not is_filler(x.prompt)]
        plans = [plan for x in asked if (plan := plan_of(x.prompt))]
        edited = _edited(parts)
        commands = [c for x in parts for c in x.commands]
        summary = _summary(session, asked, plans, edited)
        worked_on = _worked_on(asked, plans)
        if worked_on and _gist(summary).startswith(_gist(worked_on[0])):
            worked_on = worked_on[1:]  # the summary already says it, first thing
        candidates = {
            "worked_on": worked_on,
            "problem": _problem(parts, asked),
            "solution": _solution(parts, commands),
            "open_items": _open_items(parts),
        }
        chosen = _within_budget(candidates, DIGEST_BUDGET - len(summary))
        if edited:
            chosen["worked_on"].append(
                cut("Files changed: " + ", ".join(_short_path(f) for f in edited[:_MAX_FILES]))
            )
        return DigestResult(
            digest=Digest(
                summary=summary,
                worked_on=chosen["worked_on"],
                problem=chosen["problem"],
                solution=chosen["solution"],
                open_items=chosen["open_items"],
                tags=_tags(edited + [f for x in parts for f in x.files_read], commands),
                domain="technical" if (edited or commands) else "reflections",
                importance=_importance(len(asked), len(edited)),
            ),
            model=self.model_name,
        )


def _bounded(x: Exchange) -> Exchange:
    """The exchange as distilling reads it: each text at most TEXT_CHARS long."""
    return replace(
        x,
        prompt=x.prompt[:TEXT_CHARS],
        replies=[r[:TEXT_CHARS] for r in x.replies],
        commands=[c[:TEXT_CHARS] for c in x.commands],
    )


def files_changed(session: Session, limit: int) -> list[str]:
    """The files the session edited, most edited first, relative to its cwd where under it."""
    edited = _edited(exchanges(session.turns))
    cwd = (session.cwd or "").rstrip("/\\")
    if cwd:
        edited = [f[len(cwd) + 1 :] if f.startswith((cwd + "/", cwd + "\\")) else f for f in edited]
    return list(dict.fromkeys(edited))[:limit]


def _edited(parts: Sequence[Exchange]) -> list[str]:
    """The files the exchanges edited, most edited first."""
    return _ranked(f for x in parts for f in x.files_edited)


def _worked_on(asked: Sequence[Exchange], plans: Sequence[Plan]) -> list[str]:
    lines = [
        line
        for p in plans
        for line in (
            f"Plan: {p.title}",
            p.context,
            ("Steps: " + "; ".join(p.steps)) if p.steps else "",
        )
        if line
    ]
    prompts = [lead(x.prompt) for x in asked if not plan_of(x.prompt)]
    # The first ask says what the session set out to do; of the others, the longest say most.
    best = sorted(range(len(prompts)), key=lambda i: (i > 0, -len(prompts[i]), i))
    return _dedupe(lines + [prompts[i] for i in best])


def _problem(parts: Sequence[Exchange], asked: Sequence[Exchange]) -> list[str]:
    causes = [s for x in parts for r in x.replies for s in marked(r, "cause")]
    found = [s for x in parts for r in x.replies for s in findings(r)]
    # A prompt that reports a fault, by its first sentence.
    reported = [
        (sentences(x.prompt) or [x.prompt])[0]
        for x in asked
        if _PROBLEM_WORDS.search(x.prompt) and not plan_of(x.prompt)
    ]
    failed = ["Failed: " + e for x in parts for e in x.errors]
    return _interleave(causes, found, [cut(r) for r in reported], failed)


def _solution(parts: Sequence[Exchange], commands: Sequence[str]) -> list[str]:
    commits = ["Commit: " + s for c in commands for s in commit_subjects(c)]
    opened = ["Opened pull request: " + t for c in commands if (t := pull_request_title(c))]
    numbers = _dedupe(
        n for text in [*commands, *(r for x in parts for r in x.replies)]
        for n in pull_request_numbers(text)
    )  # fmt: skip
    prs = [("Pull requests: #" + ", #".join(numbers[:6]))] if numbers else []
    decisions = [s for x in parts for r in x.replies for s in marked(r, "decision")]
    # The last exchange's outcome first: a session's closing reply says what it came to.
    closing = [x.replies[-1] for x in reversed(parts) if x.replies]
    done = _interleave(*map(outcomes, closing))
    # What each closing reply says first, its outcome verbs or not: the assistant's own summary.
    said = [first for reply in closing if (first := closing_lead(reply))]
    return _interleave(prs + opened + commits, done, decisions, said)


def _open_items(parts: Sequence[Exchange]) -> list[str]:
    if not parts:
        return []
    last = parts[-1]
    if last.prompt and not last.replies and not is_filler(last.prompt):
        return ["Unanswered at the end: " + lead(last.prompt)]
    # What the last exchanges' closing replies say is left: earlier ones were left and then done.
    return [s for x in parts[-2:] if x.replies for s in marked(x.replies[-1], "open")]


def _summary(
    session: Session, asked: Sequence[Exchange], plans: Sequence[Plan], edited: Sequence[str]
) -> str:
    if session.title:
        head = session.title.strip().rstrip(".")
    elif plans:
        head = plans[0].title
    elif asked:
        head = lead(asked[0].prompt)
    else:
        head = "Session with no typed prompt"
    where = f" in {session.project}" if session.project else ""
    if session.git_branch and session.git_branch not in ("main", "master", "HEAD"):
        where += f" on {session.git_branch}"
    touched = f" ({len(edited)} files changed)" if edited else ""
    return cut(f"{head}{where}{touched}.", 240)


def _interleave(*ranked: Sequence[str]) -> list[str]:
    """Lines of several ranked lists, taking each list's next best in turn, duplicates once."""
    out: list[str] = []
    for i in range(max((len(r) for r in ranked), default=0)):
        out += [r[i] for r in ranked if i < len(r)]
    return _dedupe(out)


def _within_budget(candidates: dict[str, list[str]], budget: int) -> dict[str, list[str]]:
    """Each section's best lines: the next best line of every section in turn, until `budget`
    characters are spent (a line that does not fit is passed over, and so is a line another
    section already said: a prompt's first sentence quoted as the problem, say); each section
    keeps its order."""
    chosen: dict[str, list[str]] = {key: [] for key in candidates}
    said: list[str] = []
    spent, depth = 0, 0
    while any(depth < len(lines) for lines in candidates.values()):
        for key, lines in candidates.items():
            if depth >= len(lines) or spent + len(lines[depth]) > budget:
                continue
            if not _says_something(lines[depth]):
                continue
            gist = _gist(lines[depth])
            if not any(_same_line(gist, other) for other in said):
                chosen[key].append(lines[depth])
                said.append(gist)
                spent += len(lines[depth])
        depth += 1
    return chosen


# Lines that name what they are: a plan's title, its steps, the pull requests worked on, the
# line of a failed command's output (`--- FAIL: TestSync`).
_NAMED_LINE = re.compile(r"^(Plan|Steps|Pull requests|Failed):")


MIN_LINE_WORDS = 4
"""Words of two letters or more a line needs: "link the PR", "Commit: init" or "Yeah, it's
redundant" say nothing a later question would find them by."""


def _says_something(line: str) -> bool:
    words = re.findall(r"[^\W\d_]{2,}", line)
    return bool(_NAMED_LINE.match(line)) or len(words) >= MIN_LINE_WORDS


def _gist(line: str) -> str:
    """A line's words, lowercased, without punctuation or a cut's ellipsis."""
    return " ".join(re.findall(r"\w+", line.lower()))


def _same_line(gist: str, other: str) -> bool:
    """One line is the other, or the other cut short (a line is cut at LINE_CHARS, a headline
    at its first sentences): 30 characters in common from the start, at least."""
    return min(len(gist), len(other)) >= 30 and (gist.startswith(other) or other.startswith(gist))


# -- helpers --------------------------------------------------------------------------------------

_TAG_NOISE = re.compile(r"<[^>]{1,80}>|\[(?:image|document)[^\]]{0,80}\]|\[Image #\d+\]", re.I)
# Context an IDE or Claude Code wraps into the user's message: not what the user asked.
_INJECTED = re.compile(
    r"<(ide_selection|ide_opened_file|system-reminder|local-command-stdout)>.*?</\1>", re.S
)
_BARE_COMMAND = re.compile(r"^/[\w:-]+$")


def _clean(text: str) -> str:
    """The prompt the user typed, its lines kept (a plan's headings end at theirs)."""
    text = _INJECTED.sub(" ", text)
    text = _TAG_NOISE.sub(" ", text)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    return re.sub(r" ?\n[ \n]*", "\n", text).strip()


def _dedupe(items: Iterable[str]) -> list[str]:
    """Each line once: the same words with another case or closing stop count as the same."""
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        key = item.casefold().rstrip(".!?\u2026 ")
        if item and key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _ranked(items: Iterable[str]) -> list[str]:
    return [item for item, _ in Counter(items).most_common()]


def _short_path(path: str) -> str:
    pure = PureWindowsPath(path) if "\\" in path else PurePosixPath(path)
    return "/".join(pure.parts[-3:])


def _tags(files: Sequence[str], commands: Sequence[str]) -> list[str]:
    counts: Counter[str] = Counter()
    for f in files:
        suffix = PurePosixPath(f.replace("\\", "/")).suffix.lower()
        if suffix in _LANGUAGES:
            counts[_LANGUAGES[suffix]] += 1
    for c in commands:
        words = c.strip().split()
        if words and words[0] in _COMMAND_TAGS:
            counts[_COMMAND_TAGS[words[0]]] += 1
    return [tag for tag, _ in counts.most_common(8)]


def _importance(prompt_count: int, edited_count: int) -> int:
    score = 1 + (edited_count > 0) + (edited_count > 5) + (prompt_count > 5) + (prompt_count > 20)
    return min(5, score)
