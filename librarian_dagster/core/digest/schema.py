"""The session digest's schema, what any digester fills, and the fingerprint of what it reads.

A digest answers four questions about a session (what we worked on, the problem, how it was
solved, what is left open), each as short bullets, plus a one-sentence summary, tags, one of six
domains and an importance from 1 to 5. Every bullet becomes one searchable chunk. Two digesters
fill it: the offline one (core/digest/offline.py) and an LLM (core/digest/llm.py).
"""

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from pydantic import BaseModel, Field

from librarian_dagster.core.capture.session import Session

DIGEST_VERSION = 2
"""Bump when the digest's shape changes: stored memories with an older version are rebuilt on
their next run, whoever wrote them (the offline digester's rules have a version of their own,
core/digest/offline.py `RULES_VERSION`)."""

Domain = Literal["technical", "business", "reflections", "core", "content", "private"]
DOMAINS: tuple[Domain, ...] = get_args(Domain)
PRIVATE_DOMAIN: Domain = "private"
"""Personal matters: returned only to a caller allowed to read them (SECURITY.md)."""

SECTIONS: tuple[tuple[str, str], ...] = (
    ("worked_on", "What we worked on"),
    ("problem", "The problem"),
    ("solution", "How it was solved"),
    ("open_items", "What is left open"),
)


class Digest(BaseModel):
    """What a session was about, in the shape both the offline and the LLM digesters fill."""

    summary: str = Field(description="One sentence: what this session did and why it matters.")
    worked_on: list[str] = Field(description="What we worked on: one bullet per task or request.")
    problem: list[str] = Field(description="The problem: symptoms, errors, constraints met.")
    solution: list[str] = Field(description="How it was solved: changes, decisions, commands.")
    open_items: list[str] = Field(description="What is left open: follow-ups, unknowns, TODOs.")
    tags: list[str] = Field(description="3-8 lowercase tags: languages, tools, components.")
    domain: Domain = Field(description="One of: " + ", ".join(DOMAINS))
    importance: int = Field(ge=1, le=5, description="1 trivial ... 5 a decision worth recalling.")


@dataclass(frozen=True)
class DigestResult:
    digest: Digest
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    """Requests made to a model service for this digest (repairs and segments included)."""
    method: str = "whole"
    """How the session was read: `whole`, or `segments:<n>+merge` for a long session."""


class DigestRecord(BaseModel):
    """A digest with what it was made from and by whom: what the digest stage hands on."""

    digest: Digest
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    content_hash: str = Field(description="`content_hash` of the session the digest was made of.")
    digest_version: int = DIGEST_VERSION


class Digester(Protocol):
    model_name: str
    """Who wrote the digest, prompt version included: part of the digest's key."""

    def digest(self, session: Session, known_tags: Sequence[str] = ()) -> DigestResult:
        """The digest of a redacted session; `known_tags` are the store's most used tags."""
        ...


def render_digest(digest: Digest, title: str | None = None) -> str:
    """The digest as Markdown, for `get_digest` and the UI."""
    lines = [f"# {title}" if title else "# Session digest", "", digest.summary, ""]
    for key, heading in SECTIONS:
        bullets = getattr(digest, key)
        if bullets:
            lines += [f"## {heading}", *[f"- {b}" for b in bullets], ""]
    lines.append(
        f"Domain: {digest.domain} · importance {digest.importance} · tags: "
        + (", ".join(digest.tags) or "none")
    )
    return "\n".join(lines)


# -- fingerprint ----------------------------------------------------------------------------------


def content_hash(session: Session) -> str:
    """A hash of what the digest reads: equal hashes mean an identical digest input."""
    h = hashlib.sha256(f"digest-v{DIGEST_VERSION}".encode())
    for turn in session.turns:
        h.update(f"\x1e{turn.role}\x1f{turn.kind}\x1f{turn.agent_id or ''}\x1f".encode())
        h.update(turn.text.encode("utf-8", "replace"))
        for use in turn.tool_uses:
            h.update(f"\x1d{use.summary}".encode("utf-8", "replace"))
    return h.hexdigest()
