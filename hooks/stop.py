"""Stop hook: sync recent auto-memory entries and route tagged scratch blocks into the library.

Fires after every turn. Prints nothing (any Stop output could keep Claude going); what it did goes
to the debug log. With `stop_hook_active` (Claude is already continuing because a Stop hook asked
it to) it does nothing, so it never adds to a stop-hook loop; the next ordinary Stop catches up.
"""

import os
import sys
import time

sys.dont_write_bytecode = True  # nothing beside the scripts: see librarian_pycache.py
import librarian_pycache as pycache

with pycache.elsewhere():
    import librarian_hooklib as lib  # a sibling, found through sys.path[0] (the script's folder)

HOOK = "stop"


def handle(event: dict, env=None):
    env = os.environ if env is None else env
    if event.get("stop_hook_active") is True:
        return None, "skipped: stop_hook_active"
    cwd = lib.event_cwd(event, env)
    found = lib.find_library(cwd, env)
    if found is None:
        return None, "no library"
    library = found[0]

    import hashlib  # noqa: F401  (the standard library's, from its own cache: see pycache)

    with pycache.elsewhere():
        import librarian_routing as routing  # only the Stop hook pays for hashlib and the lock

    with routing.LibraryLock(library):
        memory = routing.sync_auto_memory(library, cwd, time.time(), env)
        scratch = routing.route_scratch(library)
    outcome = (
        f"routed={scratch['routed']} duplicates={scratch['duplicates']} kept={scratch['kept']} "
        f"invalid={len(scratch['invalid'])} auto_memory={memory['synced']}"
    )
    if scratch["invalid"]:
        outcome += " (" + "; ".join(scratch["invalid"])[:400] + ")"
    return None, outcome


def main() -> int:
    return lib.run(HOOK, handle)


if __name__ == "__main__":
    sys.exit(main())
