"""Where the hooks' bytecode goes: the plugin's data folder, never the plugin's own folder.

Once installed, the plugin folder may be read-only, and anything written there changes the
installed plugin; CLAUDE_PLUGIN_DATA is the folder Claude Code gives a plugin for its own files.
Each hook script turns bytecode writing off before its first import of ours (this module, the
one file compiled on every run, is kept tiny), then imports the hook modules `with elsewhere():`,
so that their bytecode is cached under CLAUDE_PLUGIN_DATA (else ~/.claude/librarian). Caching
stays on: compiling the hook modules on every run would cost a quarter of a hook's time
(docs/decisions/0015). A cache folder that cannot be written is no error: Python then compiles
from source, silently.

Only our modules: a prefix moves every module's cache, and the standard library's is better
where it is (compiled once at install, read-only, shared). So the prefix is set for the imports
of our modules alone, and the standard library modules they need are loaded before it is.
"""

import json  # noqa: F401  (loaded from the standard library's own cache, see above)
import os
import sys
import time  # noqa: F401  (as json)


class elsewhere:  # lower case: it reads as a statement, `with elsewhere():`
    """While inside, bytecode is read from and written to the data folder, not beside sources."""

    def __enter__(self) -> None:
        data = os.environ.get("CLAUDE_PLUGIN_DATA") or os.path.join(
            os.path.expanduser("~"), ".claude", "librarian"
        )
        sys.pycache_prefix = os.path.join(data, "pycache")
        sys.dont_write_bytecode = False

    def __exit__(self, *exc: object) -> None:
        sys.pycache_prefix = None
        sys.dont_write_bytecode = True
