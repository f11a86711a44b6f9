"""`POST /recall` beside /mcp: what search_chunks finds, as the text an agent's hook hands its
model, in one round trip over real HTTP."""

import asyncio
import re

import httpx
import pytest
from mcp import Client

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.recall.answer import NOTHING_RELEVANT, branch_prior
from librarian_dagster.core.recall.hook_text import RECALL_HEADER
from librarian_dagster.core.recall.relevance import DEFAULT_THRESHOLD, Evidence, relevance
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.memories import ChunkRecord
from mcp_server.app import Served, build_server, http_app
from mcp_server.auth import TokenFileVerifier
from tests.core.test_store import memory_record
from tests.helpers import free_port, serve_http
from tests.mcp_server.test_tools import FakeEmbedder

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


TOKEN = "s3cret-token-for-tests"
QUERY = "how did we fix the sqlite lock"


def _remember(store, count: int = 5) -> None:
    for i in range(count):
        store.memories.replace_memory(
            memory_record(f"s{i}", days_ago=i, embedding_model=FakeEmbedder.model_name),
            [
                ChunkRecord("worked_on", 0, f"sqlite lock fix {i}", [1.0, 0.01 * i, 0.0]),
                ChunkRecord("solution", 0, f"retry the lock {i}", [1.0, 0.02 * i, 0.0]),
            ],
        )


@pytest.fixture
def served(store):
    """The real HTTP app of the recall server on a free port, with a few memories."""
    _remember(store)
    with serve_http(
        http_app(build_server(Served.of(store, FakeEmbedder())), "127.0.0.1"), free_port()
    ) as url:
        yield url


def _post(url: str, body=None, **kwargs) -> httpx.Response:
    return httpx.post(url + "/recall", json=body, timeout=20, **kwargs)


def _named(response: httpx.Response) -> list[str]:
    """The sessions the context names, in its order."""
    assert response.status_code == 200, response.text
    context = response.json()["context"] or ""
    return re.findall(r"^- (?:\S+ )*?session (\S+) ", context, flags=re.MULTILINE)


def test_recall_names_what_search_chunks_finds_in_its_order(served):
    response = _post(served, {"query": QUERY, "limit": 4})
    answer = response.json()
    assert answer["context"].startswith(RECALL_HEADER + "\n- session ")
    assert answer["note"] is None

    async def over_mcp():
        async with Client(served + "/mcp") as client:
            return await client.call_tool("search_chunks", {"query": QUERY, "limit": 4})

    tool = asyncio.run(over_mcp())
    assert not tool.is_error and tool.structured_content is not None
    # The tool's own answer, and the text beside it.
    assert {k: v for k, v in answer.items() if k not in ("context", "sessions")} == (
        tool.structured_content
    )
    found = [r["session_id"] for r in tool.structured_content["results"]]
    assert len(found) == 4 and _named(response) == list(dict.fromkeys(found))
    assert answer["sessions"] == len(set(found))


def test_limit_defaults_to_three_chunks_and_the_budget_is_the_caller_s(served):
    # Each session has two chunks that match: three chunks are two sessions, ten are five.
    assert len(_named(_post(served, {"query": QUERY}))) == 2
    assert len(_named(_post(served, {"query": QUERY, "limit": 10}))) == 5
    small = _post(served, {"query": QUERY, "limit": 10, "budget": 400}).json()
    assert 0 < len(small["context"]) <= 400 and small["sessions"] < 5
    # A budget out of range is kept within what a hook can hand on, not refused.
    assert len(_post(served, {"query": QUERY, "budget": 10**9}).json()["context"]) <= 10_000


@pytest.mark.parametrize(
    ("query", "note"),
    [("fix the lock", "short prompt"), ("/compact keep the sqlite lock notes", "slash command")],
)
def test_a_prompt_that_says_too_little_is_not_looked_up(served, query, note):
    said = _post(served, {"prompt": query}).json()
    assert (said["context"], said["sessions"], said["results"], said["note"]) == (None, 0, [], note)
    # Asked as a search, the same words are looked up.
    assert _named(_post(served, {"query": query}))


def test_a_prompt_is_asked_as_a_query_is(served):
    prompt, query = (_post(served, {key: QUERY}).json() for key in ("prompt", "query"))
    assert prompt == query and prompt["context"]
    # Behind the context Gemini CLI's start hooks put before it, what the user typed is asked.
    behind = f"<hook_context>{'the notes of the project ' * 200}</hook_context>\n\n{QUERY}"
    assert _post(served, {"prompt": behind}).json() == query
    said = _post(served, {"prompt": "<hook_context>a b c d e f</hook_context>\n\nfix it"}).json()
    assert said["note"] == "short prompt"
    both = _post(served, {"query": QUERY, "prompt": QUERY})
    assert both.status_code == 400 and "one of query and prompt" in both.json()["error"]


def test_an_empty_memory_answers_nothing_relevant_with_a_note(store):
    with serve_http(
        http_app(build_server(Served.of(store, FakeEmbedder())), "127.0.0.1"), free_port()
    ) as url:
        response = _post(url, {"query": QUERY})
    assert response.status_code == 200
    said = response.json()
    assert (said["context"], said["sessions"], said["results"], said["note"]) == (
        None, 0, [], NOTHING_RELEVANT,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({}, "query"),
        ({"query": ""}, "query"),
        ({"query": "x" * 2001}, "query"),
        ({"query": "lock", "limit": 0}, "limit"),
        ({"query": "lock", "limit": 11}, "limit"),
        ({"query": "lock", "limit": "3"}, "limit"),
        ({"query": 42}, "query"),
        ({"query": "lock\x00"}, "NUL"),
        ({"query": "lock", "projects": "alpha"}, "projects"),
        ({"query": "lock", "project": 7}, "project"),
        ({"query": "lock", "domain": "secret"}, "domain"),
        ({"query": "lock", "agent": "cursor"}, "unknown agent 'cursor': one of claude-code, codex"),
        ({"query": "lock", "agent": 3}, "agent"),
        ({"query": "lock", "tags": "go"}, "tags"),
        ({"query": "lock", "until": "last tuesday"}, "until"),
        ({"query": "lock", "cwd": ["/src"]}, "cwd"),
        ({"query": "lock", "git_branch": "b" * 201}, "git_branch"),
        (["lock"], "body"),
    ],
)
def test_a_bad_body_is_a_400_that_says_what_is_wrong(served, body, says):
    response = _post(served, body)
    assert response.status_code == 400
    message = response.json()["error"]
    assert message.startswith('expected {"query": str, "limit": 1..10} (or "prompt" in place')
    assert says in message.split(": ", 1)[1]


def test_the_filters_of_search_chunks_filter(store):
    _remember(store)  # s0 .. s4, s<i> ended i days before 2026-11-01
    store.memories.replace_memory(
        memory_record("b0", project="beta", embedding_model=FakeEmbedder.model_name, agent="codex"),
        [ChunkRecord("solution", 0, "sqlite lock fix b", [1.0, 0.0, 0.0])],
    )
    with serve_http(
        http_app(build_server(Served.of(store, FakeEmbedder())), "127.0.0.1"), free_port()
    ) as url:
        # s<i> began i days and an hour before 2026-11-01: until the 29th leaves s3 and s4.
        until = _post(url, {"query": QUERY, "limit": 10, "until": "2026-10-29T00:00:00Z"})
        beta = _post(url, {"query": QUERY, "limit": 10, "project": "beta"})
        codex = _post(url, {"query": QUERY, "limit": 10, "agent": "codex"})
        claude = _post(url, {"query": QUERY, "limit": 10, "agent": "claude-code", "budget": 9000})
        private = _post(url, {"query": QUERY, "domain": "private"})
    assert set(_named(until)) == {"s3", "s4"}
    assert _named(beta) == ["b0"]
    assert "\n- Codex session b0 (beta, " in codex.json()["context"] and _named(codex) == ["b0"]
    assert set(_named(claude)) == {f"s{i}" for i in range(5)}
    assert private.status_code == 400 and "private" in private.json()["error"]


def _alike(store, session_id: str, project: str, cwd: str, days_ago: int, branch="main") -> None:
    """A memory whose words and vector are those of every other one made here."""
    record = memory_record(
        session_id, project=project, days_ago=days_ago, embedding_model=FakeEmbedder.model_name
    ).model_copy(update={"cwd": cwd, "git_branch": branch})
    store.memories.replace_memory(
        record, [ChunkRecord("solution", 0, "sqlite lock fix", [1.0, 0.0, 0.0])]
    )


def _order(url: str, **context) -> list[str]:
    return _named(_post(url, {"query": QUERY, "limit": 10, **context}))


def test_the_cwd_s_project_comes_first_and_filters_nothing(store):
    # Alike in every way the lists see; alpha's is newer, so without context it comes first.
    _alike(store, "a-new", "alpha", "/src/alpha", days_ago=0)
    _alike(store, "b-old", "beta", "/src/beta", days_ago=30)
    _alike(store, "b-feature", "beta", "/src/beta", days_ago=40, branch="feat/lock")
    with serve_http(
        http_app(build_server(Served.of(store, FakeEmbedder())), "127.0.0.1"), free_port()
    ) as url:
        alone = _order(url)
        inside = _order(url, cwd="/src/beta/pkg/")  # a folder of the project
        above = _order(url, cwd="/src")  # contains both: both are "here"
        by_name = _order(url, cwd="/elsewhere/checkouts/beta")  # the same project name
        branch = _order(url, cwd="/src/beta", git_branch="feat/lock")
        stranger = _order(url, cwd="/src/gamma", git_branch="feat/lock")
        prefix = _order(url, cwd="/src/bet")  # a prefix of the path, not a folder of it
        trunk = _order(url, cwd="/src/beta", git_branch="main")  # everyone's branch
    assert alone == ["a-new", "b-old", "b-feature"]
    assert inside == ["b-old", "b-feature", "a-new"]
    assert above == alone  # both projects are "here": newer first, as without context
    assert by_name == inside
    assert branch == ["b-feature", "b-old", "a-new"]
    assert trunk == inside  # sharing main says nothing about the work
    # Another project's branch of the same name is not this branch: nothing is "here".
    assert stranger == alone == prefix


def test_a_same_feature_branch_session_passes_with_less_evidence(store):
    # A cosine a little above the default background: under the threshold alone, lifted over
    # it by the same-branch prior. On a trunk, in another project or with no context at all,
    # it stays under.
    cosine = 0.219
    alone = relevance(Evidence(None, cosine, cosine, 0.0))
    assert alone < DEFAULT_THRESHOLD <= branch_prior(alone)
    record = memory_record("s-near", embedding_model=FakeEmbedder.model_name).model_copy(
        update={"cwd": "/src/alpha", "git_branch": "fix/busy"}
    )
    vector = [cosine, (1 - cosine**2) ** 0.5, 0.0]
    store.memories.replace_memory(
        record, [ChunkRecord("solution", 0, "sqlite busy timeout raised", vector)]
    )
    with serve_http(
        http_app(build_server(Served.of(store, FakeEmbedder())), "127.0.0.1"), free_port()
    ) as url:
        bare = _post(url, {"query": QUERY})
        trunk = _post(url, {"query": QUERY, "cwd": "/src/alpha", "git_branch": "main"})
        other = _post(url, {"query": QUERY, "cwd": "/src/beta", "git_branch": "fix/busy"})
        same = _post(url, {"query": QUERY, "cwd": "/src/alpha", "git_branch": "fix/busy"})
    assert _named(bare) == _named(trunk) == _named(other) == []
    assert _named(same) == ["s-near"] and ", branch fix/busy)" in same.json()["context"]


def test_a_400_never_repeats_the_prompt(served):
    prompt = "my password is hunter2-do-not-echo"
    response = _post(served, {"query": prompt, "limit": 99})
    assert response.status_code == 400 and "limit" in response.text
    assert "hunter2" not in response.text


def test_not_json_not_post_too_large_and_wrong_content_type(served):
    broken = httpx.post(
        served + "/recall",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
        timeout=20,
    )
    assert broken.status_code == 400 and "error" in broken.json()
    # POST only (a GET falls through to the SSE app's mount, which has no such page).
    assert httpx.get(served + "/recall", timeout=20).status_code in (404, 405)
    huge = _post(served, {"query": "lock", "pad": "x" * 70_000})
    assert huge.status_code == 413
    form = httpx.post(served + "/recall", data={"query": "lock"}, timeout=20)
    assert form.status_code == 415


def test_a_foreign_host_header_is_refused_on_loopback(served):
    # What a DNS-rebinding page would send: its own hostname, resolved to 127.0.0.1.
    response = _post(served, {"query": QUERY}, headers={"Host": "attacker.example:3201"})
    assert response.status_code == 421
    assert _post(served, {"query": QUERY}, headers={"Host": "localhost:3201"}).status_code == 200


def test_with_a_token_the_endpoint_demands_it(store):
    _remember(store, 2)
    server = build_server(
        Served.of(store, FakeEmbedder()), verifier=TokenFileVerifier(shared_token=TOKEN)
    )
    app = http_app(server, "127.0.0.1")
    with serve_http(app, free_port()) as url:
        missing = _post(url, {"query": QUERY})
        wrong = _post(url, {"query": QUERY}, headers={"Authorization": "Bearer nope"})
        basic = _post(url, {"query": QUERY}, headers={"Authorization": f"Basic {TOKEN}"})
        right = _post(url, {"query": QUERY}, headers={"Authorization": f"Bearer {TOKEN}"})
    for refused in (missing, wrong, basic):
        assert refused.status_code == 401
        # The SDK's own refusal, as /mcp gives it.
        assert refused.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
        assert TOKEN not in refused.text
    assert _named(right) == ["s0", "s1"]


def test_a_broken_database_is_a_503_without_details(tmp_path):
    nowhere = Store(f"postgresql://postgres@/librarian?host={tmp_path / 'no-socket'}")
    with (
        nowhere,
        serve_http(
            http_app(build_server(Served.of(nowhere, FakeEmbedder())), "127.0.0.1"), free_port()
        ) as url,
    ):
        response = _post(url, {"query": QUERY})
    assert response.status_code == 503
    assert response.json() == {"error": "recall failed on the server"}


def test_the_token_comes_from_settings_and_stays_out_of_repr():
    settings = Settings.from_env({"LIBRARIAN_MCP_TOKEN": TOKEN})
    assert settings.mcp_token == TOKEN and TOKEN not in repr(settings)
    assert Settings.from_env({}).mcp_token is None
