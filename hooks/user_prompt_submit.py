"""UserPromptSubmit hook: the reminder to keep notes (librarian_inject.py) and the past sessions
that bear on the prompt (librarian_memory.py), in one process and one `additionalContext`,
reminder first: Python starts once per prompt, and a failure of recall cannot lose the reminder.
"""

import os
import sys

sys.dont_write_bytecode = True  # nothing beside the scripts: see librarian_pycache.py
import librarian_pycache as pycache

with pycache.elsewhere():
    import librarian_agents as agents  # siblings, found through sys.path[0] (the script's folder)
    import librarian_inject as inject
    import librarian_memory as memory


def handle(event: dict, env=None, agent: str = agents.HOME_AGENT):
    """`event` in Claude Code's shape (librarian_agents.event_of); `agent`: whose hook this is
    (the command's argument), which says what its output looks like."""
    env = os.environ if env is None else env
    reminded, outcome = inject.remind(event, env)
    recalled, recall_outcome = memory.recall(event, env)  # never raises
    output = agents.answer(agent, event, "UserPromptSubmit", (reminded, recalled))
    return output, f"{outcome}; {recall_outcome}"


if __name__ == "__main__":
    sys.exit(agents.main("user_prompt_submit", handle))
