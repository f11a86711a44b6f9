"""Structured results of the MCP tools (returned as pydantic models: structured output)."""

from datetime import datetime

from pydantic import BaseModel, Field


class ChunkResult(BaseModel):
    text: str = Field(description="The remembered fact: one bullet of a session digest.")
    score: float = Field(description="Relevance, higher is better (reciprocal-rank fusion).")
    session_id: str
    section: str = Field(description="summary, worked_on, problem, solution or open_items.")
    project: str
    date: datetime | None = Field(description="When the session ended.")
    summary: str = Field(description="One-sentence summary of the whole session.")


class SearchResult(BaseModel):
    query: str
    results: list[ChunkResult]


class DigestSections(BaseModel):
    worked_on: list[str]
    problem: list[str]
    solution: list[str]
    open_items: list[str]


class SessionInfo(BaseModel):
    """One remembered session, as listed."""

    session_id: str
    project: str
    started_at: datetime | None
    ended_at: datetime | None
    title: str | None
    summary: str
    domain: str
    tags: list[str]
    importance: int
    turns: int
    chunk_count: int


class SessionDigest(SessionInfo):
    """One session in full: what is listed, plus where it ran and its whole digest."""

    cwd: str | None
    git_branch: str | None
    sections: DigestSections
    text: str = Field(description="The digest rendered as Markdown.")
    digest_model: str
    embedding_model: str


class SessionList(BaseModel):
    sessions: list[SessionInfo]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to get the next page; null when there is none."
    )
