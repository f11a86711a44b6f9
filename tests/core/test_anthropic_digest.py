"""The Claude digester (LIBRARIAN_DIGEST_PROVIDER=anthropic): the real `anthropic` SDK against a
stand-in Messages API on 127.0.0.1, with the guarantees of the Gemini path (test_llm_digest.py):
the schema as the structured output format, tokens counted, bounded retries that honour
Retry-After, a bad request failed at once, one repair, a refusal rejected, a secret never sent."""

import json

import pytest

from librarian_dagster.core.assembly.providers import describe, digest_config, make_digester
from librarian_dagster.core.digest.llm import AnthropicDigester, DigestRejected, SecretInRequest
from librarian_dagster.core.digest.prompt import PROMPT_VERSION
from librarian_dagster.core.digest.schema import SECTIONS
from librarian_dagster.core.models.anthropic import AnthropicConfig
from librarian_dagster.core.models.calls import ProviderRejected, ProviderUnavailable, RetryBounds
from librarian_dagster.core.settings import Settings, SettingsError
from tests.core.test_llm_digest import _session
from tests.fake_anthropic import FakeAnthropic, api_error, digest_message, message
from tests.fake_gemini import DEFAULT_DIGEST

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier


KEY = "sk-ant-api03-FAKE"


@pytest.fixture
def fake():
    with FakeAnthropic() as server:
        yield server


def _digester(fake, sleeps=None, attempts=4):
    return AnthropicDigester(
        AnthropicConfig(api_key=KEY, base_url=fake.url),
        "claude-haiku-4-5",
        RetryBounds(attempts=attempts, backoff_seconds=1.5, max_wait_seconds=30),
        sleep=(sleeps.append if sleeps is not None else lambda _s: None),
    )


def test_a_digest_with_the_schema_as_output_format_and_tokens_counted(fake):
    result = _digester(fake).digest(_session(), known_tags=["python"])
    assert result.digest.summary == DEFAULT_DIGEST["summary"]
    assert result.model == f"claude-haiku-4-5+prompt-v{PROMPT_VERSION}"
    assert (result.input_tokens, result.output_tokens, result.calls) == (1500, 250, 1)
    (call,) = fake.calls()
    assert call.path == "/v1/messages"
    headers = {name.lower(): value for name, value in call.headers.items()}
    assert headers["authorization"] == f"Bearer {KEY}" and "anthropic-version" in headers
    body = call.json
    assert body["model"] == "claude-haiku-4-5" and body["system"]
    schema = body["output_config"]["format"]
    assert schema["type"] == "json_schema"
    assert set(schema["schema"]["required"]) >= {key for key, _ in SECTIONS} | {"summary"}
    assert schema["schema"]["additionalProperties"] is False
    assert "zanzibar cache test" in body["messages"][0]["content"]


def test_overloaded_and_rate_limited_then_success_wait_as_asked(fake):
    fake.script = [
        api_error(529, "overloaded_error", "Overloaded"),
        api_error(429, "rate_limit_error", "Too many requests", {"retry-after": "7"}),
        digest_message(),
    ]
    sleeps: list[float] = []
    result = _digester(fake, sleeps).digest(_session())
    assert result.calls == 1 and len(fake.calls()) == 3
    assert 1.5 * 0.8 <= sleeps[0] <= 1.5 * 1.2 and sleeps[1] == 7


def test_repeated_500_gives_up_after_the_bounded_tries(fake):
    fake.script = [api_error(500, "api_error", "Internal server error")] * 3
    with pytest.raises(ProviderUnavailable, match=r"gave up after 3 tries.*HTTP 500: api_error"):
        _digester(fake, attempts=3).digest(_session())
    assert len(fake.calls()) == 3


def test_a_bad_key_is_not_retried(fake):
    fake.script = [api_error(401, "authentication_error", "invalid x-api-key")]
    with pytest.raises(ProviderRejected, match="HTTP 401: authentication_error invalid x-api-key"):
        _digester(fake).digest(_session())
    assert len(fake.calls()) == 1


def test_a_reply_off_the_schema_is_repaired_once_then_fails_loudly(fake):
    fake.script = [message("{not json"), digest_message()]
    assert _digester(fake).digest(_session()).calls == 2
    fake.script = [message('{"summary": "x"}'), message('{"summary": "x"}')]
    with pytest.raises(DigestRejected, match="even after one repair attempt"):
        _digester(fake).digest(_session())


def test_a_refusal_or_a_cut_reply_is_rejected(fake):
    fake.script = [message("", stop_reason="refusal")]
    with pytest.raises(DigestRejected, match="refused"):
        _digester(fake).digest(_session())
    fake.script = [message(json.dumps(DEFAULT_DIGEST)[:40], stop_reason="max_tokens")]
    with pytest.raises(DigestRejected, match="max_tokens"):
        _digester(fake).digest(_session())


def test_a_secret_left_in_the_input_is_never_sent(fake):
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    with pytest.raises(SecretInRequest, match="github"):
        _digester(fake).digest(_session(reply=f"Use {token} to push."))
    assert fake.calls() == []


def test_the_settings_choose_claude_with_its_own_key_url_and_model(fake):
    with pytest.raises(SettingsError, match="ANTHROPIC_API_KEY"):
        Settings.from_env({"LIBRARIAN_DIGEST_PROVIDER": "anthropic"})
    settings = Settings.from_env(
        {
            "LIBRARIAN_DIGEST_PROVIDER": "anthropic",
            "ANTHROPIC_API_KEY": KEY,
            "LIBRARIAN_ANTHROPIC_BASE_URL": fake.url,
        }
    )
    assert describe(settings) == {
        "digests": "anthropic claude-haiku-4-5",
        "embeddings": "local all-MiniLM-L6-v2 (384-d)",
        "endpoint": f"Anthropic base URL {fake.url}",
    }
    digester = make_digester(digest_config(settings))
    assert isinstance(digester, AnthropicDigester)
    assert digester.model == "claude-haiku-4-5"  # the provider's default, not Gemini's
    assert KEY not in repr(digest_config(settings)) and KEY not in repr(settings)
    digester.digest(_session())
    assert len(fake.calls()) == 1
    chosen = Settings.from_env(
        {
            "LIBRARIAN_DIGEST_PROVIDER": "anthropic",
            "ANTHROPIC_API_KEY": KEY,
            "LIBRARIAN_DIGEST_MODEL": "claude-sonnet-4-5",
        }
    )
    assert digest_config(chosen).model == "claude-sonnet-4-5"
