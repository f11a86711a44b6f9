"""The files an `apply_patch` names: what its patch text adds, updates, deletes or moves. Codex,
Copilot CLI and OpenCode (for GPT models) take the same patch format, read here once.

The format (codex-rs/apply-patch) names each file on a line of its own:
`*** Add File: p`, `*** Update File: p` (optionally followed by `*** Move to: q`) and
`*** Delete File: p`. Every one of them is a file the patch changed.

Standard library only: hooks and the MCP server import this without dagster.
"""

import posixpath
import re

__all__ = ["BEGIN", "joined", "patch_paths"]

BEGIN = "*** Begin Patch"

_DRIVE = re.compile(r"[A-Za-z]:[\\/]")
# Literal first (`re` then skips between occurrences of `*** `, where a leading `^` made it try
# every position of a long patch); a match must still begin a line (`patch_paths` checks).
_FILE_LINE = re.compile(r"\*\*\* (?:Add File|Update File|Delete File|Move to): *(.+?)\s*$", re.M)


def patch_paths(patch: str, workdir: str | None = None) -> tuple[str, ...]:
    """Every path the patch names, once each, in order. A relative path is joined to `workdir`
    when one is given (the call ran somewhere other than the session's cwd), else kept as the
    patch names it."""
    # A match in mid-line ends on its own line (or blank ones), never hiding one that begins
    # the next: leaving it out finds what `^...` would.
    found = (
        m.group(1)
        for m in _FILE_LINE.finditer(patch)
        if m.start() == 0 or patch[m.start() - 1] == "\n"
    )
    return tuple(dict.fromkeys(joined(p, workdir) for p in found if p))


def joined(path: str, workdir: str | None) -> str:
    """`path` under `workdir` when it is relative and a workdir is given; else as it is."""
    if not workdir or path.startswith(("/", "\\")) or _DRIVE.match(path):
        return path
    return posixpath.normpath(posixpath.join(workdir, path))
