"""A plugin's ask (OpenCode's and Pi's, plugins/shared/memory.js): `plugin_ask.py AGENT recall`
or `plugin_ask.py AGENT history`, an event in Claude Code's shape on stdin (`prompt`, or
`tool_name` and `tool_input`; `session_id`, `cwd`, the session's latest prompt as `task`), and on
stdout `{"context": text}` or nothing. The plugins keep no copy of the deadlines, the breaker,
the once-per-file state or git's files: this is the one transport of every agent.
"""

import os
import sys

sys.dont_write_bytecode = True  # nothing beside the scripts: see librarian_pycache.py
import librarian_pycache as pycache

with pycache.elsewhere():
    import librarian_agents as agents  # siblings, found through sys.path[0] (the script's folder)
    import librarian_memory as memory

WHAT = sys.argv[2] if len(sys.argv) > 2 else ""


def handle(event: dict, agent: str, what: str = WHAT, env=None):
    env = os.environ if env is None else env
    if what == "recall":
        text, outcome = memory.recall(event, env)
    else:  # a file tool's call: which files, by the server's reader of the agent
        _, paths, outcome = memory.touched(event, agent, env)
        text, said = memory.first_history(event, paths, env)  # none for no file
        outcome = f"{outcome}; {said}"
    return ({"context": text} if text else None), outcome


if __name__ == "__main__":
    sys.exit(agents.main(f"plugin {WHAT}", handle))
