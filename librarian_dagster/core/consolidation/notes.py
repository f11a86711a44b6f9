"""The files consolidation writes in a library folder, and the diff between what a library holds
and what the sessions now support:
- `recurring.md`: one line per cluster, citing its newest sessions, each followed by a
  `<!-- librarian line {...} -->` marker (its key, its files, and the commit and blob names they
  had as it was written) that the PreToolUse hook reads to mark a stale line and drops before it
  injects the note;
- `.recurring.json`: each line's every session, the commit it was seen at and what it names;
- `.recurring-archive.md`: the lines retired or superseded, and why. Nothing is deleted
  silently: a line leaves the archive only when every session it cites is forgotten.
Dot files are never injected (the hook reads `*.md` not starting with a dot)."""

import difflib
import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from librarian_dagster.core.consolidation.mining import COMMAND, GOTCHA, Line
from librarian_dagster.core.library.paths import LIBRARY_DIRNAME
from librarian_dagster.core.redaction.scan import redact

NOTES_NAME = "recurring.md"
SOURCES_NAME = ".recurring.json"
ARCHIVE_NAME = ".recurring-archive.md"
OWN_NAMES = (NOTES_NAME, SOURCES_NAME, ARCHIVE_NAME)
HEADER = "# What recurs here"
ARCHIVE_HEADER = "# Retired and superseded (never injected)"
INTRO = (
    "<!-- librarian recurring: `librarian library consolidate` writes this file from the sessions"
    " each line cites; run it again rather than edit it -->"
)
MARKER = "<!-- librarian line "
CITED = 3
"""Sessions named on a line, newest first; `.recurring.json` keeps them all."""
MARKED_FILES = 8
"""Files a line's marker names for the hook's staleness check."""


@dataclass(frozen=True)
class Archived:
    line: Line
    why: str
    """"retired: ..." or "superseded by ...": what the archive says of it."""


def cited(line: Line) -> str:
    named = ", ".join(
        f"{sid[:8]} {when.date().isoformat() if when else 'undated'}"
        for sid, when in line.sessions[:CITED]
    )
    more = len(line.sessions) - CITED
    return f"({len(line.sessions)} sessions: {named}{f' and {more} more' if more > 0 else ''})"


def _marker(facts: Mapping[str, object]) -> str:
    # No ">" inside, so that no key can close the comment early.
    data = json.dumps(facts).replace(">", "\\u003e")
    return f"{MARKER}{data} -->"


@dataclass(frozen=True)
class Code:
    """What the checkout said as the notes were written, for the hook to tell a line gone stale
    since: its commit, and each file's content as git names it (None: no such file)."""

    commit: str | None
    blobs: Mapping[str, str | None]


def render(lines: Sequence[Line], stale: Mapping[str, str] | None = None,
           code_then: Code | None = None) -> str:  # fmt: skip
    """One folder's `recurring.md`; `stale`: a line's key -> the commit since which it may be
    stale; `code_then`: the checkout as it is written, which the marker of each line keeps."""
    out = [HEADER, "", INTRO]
    for line in lines:
        lead = "Gotcha: " if line.kind == GOTCHA else ""
        since = (stale or {}).get(line.key)
        mark = f" (may be stale since {since})" if since else ""
        out.append(f"- {lead}{line.text} {cited(line)}{mark}")
        files = list(line.files[:MARKED_FILES]) if line.kind != COMMAND else []
        facts: dict[str, object] = {"key": line.key, "files": files}
        if code_then and files and not since:
            facts |= {"at": code_then.commit, "blobs": [code_then.blobs.get(f) for f in files]}
        out.append(_marker(facts))
    return _redacted(out)


def sources(lines: Sequence[Line], commits: Mapping[str, str | None]) -> str:
    """One folder's `.recurring.json`: every line's sessions, commit and quotes."""
    held = [
        {
            "key": line.key,
            "kind": line.kind,
            "sessions": [[s, w.isoformat() if w else None] for s, w in line.sessions],
            "commit": commits.get(line.key),
            "names": list(line.quotes),
            "text": line.text,
            "mined": line.mined,
        }
        for line in lines
    ]
    text, _ = redact(json.dumps({"lines": held}, indent=1, sort_keys=True) + "\n")
    return text


def wordings(files: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """A line's key -> (its wording as mined, the wording a model gave it), from the sources
    files among `files`."""
    found = {}
    for path, text in files.items():
        if path.endswith(SOURCES_NAME):
            for held in json.loads(text).get("lines", []):
                if held.get("mined") and held.get("text"):
                    found[held["key"]] = (held["mined"], held["text"])
    return found


def archive(held: str | None, archived: Sequence[Archived], known: set[str]) -> str | None:
    """The folder's archive: what it held (less the entries whose every session is forgotten,
    `known` being the sessions the store still has), then what is archived now."""
    entries = [e for e in _entries(held or "") if set(e[1]) & known]
    seen = {text for text, _ in entries}
    for item in archived:
        text = f"- {item.line.text} {cited(item.line)}: {item.why}"
        if text not in seen:
            seen.add(text)
            entries.append((text, [s for s, _ in item.line.sessions]))
    if not entries:
        return None
    out = [ARCHIVE_HEADER, ""]
    for text, sessions in entries:
        out += [text, _marker({"sessions": sessions})]
    return _redacted(out)


def archived(text: str) -> list[str]:
    """The entries an archive holds, as it says them."""
    return [said for said, _ in _entries(text)]


def _entries(text: str) -> list[tuple[str, list[str]]]:
    lines = text.splitlines()
    found = []
    for said, marker in itertools.pairwise(lines):
        if said.startswith("- ") and marker.startswith(MARKER):
            found.append((said, json.loads(marker[len(MARKER) : -len(" -->")])["sessions"]))
    return found


def _redacted(lines: Iterable[str]) -> str:
    text, _ = redact("\n".join(lines) + "\n")
    return text


def path_of(folder: str, name: str) -> str:
    """A file's path inside the library."""
    return f"{folder}/{name}" if folder else name


def current(library: Path) -> dict[str, str]:
    """Path inside the library -> text, of every file consolidation writes there."""
    held = {}
    for name in OWN_NAMES:
        for path in sorted(library.rglob(name)) if library.is_dir() else []:
            held[path.relative_to(library).as_posix()] = path.read_text(encoding="utf-8")
    return held


def diff(now: Mapping[str, str], then: Mapping[str, str]) -> str:
    """A unified diff from the files `now` to the files `then` ("" when they are the same)."""
    out = []
    for path in sorted(set(now) | set(then)):
        before, after = now.get(path, ""), then.get(path, "")
        if before != after:
            name = f"{LIBRARY_DIRNAME}/{path}"
            out.extend(difflib.unified_diff(
                before.splitlines(keepends=True), after.splitlines(keepends=True),
                "a/" + name if path in now else "/dev/null",
                "b/" + name if path in then else "/dev/null",
            ))  # fmt: skip
    return "".join(out)


def write(library: Path, now: Mapping[str, str], then: Mapping[str, str]) -> list[str]:
    """Make the library hold `then`: what changed, by path."""
    changed = []
    for path in sorted(set(now) | set(then)):
        if now.get(path) == then.get(path):
            continue
        target = library / path
        if path in then:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(then[path], encoding="utf-8")
        else:
            target.unlink(missing_ok=True)
        changed.append(f"{LIBRARY_DIRNAME}/{path}")
    return changed


_SOURCES = re.compile(r" \(\d+ sessions: [^)]*\)( \(may be stale since [^)]*\))?$")


def claims(text: str) -> list[str]:
    """What a `recurring.md` says, without its sources and stale marks: a change of these is a
    person's to make; a change of the rest (which sessions, how many, what changed since) not."""
    return [_SOURCES.sub("", line) for line in text.splitlines() if line.startswith("- ")]
