"""Where the hooks' bytecode goes: the plugin's data folder, never the plugin's own folder, which
may be read-only once installed (anything written there changes the installed plugin).

Each hook script turns bytecode writing off before its first import of ours (this module, the
one file compiled on every run, is kept tiny), then imports the hook modules `with elsewhere():`,
whose bytecode is then cached under CLAUDE_PLUGIN_DATA (else ~/.claude/librarian): compiling them
on every run would cost a quarter of a hook's time (docs/decisions/0015). A cache folder that
cannot be written is no error. Only our modules move: the standard library's cache is better
where it is (compiled at install, shared), so what they need of it loads before the prefix.
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
