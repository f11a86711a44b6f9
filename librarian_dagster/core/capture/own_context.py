"""Librarian's own words in a transcript: the context its hooks and plugins handed the agent
(recalled sessions, a file's history, library notes, the tagging reminder). Every agent keeps
what a hook added (as a meta turn, or appended to a prompt or a tool's output), so a session
read back would hold the memory it was given, and recall would find its own echo. Each of those
texts starts with one of HEADERS, and ends the text it was added to; `without_own_context` cuts
it off there, with the wrapper the agent put around it.

The headers are those of the recall server's text for every agent's hooks and plugins
(core/recall/hook_text.py) and of the library notes' hooks (hooks/librarian_inject.py,
user_prompt_submit.py), which tests/core/test_own_context.py holds equal to these.

Standard library only: hooks and the MCP server import this without dagster.
"""

import re

__all__ = ["HEADERS", "without_own_context"]

HEADERS = (
    "Librarian remembers past sessions that may bear on this prompt",
    "Librarian remembers earlier sessions that worked on ",
    "Librarian notes for ",
    "Librarian: this project keeps notes in ",
)
_START = re.compile("|".join(re.escape(h) for h in HEADERS))
# What an agent wraps around or puts before a hook's text: Gemini CLI's <hook_context>, Copilot
# CLI's <system_reminder> and its "Additional ... from ... hook(s):" lines.
_WRAPPER = re.compile(
    r"(?:<hook_context>|<system[_-]reminder>|Additional (?:context|guidance) from \w+ hooks?:"
    r"|Tool \"[^\"]*\" succeeded\.)\s*\Z"
)


def without_own_context(text: str) -> str:
    """`text` without the context Librarian added to it (from its header to the end)."""
    found = _START.search(text) if "Librarian" in text else None  # the common case, at C speed
    if found is None:
        return text
    kept = text[: found.start()].rstrip()
    while (wrapper := _WRAPPER.search(kept)) is not None:
        kept = kept[: wrapper.start()].rstrip()
    return kept
