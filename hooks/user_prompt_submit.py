"""UserPromptSubmit hook: the tagging reminder, once per session where a library exists (walking
up from the cwd, or `LIBRARIAN_PATH`), and the past sessions that bear on the prompt
(`librarian_memory.py`), in one process and one `additionalContext`, reminder first: Python
starts once per prompt, and a failure of recall cannot lose the reminder.
"""

import os
import sys

sys.dont_write_bytecode = True  # nothing beside the scripts: see librarian_pycache.py
import librarian_pycache as pycache

with pycache.elsewhere():
    import librarian_agents as agents
    import librarian_hooklib as lib  # siblings, found through sys.path[0] (the script's folder)
    import librarian_memory as memory

HOOK = "user_prompt_submit"


def reminder(library: str, root: str) -> str:
    scratch = os.path.join(library, lib.SCRATCH_NAME)
    return (
        f"Librarian: this project keeps notes in {library} (it mirrors the folders of {root}). "
        f"When you learn something worth keeping (a pattern, a pitfall, a decision), append it to "
        f"{scratch} as a block:\n"
        "## [TAG: <folder relative to the project root, or global>, "
        "type: <patterns|tech|product>]\n"
        "- one learning per bullet\n"
        "At the end of each turn the block is filed into "
        f"{lib.LIBRARY_DIRNAME}/<folder>/<type>.md. Blocks without `type:` stay in the "
        "scratch file."
    )


def remind(event: dict, env) -> tuple[str | None, str]:
    found = lib.find_library(lib.event_cwd(event, env), env)
    if found is None:
        return None, "no library"
    state_path = lib.open_session_state(event, ".reminded", env)
    if state_path:
        try:
            # O_EXCL makes "once per session" hold even if two prompts race.
            os.close(os.open(state_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return None, "already reminded"
    return reminder(*found), "reminded"


def handle(event: dict, env=None, agent: str = agents.HOME_AGENT):
    """`event` in Claude Code's shape (librarian_agents.event_of); `agent`: whose hook this is
    (the command's argument), which says what its output looks like."""
    env = os.environ if env is None else env
    reminded, outcome = remind(event, env)
    recalled, recall_outcome = memory.recall(event, env)  # never raises
    texts = [t for t in (reminded, recalled) if t]
    outcome = f"{outcome}; {recall_outcome}"
    if not texts:
        return None, outcome
    # Claude Code delivers each hook's additionalContext; one hook joins its own two parts.
    text = "\n\n".join(texts)
    name = agents.event_name(event, "UserPromptSubmit")
    return agents.output_of(agent, name, text), outcome


def main() -> int:
    agent = agents.agent_argument(sys.argv)
    return lib.run(HOOK, lambda raw: handle(agents.event_of(agent, raw), agent=agent), agent)


if __name__ == "__main__":
    sys.exit(main())
