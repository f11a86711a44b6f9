"""The Gemini/Vertex digester, through the real google-genai SDK, against a fake server."""

import json
from datetime import UTC, datetime

import google.oauth2.credentials
import pytest

from librarian_dagster.core.capture.session import CHANGE, RUN, Session, ToolUse, Turn
from librarian_dagster.core.digest.llm import (
    DigestRejected,
    GeminiDigester,
    SecretInRequest,
    digest_input,
)
from librarian_dagster.core.digest.prompt import PROMPT_VERSION
from librarian_dagster.core.digest.schema import Digest
from librarian_dagster.core.models.calls import ProviderRejected, ProviderUnavailable, RetryBounds
from librarian_dagster.core.models.gemini import ClientConfig
from tests.fake_gemini import DEFAULT_DIGEST, FakeGemini, Reply, digest_reply, error, generation

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


T = datetime(2026, 11, 1, tzinfo=UTC)


def _session(n_exchanges: int = 1, reply: str = "Released the lock in teardown.") -> Session:
    turns = []
    for i in range(n_exchanges):
        turns += [
            Turn("user", "prompt", f"Why does the zanzibar cache test hang on CI? ({i})", T),
            Turn("assistant", "text", reply, T,
                 (ToolUse("Edit", ("/src/cache/test_lock.py",), None, "Edit test_lock.py",
                          action=CHANGE),
                  ToolUse("Bash", (), "pytest tests/test_lock.py", "Bash: pytest", action=RUN))),
        ]  # fmt: skip
    return Session(session_id="s1", project="app", turns=turns, git_branch="main")


@pytest.fixture
def fake():
    with FakeGemini() as server:
        yield server


def _digester(fake, sleeps=None, attempts=4, service="gemini", budget=200_000):
    config = (
        ClientConfig("gemini", api_key="AIzaFAKE", base_url=fake.url)
        if service == "gemini"
        else ClientConfig("vertex", project="acme", location="europe-west4", base_url=fake.url)
    )
    return GeminiDigester(
        config,
        "gemini-2.5-flash",
        RetryBounds(attempts=attempts, backoff_seconds=1.5, max_wait_seconds=30),
        budget,
        # A token google-auth treats as valid: the fake Vertex takes any bearer.
        credentials=google.oauth2.credentials.Credentials("fake-token")
        if service == "vertex"
        else None,
        sleep=(sleeps.append if sleeps is not None else lambda _s: None),
    )


def test_a_digest_with_the_schema_as_response_schema_and_tokens_counted(fake):
    result = _digester(fake).digest(_session(), known_tags=["python", "postgres"])
    assert result.digest == Digest.model_validate(DEFAULT_DIGEST)
    assert result.model == f"gemini-2.5-flash+prompt-v{PROMPT_VERSION}"
    assert (result.input_tokens, result.output_tokens, result.calls) == (1200, 300, 1)
    assert result.method == "whole"
    [call] = fake.calls("generateContent")
    assert call.path == "/v1/models/gemini-2.5-flash:generateContent"
    assert call.headers["x-goog-api-key"] == "AIzaFAKE"
    config = call.json["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseSchema"]["properties"]["domain"]["enum"][0] == "technical"
    text = call.json["contents"][0]["parts"][0]["text"]
    assert "Existing tags, most used first: python, postgres" in text
    assert "zanzibar cache test" in text and "Edit x1" in text and "test_lock.py" in text
    assert "Project: app" in text


def test_vertex_uses_the_project_and_location_path_and_a_bearer(fake):
    result = _digester(fake, service="vertex").digest(_session())
    assert result.digest.summary == DEFAULT_DIGEST["summary"]
    [call] = fake.calls("generateContent")
    assert call.path == (
        "/v1beta1/projects/acme/locations/europe-west4/publishers/google/models/"
        "gemini-2.5-flash:generateContent"
    )
    assert call.headers["Authorization"] == "Bearer fake-token"


def test_429_then_success_waits_as_retry_after_says(fake):
    fake.generate_script = [
        error(429, "Resource has been exhausted (e.g. check quota).", "RESOURCE_EXHAUSTED",
              {"Retry-After": "7"}),
        error(503, "The model is overloaded.", "UNAVAILABLE"),
    ]  # fmt: skip
    sleeps: list[float] = []
    result = _digester(fake, sleeps).digest(_session())
    assert result.digest.summary == DEFAULT_DIGEST["summary"]
    assert len(fake.calls("generateContent")) == 3
    # Retry-After first; then the doubling backoff (1.5 s * 2, with +-20% jitter).
    assert sleeps[0] == 7.0 and 2.4 <= sleeps[1] <= 3.6


def test_retry_info_in_the_error_body_is_honoured(fake):
    body = {
        "error": {
            "code": 429,
            "message": "Quota exceeded.",
            "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12s"}],
        }
    }
    fake.generate_script = [Reply(429, body)]
    sleeps: list[float] = []
    _digester(fake, sleeps).digest(_session())
    assert sleeps == [12.0]


def test_a_wait_longer_than_the_cap_fails_now_with_the_reason(fake):
    fake.generate_script = [
        error(429, "Quota exceeded.", "RESOURCE_EXHAUSTED", {"Retry-After": "3600"})
    ]
    with pytest.raises(ProviderUnavailable, match=r"3600s.*LIBRARIAN_LLM_MAX_WAIT_SECONDS"):
        _digester(fake).digest(_session())
    assert len(fake.calls("generateContent")) == 1


def test_repeated_500_gives_up_after_the_bounded_tries(fake):
    fake.generate_script = [error(500, "Internal error encountered.", "INTERNAL")] * 10
    sleeps: list[float] = []
    with pytest.raises(ProviderUnavailable, match=r"gave up after 3 tries.*HTTP 500 INTERNAL"):
        _digester(fake, sleeps, attempts=3).digest(_session())
    assert len(fake.calls("generateContent")) == 3 and len(sleeps) == 2


def test_a_bad_key_is_not_retried(fake):
    fake.generate_script = [error(400, "API key not valid. Please pass a valid API key.",
                                  "INVALID_ARGUMENT")]  # fmt: skip
    with pytest.raises(ProviderRejected, match="API key not valid"):
        _digester(fake).digest(_session())
    assert len(fake.calls("generateContent")) == 1


def test_malformed_json_is_repaired_once(fake):
    fake.generate_script = [generation('{"summary": "Fixed the cache", "worked_on": [')]
    result = _digester(fake).digest(_session())
    assert result.digest.summary == DEFAULT_DIGEST["summary"]
    assert result.calls == 2 and result.input_tokens == 2400
    repair = fake.calls("generateContent")[1].json["contents"][0]["parts"][0]["text"]
    assert "does not fit the required JSON schema" in repair and "Fixed the cache" in repair


def test_schema_violating_json_twice_fails_loudly_with_the_reason(fake):
    bad = json.dumps({**DEFAULT_DIGEST, "domain": "cooking", "importance": 9})
    fake.generate_script = [generation(bad), generation(bad)]
    with pytest.raises(
        DigestRejected, match=r"even after one repair attempt: domain: .*importance"
    ):
        _digester(fake).digest(_session())
    assert len(fake.calls("generateContent")) == 2


@pytest.mark.parametrize(
    "reply",
    [
        generation("Error 429: Resource has been exhausted (e.g. check quota)."),
        generation("I'm sorry, but I can't help with that."),
        digest_reply(summary="429 RESOURCE_EXHAUSTED: quota exceeded, try again later",
                     worked_on=["Rate limit exceeded"], problem=[], solution=[], open_items=[]),
        digest_reply(summary="Fixed it.", worked_on=[], problem=[], solution=[], open_items=[]),
        digest_reply(summary="  "),
    ],
)  # fmt: skip
def test_a_reply_that_is_not_a_digest_is_rejected(fake, reply):
    fake.generate_script = [reply, reply]
    with pytest.raises(DigestRejected):
        _digester(fake).digest(_session())


def test_a_digest_about_rate_limits_is_still_a_digest(fake):
    fake.generate_script = [
        digest_reply(summary="Added Retry-After handling to the client's 429 rate limit path.")
    ]
    assert "429" in _digester(fake).digest(_session()).digest.summary


def test_a_blocked_or_cut_reply_is_rejected(fake):
    cut = generation('{"summary": "x"')
    cut.body["candidates"][0]["finishReason"] = "MAX_TOKENS"
    fake.generate_script = [cut]
    with pytest.raises(DigestRejected, match="MAX_TOKENS"):
        _digester(fake).digest(_session())
    fake.generate_script = [Reply(200, {"promptFeedback": {"blockReason": "SAFETY"}})]
    with pytest.raises(DigestRejected, match="SAFETY"):
        _digester(fake).digest(_session())


def test_a_secret_left_in_the_input_is_never_sent(fake):
    session = _session(reply="export GITHUB_TOKEN=ghp_FalHuG5P6C7ROUopuFRE9oTAvJN6U6PrPod6")
    with pytest.raises(SecretInRequest) as raised:
        _digester(fake).digest(session)
    assert "ghp_" not in str(raised.value)
    assert fake.calls() == []


def test_a_long_session_is_digested_in_segments_and_merged(fake):
    session = _session(n_exchanges=40, reply="Released the lock in teardown. " * 20)
    whole = "\n".join(digest_input(session, 10**9))
    segments = digest_input(session, 4000 * 4)
    assert len(segments) > 1 and all(len(s) <= 16_000 for s in segments)
    # Nothing is dropped: every exchange is in exactly one segment.
    assert sum(s.count("### Exchange") for s in segments) == 40 == whole.count("### Exchange")
    result = _digester(fake, budget=4000).digest(session)
    n = len(segments)
    assert result.method == f"segments:{n}+merge" and result.calls == n + 1
    calls = fake.calls("generateContent")
    assert f"part 1 of {n}" in calls[0].json["contents"][0]["parts"][0]["text"]
    assert "Merge them into the digest" in calls[-1].json["contents"][0]["parts"][0]["text"]
