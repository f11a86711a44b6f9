"""Stale marks for the lines of a `recurring.md` note (`librarian library consolidate`), added
as the note is injected: a line one of whose files is no longer what its marker says it was
when the note was written is handed on marked "may be stale since <commit>", even if no
consolidation ran since. (A change before that is marked in the note itself.)

No git process: each file is read and named as git names a blob, so the check costs a read of
the few files a line is about, and only when such a note is injected (once per session)."""

import itertools
import json
import os

NAME = "recurring.md"
MARKER = "<!-- librarian line "
STALE = " (may be stale since "


def blob(path: str):
    """A file's content as `git hash-object` names it; None when there is no such file."""
    import hashlib  # only for a note that has such lines

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _outdated(marker: str, root: str):
    """The commit since which a marker's files changed, else None."""
    try:
        facts = json.loads(marker[len(MARKER) : -len(" -->")])
        files, blobs = facts["files"], facts["blobs"]
    except (ValueError, KeyError, TypeError):
        return None  # a line of a checkout that could not be read: nothing to compare
    if not isinstance(files, list) or not isinstance(blobs, list):
        return None
    for name, then in zip(files, blobs, strict=False):
        if isinstance(name, str) and blob(os.path.join(root, name)) != then:
            return facts.get("at") or "the notes were written"
    return None


def marked(text: str, root: str) -> str:
    """`text` with each line its files outdate marked; `root`: the checkout the library is in."""
    lines = text.splitlines()
    for i, (said, marker) in enumerate(itertools.pairwise(lines)):
        if said.startswith("- ") and STALE not in said and marker.startswith(MARKER):
            since = _outdated(marker, root)
            if since:
                lines[i] = f"{said}{STALE}{since})"
    return "\n".join(lines)
