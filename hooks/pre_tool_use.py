"""PreToolUse hook (Edit|Write|MultiEdit|NotebookEdit): inject the library notes for the file.

Walks up from the edited file to the nearest `_memory_library/`, then reads the `*.md` notes of the
mirrored folder and of each parent level up to the root (shown as `global`), most specific first,
within a character budget. A note already injected in this session is not injected again unless
it changed. Never sets `permissionDecision`: adding context must not bypass the permission prompt.
The logic is in `librarian_inject.py`, whose bytecode Python caches (in the plugin's data folder).
"""

import sys

sys.dont_write_bytecode = True  # nothing beside the scripts: see librarian_pycache.py
import librarian_pycache as pycache

with pycache.elsewhere():
    import librarian_hooklib as lib  # siblings, found through sys.path[0] (the script's folder)
    from librarian_inject import HOOK, handle


def main() -> int:
    return lib.run(HOOK, handle)


if __name__ == "__main__":
    sys.exit(main())
