"""The shapes of a memory, defined once: the `memories` row, and what recall and listings return.

The store derives its SQL from these models (column lists and named parameters come from the
fields), psycopg builds them from rows (`class_row`), and the `librarian` command and the MCP
tools return them unchanged. A test checks that `MemoryRecord` and the migrated `memories` table
agree, so the two cannot drift.
"""

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from librarian_dagster.core.capture.readers import AGENTS
from librarian_dagster.core.capture.session import Session
from librarian_dagster.core.digest.offline import files_changed
from librarian_dagster.core.digest.schema import Digest, DigestRecord, Domain, render_digest

MAX_FILES = 20


AGENT_FIELD = f"The coding agent that wrote the session: one of {', '.join(AGENTS)}."


class SessionFacts(BaseModel):
    """What is known about one remembered session at a glance: the columns a listing shows."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    project: str = Field(description="The last folder name of the session's working directory.")
    agent: str = Field(
        default="claude-code",
        description=AGENT_FIELD,
    )
    person: str | None = Field(
        default=None,
        description="Whose session it is: who pushed it from their machine, or the person of "
        "the machine it was read on (None: stored before persons were kept).",
    )
    repository: str | None = Field(
        default=None,
        description="The repository it worked in, by its remote (github.com/acme/cli), where "
        "one was known.",
    )
    cwd: str | None
    git_branch: str | None
    started_at: datetime | None
    ended_at: datetime | None
    title: str | None
    summary: str = Field(description="One-sentence summary of the whole session.")
    domain: Domain
    tags: list[str]
    importance: int = Field(ge=1, le=5, description="1 trivial ... 5 a decision worth recalling.")
    turns: int = 0
    files: list[str] = Field(
        default=[],
        description="The files the session changed, most edited first (at most "
        f"{MAX_FILES}), relative to its working directory where they are under it.",
    )


class MemoryRecord(SessionFacts):
    """One `memories` row as the write path stores it; the database adds `ingested_at`."""

    digest: Digest
    digest_text: str
    content_hash: str
    digest_version: int
    digest_model: str
    embedding_model: str
    session_input_tokens: int = 0
    session_output_tokens: int = 0
    digest_input_tokens: int = 0
    digest_output_tokens: int = 0
    private: bool = False
    """Its person keeps its project private: only that person's tokens read it."""
    source_fingerprint: str | None = None
    """The transcript files' fingerprint this memory was made from: the sensor does not ask
    for a session again while its files still have it (None: written before it was kept)."""

    def digest_record(self) -> DigestRecord:
        """The digest as the digest stage handed it on: `memory_of` read backwards."""
        return DigestRecord(
            digest=self.digest,
            model=self.digest_model,
            input_tokens=self.digest_input_tokens,
            output_tokens=self.digest_output_tokens,
            content_hash=self.content_hash,
            digest_version=self.digest_version,
        )


def memory_of(session: Session, digested: DigestRecord, embedding_model: str) -> MemoryRecord:
    """The `memories` row of a redacted session, its digest and the model of its vectors."""
    digest = digested.digest
    return MemoryRecord(
        session_id=session.session_id,
        project=session.project,
        agent=session.agent,
        person=session.person,
        repository=session.repository,
        private=session.private,
        cwd=session.cwd,
        git_branch=session.git_branch,
        started_at=session.started_at,
        ended_at=session.ended_at,
        title=session.title,
        digest=digest,
        digest_text=render_digest(digest, session.title),
        summary=digest.summary,
        domain=digest.domain,
        tags=digest.tags,
        importance=digest.importance,
        content_hash=digested.content_hash,
        digest_version=digested.digest_version,
        digest_model=digested.model,
        embedding_model=embedding_model,
        session_input_tokens=session.input_tokens,
        session_output_tokens=session.output_tokens,
        digest_input_tokens=digested.input_tokens,
        digest_output_tokens=digested.output_tokens,
        turns=len(session.turns),
        files=files_changed(session, MAX_FILES),
        source_fingerprint=session.fingerprint or None,
    )


class SessionInfo(SessionFacts):
    """One remembered session, as listed."""

    chunk_count: int = Field(description="How many searchable bullets the session left.")


class SessionDigest(SessionInfo):
    """One session in full: what is listed, plus its whole digest and the models that made it."""

    digest: Digest
    digest_text: str = Field(description="The digest rendered as Markdown.")
    digest_model: str
    embedding_model: str


class SessionList(BaseModel):
    sessions: list[SessionInfo]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to get the next page; null when there is none."
    )


class ChunkResult(BaseModel):
    """One remembered fact (a digest bullet) and the session it came from."""

    model_config = ConfigDict(frozen=True)

    text: str = Field(description="The remembered text: a digest bullet or an exchange window.")
    score: float = Field(
        description="Its session's relevance: the probability (0 to 1) that it answers the query "
        "(for a session of the caller's own feature branch, with a prior that it does)."
    )
    session_id: str
    section: str = Field(
        description="exchange (the session's own words) or a digest section: summary, "
        "worked_on, problem, solution, open_items."
    )
    position: int = Field(description="The bullet's place in its section, from 0.")
    project: str
    agent: str = Field(
        default="claude-code",
        description=AGENT_FIELD,
    )
    person: str | None = Field(
        default=None, description="Whose session it is: who pushed it, or of this machine."
    )
    date: datetime | None = Field(description="When the session ended.")
    started_at: datetime | None = Field(default=None, description="When the session began.")
    summary: str = Field(description="One-sentence summary of the whole session.")
    domain: Domain
    tags: list[str]
    title: str | None = Field(default=None, description="The session's title, when it has one.")
    git_branch: str | None = Field(default=None, description="The git branch it worked on.")
    files: list[str] = Field(
        default=[],
        description="The files the session changed, most edited first, relative to its working "
        "directory: check them against the repository to see whether the memory still holds.",
    )
    highlights: list[str] = Field(
        default=[],
        description="Up to 3 distilled lines of the session's digest (solution, problem, open "
        "items; those matching the query first), each at most 200 characters: what was found, "
        "decided or fixed there. The same for every chunk of the session.",
    )
    context: Literal["project", "branch"] | None = Field(
        default=None,
        description="How the session relates to where the question was asked from (`cwd`): "
        "`project` of the same project, `branch` of its feature branch too; null otherwise.",
    )


class SearchResult(BaseModel):
    query: str
    results: list[ChunkResult] = Field(
        description="Best first; empty when no result reaches `min_relevance`."
    )
    min_relevance: float = Field(
        description="The relevance the best result must reach for the answer not to be empty."
    )
    note: str | None = Field(
        default=None, description="Why the answer is empty, when it is (nothing relevant)."
    )


class StoreStats(BaseModel):
    sessions: int
    chunks: int
    projects: int
    last_ingest: datetime | None
    input_tokens: int = 0
    """Tokens sent to model services for digests, ever (llm_usage)."""
    output_tokens: int = 0
    llm_calls: int = 0
    tokens_today: int = 0
    """Tokens in and out spent today (UTC): what the daily token budget is checked against."""


class EmbeddingSpace(BaseModel):
    """One embedding model's share of the stored chunks; spaces never mix in a search."""

    model: str
    dimension: int
    sessions: int
    chunks: int


class FileSession(BaseModel):
    """One earlier session that changed (or read) a file: a card for the file's history."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    project: str
    agent: str = Field(
        default="claude-code",
        description=AGENT_FIELD,
    )
    person: str | None = Field(
        default=None, description="Whose session it is: who pushed it, or of this machine."
    )
    started_at: datetime | None
    date: datetime | None = Field(description="When the session ended.")
    git_branch: str | None
    title: str | None
    summary: str = Field(description="One-sentence summary of the whole session.")
    domain: Domain
    tags: list[str]
    files: list[str] = Field(description="The files the session changed, most edited first.")
    highlights: list[str] = Field(
        description="Up to 3 distilled lines of its digest: what was found, decided or fixed."
    )
    path: str = Field(description="The file as this session named it (absolute).")
    changed: bool = Field(description="Whether the session changed the file (else it read it).")
    edits: int
    reads: int
    lines: list[str] = Field(
        default=[], description="The digest's lines that name the file, where any do."
    )
    relevance: float | None = Field(
        default=None,
        description="How close the session is to the task at hand (cosine, -1 to 1), when one "
        "was given.",
    )
    changed_since: str | None = Field(
        default=None,
        description="Whether the file changed in git since the session ended, where the "
        "repository is on the server's machine: 'unchanged since', '1 commit since', "
        "'N commits since'.",
    )


class FileHistory(BaseModel):
    path: str = Field(description="The file asked about, relative to its repository's root.")
    results: list[FileSession] = Field(
        description="The most recent session that changed the file first, then the others "
        "that bear most on the task; empty when no earlier session touched it."
    )
    former_names: list[str] = Field(
        default=[], description="Earlier names of the file that git follows, also looked up."
    )
    note: str | None = Field(default=None, description="Why the answer is empty, when it is.")
