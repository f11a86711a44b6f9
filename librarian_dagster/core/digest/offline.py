"""The offline digester: the digest built from what the session itself says, with no network.

It fills the schema (core/digest/schema.py) deterministically from the user's typed prompts, the
assistant's closing message of each exchange, the tools used and the files touched. It needs no
key, so the whole product runs on a fresh machine; an LLM digester (Gemini/Vertex,
core/digest/llm.py) writes better prose into the same fields.
"""

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath, PureWindowsPath

from librarian_dagster.core.capture.transcripts import Session
from librarian_dagster.core.capture.turns import Turn
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


_EDIT_TOOLS = {"Edit", "Write", "MultiEdit", "NotebookEdit"}
_READ_TOOLS = {"Read", "Glob", "Grep", "LS"}


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
            target = current.files_edited if use.name in _EDIT_TOOLS else current.files_read
            if use.name in _EDIT_TOOLS or use.name in _READ_TOOLS:
                target.extend(use.file_paths)
            if use.command:
                current.commands.append(use.command)
            if use.is_error:
                pending_errors.add(len(result) - 1)
        if turn.kind == "tool_result" and (len(result) - 1) in pending_errors and turn.text:
            first = _first_line(turn.text)
            if first and len(current.errors) < 3:
                current.errors.append(first)
            pending_errors.discard(len(result) - 1)
    return result


# -- the offline digester -------------------------------------------------------------------------

_PROBLEM_WORDS = re.compile(
    r"\b(error|errors|fail\w*|bug|broken|crash\w*|exception|panic\w*|traceback|wrong|"
    r"doesn'?t work|not working|issue|regress\w*|flaky|hang\w*|timeout|leak\w*)\b",
    re.IGNORECASE,
)
_OPEN_WORDS = re.compile(
    r"\b(todo|next step\w*|follow[- ]up|remaining|not yet|still need\w*|left to|later|"
    r"should also|could also|open question\w*|unresolved|out of scope)\b",
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

_MAX_WORKED_ON = 12
_MAX_SOLUTION = 12
_PROMPT_CHARS = 300
_REPLY_CHARS = 420


class OfflineDigester:
    """Builds the digest from the session's own words and actions; deterministic, no network."""

    model_name = f"offline-v{DIGEST_VERSION}"

    def digest(self, session: Session, known_tags: Sequence[str] = ()) -> DigestResult:
        parts = exchanges(session.turns)
        prompts = [x.prompt for x in parts if x.prompt]
        edited = _ranked(f for x in parts for f in x.files_edited)
        commands = [c for x in parts for c in x.commands]

        worked_on = _dedupe(_shorten(p, _PROMPT_CHARS) for p in _spread(prompts, _MAX_WORKED_ON))
        if edited:
            worked_on.append("Files changed: " + ", ".join(_short_path(f) for f in edited[:8]))

        problem = _dedupe(_shorten(p, _PROMPT_CHARS) for p in prompts if _PROBLEM_WORDS.search(p))[
            :5
        ]
        problem += _dedupe("Error seen: " + _shorten(e, 200) for x in parts for e in x.errors)[:3]

        closing = [_shorten(x.replies[-1], _REPLY_CHARS) for x in parts if x.replies]
        solution = _dedupe(_spread(closing, _MAX_SOLUTION))
        notable = _notable_commands(commands)
        if notable:
            solution.append("Commands run: " + "; ".join(notable))

        open_items = self._open_items(parts)
        summary = self._summary(session, prompts, edited)
        return DigestResult(
            digest=Digest(
                summary=summary,
                worked_on=worked_on or [summary],
                problem=problem,
                solution=solution,
                open_items=open_items,
                tags=_tags(edited + [f for x in parts for f in x.files_read], commands),
                domain="technical" if (edited or commands) else "reflections",
                importance=_importance(len(prompts), len(edited)),
            ),
            model=self.model_name,
        )

    @staticmethod
    def _open_items(parts: Sequence[Exchange]) -> list[str]:
        if not parts:
            return []
        last = parts[-1]
        if last.prompt and not last.replies:
            return ["Unanswered at the end: " + _shorten(last.prompt, _PROMPT_CHARS)]
        if not last.replies:
            return []
        sentences = re.split(r"(?<=[.!?])\s+|\n+", last.replies[-1])
        hits = [_shorten(s.strip(" -*#"), 240) for s in sentences if _OPEN_WORDS.search(s)]
        return _dedupe(h for h in hits if len(h) > 12)[:5]

    @staticmethod
    def _summary(session: Session, prompts: Sequence[str], edited: Sequence[str]) -> str:
        if session.title:
            head = session.title.strip().rstrip(".")
        elif prompts:
            head = _first_sentence(prompts[0])
        else:
            head = "Session with no typed prompt"
        where = f" in {session.project}" if session.project else ""
        touched = f" ({len(edited)} files changed)" if edited else ""
        return _shorten(f"{head}{where}{touched}.", 240)


# -- helpers --------------------------------------------------------------------------------------

_TAG_NOISE = re.compile(r"<[^>]{1,80}>|\[(?:image|document)[^\]]{0,80}\]|\[Image #\d+\]", re.I)
# Context an IDE or Claude Code wraps into the user's message: not what the user asked.
_INJECTED = re.compile(
    r"<(ide_selection|ide_opened_file|system-reminder|local-command-stdout)>.*?</\1>", re.S
)
_BARE_COMMAND = re.compile(r"^/[\w:-]+$")


def _clean(text: str) -> str:
    text = _INJECTED.sub(" ", text)
    text = _TAG_NOISE.sub(" ", text)
    return re.sub(r"\s+", " ", text).strip()


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line
    return ""


def _first_sentence(text: str) -> str:
    match = re.match(r"(.{12,200}?[.!?])(\s|$)", text)
    return (match.group(1) if match else _shorten(text, 160)).rstrip(".!? ")


def _shorten(text: str, limit: int) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > limit * 0.6 else cut).rstrip(",;: ") + "…"


def _dedupe(items: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        key = item.casefold()
        if item and key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _spread(items: Sequence[str], limit: int) -> list[str]:
    """At most `limit` items, spread evenly over the session and always keeping the first/last."""
    if len(items) <= limit:
        return list(items)
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


def _ranked(items: Iterable[str]) -> list[str]:
    return [item for item, _ in Counter(items).most_common()]


def _short_path(path: str) -> str:
    pure = PureWindowsPath(path) if "\\" in path else PurePosixPath(path)
    return "/".join(pure.parts[-3:])


def _notable_commands(commands: Sequence[str]) -> list[str]:
    ranked = _ranked(_shorten(_first_line(c), 80) for c in commands if c.strip())
    return ranked[:5]


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
