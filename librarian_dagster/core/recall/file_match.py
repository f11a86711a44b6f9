"""Whether two absolute paths, from two sessions' working directories, name the same file of the
same repository, when neither repository need be on this machine.

A transcript says where a session ran (its cwd), never where its repository's root is. The root
is inferred (`root_of`): the shallowest folder, at or above the cwd, that some session of the
store worked in, without leaving a worktree (`.worktrees/<name>`, `.claude/worktrees/<name>`,
`<repository>.worktrees/<name>`). A session started in `apps/api` of a repository that other
sessions worked on from its root gets that root; one whose root no session shows keeps its cwd,
which is deeper than the truth and so only loosens the match below, never breaks it.

Two files match (`same_file`) when the repositories have the same name (the root's folder, a
worktree's repository above it) and, read from the end, the paths agree at least as far as each
lies below its root (or below a folder above it of that name, for a root inferred too deep):
`/a/cli/cmd/x.go` in a session of `/a/cli` and `/b/cli/.worktrees/2/cmd/x.go` in one of
`/b/cli/.worktrees/2` agree on `cmd/x.go`. Another project's `README.md` differs by
its repository's name; `docs/README.md` and `README.md` of one repository differ below the root.
The same absolute path is the same file, whatever its sessions' roots. Where a session named
its repository's remote, that repository's name stands for its root's folder name.
"""

from collections.abc import Iterable, Mapping

from librarian_dagster.core.capture.files import project_from, worktrees_of
from librarian_dagster.core.capture.touches import components

WORKTREE_MARKERS = (".worktrees", "worktrees")
"""Folders whose children are worktrees of the repository above them (`.claude/worktrees` too:
its last part)."""


def ancestors(path: str) -> list[str]:
    """`path` and the folders above it, deepest first, in `normal_path` spelling, stopping below
    a worktree marker: a worktree's root is never above the worktree."""
    parts = path.split("/")
    found = []
    for end in range(len(parts), 1, -1):
        if parts[end - 1] in WORKTREE_MARKERS or worktrees_of(parts[end - 1]):
            break
        found.append("/".join(parts[:end]))
    return found


def root_of(cwd: str, worked_in: Iterable[str]) -> str:
    """The repository root a session in `cwd` most likely had: the shallowest of `cwd` and the
    folders above it that is in `worked_in` (the cwds sessions ran in), else `cwd`."""
    known = set(worked_in)
    root = cwd
    for folder in ancestors(cwd):
        if folder in known:
            root = folder
    return root


def repository_name(root: str) -> str:
    """What the repository of a root is called: its folder, a worktree's repository above it."""
    return project_from(root, None).casefold()


def below(path: tuple[str, ...], root: tuple[str, ...]) -> int | None:
    """How many parts of `path` lie below `root`; None when it is not inside it."""
    if len(path) <= len(root) or path[: len(root)] != root:
        return None
    return len(path) - len(root)


def same_file(
    path: str, root: str, other: str, other_root: str, known: Mapping[str, str] | None = None
) -> bool:
    """Whether `path` (of a session whose root is `root`) and `other` (of `other_root`) are one
    file of one repository; see the module's docstring. `known`: the repository's name of roots
    whose remote a session named (`cli` for `/b/20260205-cli`): two people's checkouts of one
    repository, in folders named apart, are one repository by it.

    A root that no session showed may be too deep (a session that only ever ran in `apps/api`):
    the folders above it are tried too, by name, and from there the paths must agree the whole
    way down, which only a higher folder of the same name and the same tree below can pass.
    """
    if path == other:
        return True
    mine, theirs = components(path), components(other)
    common = 0
    for a, b in zip(reversed(mine), reversed(theirs), strict=False):
        if a != b:
            break
        common += 1
    if common == 0:
        return False
    known = known or {}

    def name(folder: str) -> str:
        return known.get(folder) or repository_name(folder)

    named = {}
    for folder in [root, *ancestors(root)[1:]]:
        depth = below(mine, components(folder))
        if depth is not None and depth <= common:
            named.setdefault(name(folder), depth)
    for folder in [other_root, *ancestors(other_root)[1:]]:
        depth = below(theirs, components(folder))
        if depth is None or depth > common:
            continue
        if name(folder) in named:
            return True
    return False
