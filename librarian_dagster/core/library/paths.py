"""Where a Librarian library is: its folder name, the walk-up and `LIBRARIAN_PATH`, defined once.

Shared by the hooks (run by the user's bare `python3 -E -S` from the plugin folder, on every edit)
and by the Cline importer (as a script, or from the installed package). So: standard library only,
nothing imported but `os`, no work at import time. Why it lives here: docs/decisions/0004.
"""

import os

LIBRARY_DIRNAME = "_memory_library"
# Names the library folder itself; the tree it mirrors is then that folder's parent.
PATH_ENV = "LIBRARIAN_PATH"


def explicit_library(env=None) -> str | None:
    """The folder `LIBRARIAN_PATH` names (absolute, `~` expanded), or None when it is unset."""
    env = os.environ if env is None else env
    value = env.get(PATH_ENV)
    return os.path.abspath(os.path.expanduser(value)) if value else None


def nearest_library(start_dir: str) -> str | None:
    """The nearest existing `_memory_library/` in start_dir or in a folder above it."""
    current = os.path.abspath(start_dir)
    while True:
        candidate = os.path.join(current, LIBRARY_DIRNAME)
        if os.path.isdir(candidate):
            return candidate
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def library_for(start_dir: str, env=None) -> str | None:
    """The library that applies at start_dir: `LIBRARIAN_PATH` when set, whether or not the folder
    exists yet (the importer may create it), else the nearest existing one above start_dir."""
    return explicit_library(env) or nearest_library(start_dir)


def find_library(start_dir: str, env=None) -> tuple[str, str] | None:
    """(library, tree root) of the existing library that applies at start_dir, else None.

    A library mirrors the tree of the folder that holds it, so the root is always its parent.
    A `LIBRARIAN_PATH` that names no folder means no library: it is never a reason to walk up.
    """
    library = library_for(start_dir, env)
    if library is None or not os.path.isdir(library):
        return None
    return library, os.path.dirname(library)
