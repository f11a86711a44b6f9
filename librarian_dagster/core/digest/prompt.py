"""The LLM digester's prompts, versioned: every word an LLM is told lives in this file.

Bump `PROMPT_VERSION` whenever a prompt here changes. The version is part of the digest's key
(redacted content hash, prompt version, model): stored digests made with another version are
written again on their session's next run, so a backfill re-digests everything.
"""

from collections.abc import Sequence

from librarian_dagster.core.digest.schema import DOMAINS

PROMPT_VERSION = 1

SYSTEM = """\
You write the memory of a coding session so that a developer, weeks later, can find it by asking
"have I dealt with this before?". You are given the session (already redacted: secrets appear as
[REDACTED:<kind>]) as its exchanges: what the user asked, the assistant's final reply, the tools
used, the files touched and the errors seen. Fill the JSON schema:
- worked_on, problem, solution, open_items: short standalone bullets (one fact each, at most two
  sentences) naming the concrete things: files, functions, commands, error messages, decisions
  and their reasons. A bullet must make sense on its own, out of context. A section with nothing
  to say is an empty list, but worked_on is never empty.
- summary: one sentence saying what the session did and why it matters.
- tags: 3 to 8 lowercase tags (languages, tools, components). Prefer tags from the list of
  existing tags when one fits, so the vocabulary stays small.
- domain: one of {domains}.
- importance: 1 (trivial) to 5 (a decision or fix worth recalling).
Never repeat secrets, tokens, passwords or [REDACTED:...] markers' surroundings that look secret.
Answer with the JSON object only.""".format(domains=", ".join(DOMAINS))


def digest_request(session_text: str, known_tags: Sequence[str], part: str = "") -> str:
    """The user turn of a digest request: the existing tags, then the session (or one part)."""
    tags = ", ".join(known_tags) if known_tags else "(none yet)"
    scope = f"This is {part} of a long session; digest this part only.\n\n" if part else ""
    return f"Existing tags, most used first: {tags}\n\n{scope}<session>\n{session_text}\n</session>"


def repair_request(previous_reply: str, problem: str) -> str:
    """The one retry after a reply that does not fit the schema: the reply and what is wrong."""
    return (
        "Your previous answer does not fit the required JSON schema.\n"
        f"Problem: {problem}\n\n"
        f"<previous_answer>\n{previous_reply[:20000]}\n</previous_answer>\n\n"
        "Answer again with one JSON object that fits the schema exactly, nothing else."
    )


def merge_request(part_digests_json: Sequence[str], known_tags: Sequence[str]) -> str:
    """Merge the digests of a long session's parts, in order, into the digest of the whole."""
    tags = ", ".join(known_tags) if known_tags else "(none yet)"
    parts = "\n".join(
        f'<part index="{i}">\n{text}\n</part>' for i, text in enumerate(part_digests_json, 1)
    )
    return (
        "A long session was digested in parts, in the order below. Merge them into the digest "
        "of the whole session: keep every distinct fact, drop repeats, keep the bullets "
        "standalone, make open_items what is still open at the end, and write one summary for "
        f"the whole.\nExisting tags, most used first: {tags}\n\n{parts}"
    )
