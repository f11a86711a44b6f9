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
    import librarian_agents as agents
    import librarian_hooklib as lib  # siblings, found through sys.path[0] (the script's folder)
    import librarian_memory as memory


def handle(event: dict, agent: str, what: str, env=None):
    env = os.environ if env is None else env
    if what == "recall":
        text, outcome = memory.recall(event, env)
    else:  # a file tool's call: which files, by the server's reader of the agent
        _, paths, outcome = memory.touched(event, agent, env)
        if paths:
            text, said = memory.first_history(event, paths, env)
            outcome = f"{outcome}; {said}"
        else:
            text = None
    return ({"context": text} if text else None), outcome


def main() -> int:
    agent = agents.agent_argument(sys.argv)
    what = sys.argv[2] if len(sys.argv) > 2 else ""
    return lib.run(f"plugin {what}", lambda event: handle(event, agent, what), agent)


if __name__ == "__main__":
    sys.exit(main())
