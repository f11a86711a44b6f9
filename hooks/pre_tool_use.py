"""PreToolUse hook (Read|Edit|Write|MultiEdit|NotebookEdit): what is known about the file, in
one `additionalContext`, notes first: before an edit, the library notes for the file
(`librarian_inject.py`); at the first Read or edit of a file in a session, the earlier sessions
that changed it (`librarian_memory.py`). Never a `permissionDecision` or a changed input: context
must not bypass the permission prompt or alter what the agent asked for.
"""

import os
import sys

sys.dont_write_bytecode = True  # nothing beside the scripts: see librarian_pycache.py
import librarian_pycache as pycache

with pycache.elsewhere():
    import librarian_agents as agents  # siblings, found through sys.path[0] (the script's folder)
    import librarian_inject as inject
    import librarian_memory as memory

READS = ("Read",)  # hooks.json's other tools change the file


def handle(event: dict, env=None, agent: str = agents.HOME_AGENT):
    """`event` in Claude Code's shape (librarian_agents.event_of); `agent`: whose hook this is
    (the command's argument). Claude Code's tool calls name their file; another agent's (a shell
    command, a patch) are read by the server's reader of it."""
    env = os.environ if env is None else env
    if agent == agents.HOME_AGENT:
        path = inject.target_file(event)
        if path is None:
            return None, "no file path"
        paths, changes = [path], event.get("tool_name") not in READS
    else:
        action, paths, outcome = memory.touched(event, agent, env)  # never raises
        if not paths:
            return None, outcome
        changes = action == "change"
    noted, outcome = inject.notes(event, paths[0], env) if changes else (None, "a read")
    recalled, history_outcome = memory.first_history(event, paths, env)  # never raises
    output = agents.answer(agent, event, "PreToolUse", (noted, recalled))
    return output, f"{outcome}; {history_outcome}"


if __name__ == "__main__":
    sys.exit(agents.main("pre_tool_use", handle))
