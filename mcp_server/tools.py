"""The recall server's MCP tools: `search_chunks`, `get_digest`, `file_history` and
`list_sessions`.

Tools are plain functions: MCPServer runs a sync tool in a worker thread, which is what the
blocking psycopg calls need. They validate (mcp_server/parameters.py), call core and return its
pydantic models as they are. Errors are raised, never returned as strings, so an agent sees a
tool error. Each request's token decides whether it sees the private domain (mcp_server/auth.py).
"""

from collections.abc import Callable

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from librarian_dagster.core.capture.readers import LABELS
from librarian_dagster.core.capture.repository import normal_remote
from librarian_dagster.core.digest.schema import PRIVATE_DOMAIN
from librarian_dagster.core.recall.answer import EmbeddingSpaceMismatch, recall
from librarian_dagster.core.recall.history import (
    DEFAULT_SESSIONS,
    BadFileQuestion,
    FileQuestion,
)
from librarian_dagster.core.recall.history import file_history as file_history_of
from librarian_dagster.core.recall.ranking import Boosts, RecallContext
from librarian_dagster.core.store.memories import InvalidCursor
from librarian_dagster.core.store.queries import SearchFilters
from librarian_dagster.core.store.rows import (
    FileHistory,
    SearchResult,
    SessionDigest,
    SessionList,
)
from mcp_server.auth import Reading, reading
from mcp_server.parameters import (
    AgentFilter,
    AllTags,
    AnyTags,
    BranchFilter,
    ChunkLimit,
    CurrentBranch,
    Cursor,
    Cwd,
    DomainFilter,
    FilePath,
    HistoryLimit,
    OwnSession,
    PageLimit,
    PersonFilter,
    ProjectFilter,
    Query,
    Remote,
    RepositoryCwd,
    Root,
    SessionId,
    SinceFilter,
    Task,
    UntilFilter,
)
from mcp_server.served import ServedSlot

INSTRUCTIONS = f"""\
Librarian remembers past coding-agent sessions ({", ".join(LABELS.values())}; each result names
its `agent`). Before solving a problem, ask search_chunks "have I dealt with this before?" in
plain words (an error message, a component, a decision); read the whole session with get_digest;
browse recent work with list_sessions. Before changing a file, file_history says which earlier
sessions changed it, and why."""

PRIVATE_REFUSED = "the private domain needs a token with the `private` scope"


def add_tools(
    server: MCPServer,
    served: ServedSlot,
    min_relevance: float,
    boosts: Boosts,
    private_without_token: bool,
    own_person: str,
) -> None:
    """The tools, on `server`, over what `served` holds. `private_without_token`: whether a
    request that carries no token (stdio, in-memory) sees the private domain; `own_person`:
    whose the server's own sessions are (and a token's of no person)."""

    def private_allowed(domain: str | None) -> Reading:
        allowed = reading(private_without_token, own_person)
        if domain == PRIVATE_DOMAIN and not allowed.include_private:
            # Said, not an empty answer: the caller learns why, and nothing about the sessions.
            raise ToolError(PRIVATE_REFUSED)
        return allowed

    _add_search(server, served, private_allowed, min_relevance, boosts)
    _add_readers(server, served, private_allowed)


def _add_search(
    server: MCPServer,
    served: ServedSlot,
    private_allowed: "Callable[[str | None], Reading]",
    min_relevance: float,
    boosts: Boosts,
) -> None:
    @server.tool()
    def search_chunks(
        query: Query,
        project: ProjectFilter = None,
        agent: AgentFilter = None,
        person: PersonFilter = None,
        domain: DomainFilter = None,
        tags: AllTags = None,
        any_tags: AnyTags = None,
        git_branch: BranchFilter = None,
        since: SinceFilter = None,
        until: UntilFilter = None,
        limit: ChunkLimit = 5,
        cwd: Cwd = None,
        current_branch: CurrentBranch = None,
    ) -> SearchResult:
        """Find remembered facts from past sessions that answer a question, best first.

        Each result's score is its session's relevance (0 to 1); when no session is relevant
        enough the results are empty and `note` says so: then nothing was remembered about it.
        """
        allowed = private_allowed(domain)
        filters = SearchFilters(
            project=project,
            agent=agent,
            person=person,
            domain=domain,
            tags=tuple(tags or ()),
            any_tags=tuple(any_tags or ()),
            git_branch=git_branch,
            since=since,
            until=until,
            include_private=allowed.include_private,
            viewer=allowed.viewer,
        )
        context = RecallContext(cwd, current_branch) if cwd or current_branch else None
        opened = served()
        try:
            return recall(
                opened.search, opened.embedder, query, filters, limit,
                min_relevance=min_relevance, boosts=boosts, context=context,
            )  # fmt: skip
        except EmbeddingSpaceMismatch as exc:
            raise ToolError(str(exc)) from None


def _add_readers(
    server: MCPServer, served: ServedSlot, private_allowed: "Callable[[str | None], Reading]"
) -> None:
    @server.tool()
    def get_digest(session_id: SessionId) -> SessionDigest:
        """The whole digest of one session: what, problem, solution, what is left open."""
        # A private session the caller may not read is answered like one that does not exist.
        memories, allowed = served().memories, private_allowed(None)
        memory = memories.get_memory(session_id, allowed.include_private, allowed.viewer)
        if memory is None:
            raise ToolError(f"no session {session_id!r} in memory")
        return memory

    @server.tool()
    def file_history(
        path: FilePath,
        cwd: RepositoryCwd = None,
        task: Task = None,
        limit: HistoryLimit = DEFAULT_SESSIONS,
        root: Root = None,
        session_id: OwnSession = None,
        remote: Remote = None,
    ) -> FileHistory:
        """The earlier sessions of this repository that changed the file (or read it), and
        why: the most recent first, then those nearest the task. Each names its session,
        dates, branch, what it did, the digest lines that name the file and, where the
        repository is on the server's machine, whether the file changed since."""
        allowed = private_allowed(None)
        question = FileQuestion(
            path=path, cwd=cwd, root=root, task=task, session_id=session_id, limit=limit,
            include_private=allowed.include_private, viewer=allowed.viewer,
            repository=normal_remote(remote) if remote else None,
        )  # fmt: skip
        opened = served()
        try:
            return file_history_of(opened.files, opened.embedder, question)
        except BadFileQuestion as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    def list_sessions(
        project: ProjectFilter = None,
        agent: AgentFilter = None,
        person: PersonFilter = None,
        domain: DomainFilter = None,
        since: SinceFilter = None,
        limit: PageLimit = 20,
        cursor: Cursor = None,
    ) -> SessionList:
        """Remembered sessions, newest first, a page at a time."""
        allowed = private_allowed(domain)
        filters = SearchFilters(
            project=project, agent=agent, person=person, domain=domain, since=since,
            include_private=allowed.include_private, viewer=allowed.viewer,
        )  # fmt: skip
        try:
            return served().memories.list_sessions(filters, limit=limit, cursor=cursor)
        except InvalidCursor as exc:
            # Any other exception reaches the agent without its message: this one is theirs.
            raise ToolError(str(exc)) from None
