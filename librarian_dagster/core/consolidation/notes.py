"""The files consolidation writes: `recurring.md` in a library folder, one line per cluster with
its sources, and the diff between what a library holds and what the sessions now support.

Each line is followed by a `<!-- librarian line {...} -->` marker with all its sessions: the
PreToolUse hook drops such lines before it injects a note, so they cost the agent nothing."""

import difflib
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from librarian_dagster.core.consolidation.mining import GOTCHA, Line
from librarian_dagster.core.library.paths import LIBRARY_DIRNAME
from librarian_dagster.core.redaction.scan import redact

NOTES_NAME = "recurring.md"
HEADER = "# What recurs here"
INTRO = (
    "<!-- librarian recurring: `librarian library consolidate` writes this file from the sessions"
    " each line cites; run it again rather than edit it -->"
)
CITED = 3
"""Sessions named on a line, newest first; its marker keeps them all."""


def cited(line: Line) -> str:
    named = ", ".join(
        f"{sid[:8]} {when.date().isoformat() if when else 'undated'}"
        for sid, when in line.sessions[:CITED]
    )
    more = len(line.sessions) - CITED
    return f"({len(line.sessions)} sessions: {named}{f' and {more} more' if more > 0 else ''})"


def marker(line: Line) -> str:
    facts = {"kind": line.kind, "key": line.key, "sessions": [s for s, _ in line.sessions]}
    # No ">" inside, so that no key can close the comment early.
    data = json.dumps(facts).replace(">", "\\u003e")
    return f"<!-- librarian line {data} -->"


def render(lines: Sequence[Line], stale: Mapping[str, str] | None = None) -> str:
    """One folder's file; `stale`: a line's key -> the commit since which it may be stale."""
    out = [HEADER, "", INTRO]
    for line in lines:
        lead = "Gotcha: " if line.kind == GOTCHA else ""
        since = (stale or {}).get(line.key)
        mark = f" (may be stale since {since})" if since else ""
        out += [f"- {lead}{line.text} {cited(line)}{mark}", marker(line)]
    text, _ = redact("\n".join(out) + "\n")
    return text


def proposed(lines: Sequence[Line], stale: Mapping[str, str] | None = None) -> dict[str, str]:
    """Folder -> its file, for every folder with a line."""
    by_folder: dict[str, list[Line]] = defaultdict(list)
    for line in lines:
        by_folder[line.folder].append(line)
    return {folder: render(held, stale) for folder, held in sorted(by_folder.items())}


def current(library: Path) -> dict[str, str]:
    """Folder -> the `recurring.md` a library holds there."""
    held = {}
    for path in sorted(library.rglob(NOTES_NAME)) if library.is_dir() else []:
        folder = path.parent.relative_to(library).as_posix()
        held["" if folder == "." else folder] = path.read_text(encoding="utf-8")
    return held


def _name(folder: str) -> str:
    return "/".join(p for p in (LIBRARY_DIRNAME, folder, NOTES_NAME) if p)


def diff(now: Mapping[str, str], then: Mapping[str, str]) -> str:
    """A unified diff from the files `now` to the files `then` ("" when they are the same)."""
    out = []
    for folder in sorted(set(now) | set(then)):
        before, after = now.get(folder, ""), then.get(folder, "")
        if before != after:
            name = _name(folder)
            out.extend(difflib.unified_diff(
                before.splitlines(keepends=True), after.splitlines(keepends=True),
                "a/" + name if folder in now else "/dev/null",
                "b/" + name if folder in then else "/dev/null",
            ))  # fmt: skip
    return "".join(out)


def write(library: Path, now: Mapping[str, str], then: Mapping[str, str]) -> list[str]:
    """Make the library hold `then`: what changed, by file name."""
    changed = []
    for folder in sorted(set(now) | set(then)):
        if now.get(folder) == then.get(folder):
            continue
        path = library / folder / NOTES_NAME if folder else library / NOTES_NAME
        if folder in then:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(then[folder], encoding="utf-8")
        else:
            path.unlink(missing_ok=True)
        changed.append(_name(folder))
    return changed
