"""The recall server's parameters: what an agent (or a hook's JSON body) sees of each, and its
bounds. Shared by the MCP tools (mcp_server/tools.py) and the hooks' REST adapter
(mcp_server/hooks_api.py), so that both refuse the same input the same way."""

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, Field

from librarian_dagster.core.capture.readers import AGENTS, check_agent
from librarian_dagster.core.digest.schema import Domain
from librarian_dagster.core.recall.answer import MAX_RESULTS
from librarian_dagster.core.recall.history import MAX_SESSIONS

DomainFilter = Annotated[Domain | None, Field(description="Only sessions of this domain.")]
SinceFilter = Annotated[
    datetime | None, Field(description="Only sessions that ended at or after this ISO time.")
]


def _no_nul(value: str) -> str:
    # PostgreSQL text cannot hold NUL: said here, rather than as a database error at the end.
    if "\x00" in value:
        raise ValueError("must not contain NUL bytes")
    return value


Text = Annotated[str, AfterValidator(_no_nul)]
"""Every text parameter: a string PostgreSQL can take as it is (always as a bound parameter)."""

ProjectFilter = Annotated[
    Text | None,
    Field(max_length=200, description="Only this project (the last folder name of its cwd)."),
]
PersonFilter = Annotated[
    Text | None,
    Field(max_length=64, description="Only sessions of this person (who pushed them)."),
]
Tag = Annotated[Text, Field(max_length=200)]
AgentFilter = Annotated[
    Annotated[Text, AfterValidator(check_agent)] | None,
    Field(
        description=f"Only sessions of this coding agent: one of {', '.join(AGENTS)}.",
        json_schema_extra={"enum": [*AGENTS, None]},
    ),
]
# The longest next_cursor is a timestamp and a session id, base64'd: well under this.
MAX_CURSOR = 1000
MAX_SESSION_ID = 200
MAX_PATH = 4096  # PATH_MAX on Linux
MAX_TASK = 2000

# The tools' parameters: what an agent sees of each, and its bounds.
Query = Annotated[Text, Field(min_length=1, max_length=2000, description="What to recall.")]
AllTags = Annotated[
    list[Tag] | None, Field(max_length=50, description="Only sessions carrying all of these tags.")
]
AnyTags = Annotated[
    list[Tag] | None, Field(max_length=50, description="Only sessions carrying one of these tags.")
]
BranchFilter = Annotated[Text | None, Field(max_length=200, description="Only this git branch.")]
UntilFilter = Annotated[
    datetime | None, Field(description="Only sessions that began at or before this.")
]
ChunkLimit = Annotated[int, Field(ge=1, le=MAX_RESULTS, description="How many chunks.")]
Cwd = Annotated[
    Text | None,
    Field(
        max_length=MAX_PATH,
        description="Your working directory: its project's sessions rank first (not a filter).",
    ),
]
CurrentBranch = Annotated[
    Text | None,
    Field(
        max_length=200,
        description="Your git branch: earlier work on it is preferred (not a filter; "
        "git_branch filters).",
    ),
]
SessionId = Annotated[
    Text,
    Field(min_length=1, max_length=MAX_SESSION_ID, description="A session id from a result."),
]
FilePath = Annotated[
    Text,
    Field(min_length=1, max_length=MAX_PATH, description="The file: absolute, or relative to cwd."),
]
RepositoryCwd = Annotated[
    Text | None,
    Field(
        max_length=MAX_PATH, description="Your working directory: which repository the file is of."
    ),
]
Task = Annotated[
    Text | None,
    Field(
        max_length=MAX_TASK,
        description="What you are doing: the sessions nearest to it come after the most recent "
        "one.",
    ),
]
HistoryLimit = Annotated[int, Field(ge=1, le=MAX_SESSIONS, description="How many sessions.")]
Root = Annotated[
    Text | None, Field(max_length=MAX_PATH, description="The repository's root, if you know it.")
]
Remote = Annotated[
    Text | None,
    Field(
        max_length=400,
        description="The repository's remote (git remote get-url origin), if you know it: "
        "sessions of another checkout of it, in a folder named otherwise, are found too.",
    ),
]
OwnSession = Annotated[
    Text | None,
    Field(max_length=MAX_SESSION_ID, description="Your own session's id: never returned."),
]
PageLimit = Annotated[int, Field(ge=1, le=100, description="Sessions per page.")]
Cursor = Annotated[
    Text | None, Field(max_length=MAX_CURSOR, description="`next_cursor` of the previous page.")
]
