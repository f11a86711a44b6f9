"""What the search and the listings share: the filters a caller may narrow them by, as SQL, and
how a vector and our own SQL text are written."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, LiteralString, cast

from librarian_dagster.core.digest.schema import PRIVATE_DOMAIN, Domain


@dataclass(frozen=True)
class SearchFilters:
    project: str | None = None
    agent: str | None = None
    """Only sessions of this agent (claude-code, codex, ...: core/capture/readers.py)."""
    person: str | None = None
    """Only sessions of this person (who pushed them, or of the machine they were read on)."""
    domain: Domain | None = None
    tags: Sequence[str] = ()
    """Only sessions carrying all of these tags."""
    any_tags: Sequence[str] = ()
    """Only sessions carrying at least one of these tags."""
    git_branch: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    include_private: bool = False
    """Whether private sessions (of the `private` domain, or of a project their person keeps
    private) may be returned: only when the caller may read them (a token with the `private`
    scope, `--include-private`); see SECURITY.md."""
    viewer: str | None = None
    """With `include_private`, whose private sessions: a token's person reads their own alone.
    None: everyone's (this machine's own reading: `librarian search --include-private`)."""


NO_FILTERS = SearchFilters()

VISIBLE = (
    "(NOT (m.domain = %(private_domain)s OR m.private) OR (%(private_ok)s"
    " AND (%(viewer)s::text IS NULL OR m.person IS NULL OR m.person = %(viewer)s)))"
)
"""Whether a memory `m` may be shown: not private, or private and the reader may read it (see
`visible`). A session of no person (stored before persons were kept, until a process of this
machine names them its own) is read as it was then: by any reader of private sessions."""


def visible(include_private: bool, viewer: str | None) -> dict[str, Any]:
    """The parameters of VISIBLE: a private session is shown only with `include_private`, and
    then, with a `viewer`, only if it is the viewer's own."""
    return {"private_ok": include_private, "viewer": viewer, "private_domain": PRIVATE_DOMAIN}


def filter_sql(filters: SearchFilters) -> tuple[str, dict[str, Any]]:
    """The filters as ` AND ...` clauses over `memories m`, with their named parameters."""
    clauses: list[str] = []
    params: dict[str, Any] = {}
    if filters.project:
        clauses.append("m.project = %(project)s")
        params["project"] = filters.project
    if filters.agent:
        clauses.append("m.agent = %(agent)s")
        params["agent"] = filters.agent
    if filters.person:
        clauses.append("m.person = %(person)s")
        params["person"] = filters.person
    if filters.domain:
        clauses.append("m.domain = %(domain)s")
        params["domain"] = filters.domain
    if filters.tags:
        clauses.append("m.tags @> %(tags)s")
        params["tags"] = list(filters.tags)
    if filters.any_tags:
        clauses.append("m.tags && %(any_tags)s")
        params["any_tags"] = list(filters.any_tags)
    if filters.git_branch:
        clauses.append("m.git_branch = %(git_branch)s")
        params["git_branch"] = filters.git_branch
    if filters.since:
        clauses.append("COALESCE(m.ended_at, m.started_at, m.ingested_at) >= %(since)s")
        params["since"] = filters.since
    if filters.until:
        clauses.append("COALESCE(m.started_at, m.ended_at, m.ingested_at) <= %(until)s")
        params["until"] = filters.until
    if not filters.include_private or filters.viewer is not None:
        clauses.append(VISIBLE)
        params |= visible(filters.include_private, filters.viewer)
    return "".join(" AND " + c for c in clauses), params


def vector_literal(values: Sequence[float]) -> str:
    # Text form sent with an explicit cast: works for the untyped `vector` column and the
    # per-dimension expression index alike, with no adapter-specific typing.
    return "[" + ",".join(f"{float(v):.7g}" for v in values) + "]"


def ours(text: str) -> LiteralString:
    """SQL text built here from fixed clauses and numbers, never from input (values always go
    as parameters): what psycopg's LiteralString typing asks for, said once."""
    return cast(LiteralString, text)
