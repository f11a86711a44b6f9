"""UserPromptSubmit hook: remind the agent, once per session, how to tag learnings.

Only where a library exists (walking up from the session's cwd, or `LIBRARIAN_PATH`): a project
without `_memory_library/` sees nothing from Librarian.
"""

import os
import sys

import librarian_hooklib as lib  # sibling module, found through sys.path[0] (the script's folder)

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


def handle(event: dict, env=None):
    env = os.environ if env is None else env
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
    text = reminder(*found)
    output = {
        "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": text}
    }
    return output, "reminded"


def main() -> int:
    return lib.run(HOOK, handle)


if __name__ == "__main__":
    sys.exit(main())
