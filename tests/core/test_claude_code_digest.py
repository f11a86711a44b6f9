"""The claude-code digester: the user's own Claude Code (`claude -p`), the real CLI from npm
(installed by scripts/test into .tools/claude-code) against a stand-in Messages API on 127.0.0.1
(ANTHROPIC_BASE_URL; a key stands in for the CLI's own login). The digest comes back through
`--json-schema`'s structured output; nothing of the session is left behind as a transcript, no
hook of the user's runs, and a secret is never sent."""

import json
import os
from pathlib import Path

import pytest

from librarian_dagster.core.assembly.providers import digest_config, make_digester
from librarian_dagster.core.digest.llm import ClaudeCodeDigester, SecretInRequest
from librarian_dagster.core.digest.prompt import SYSTEM
from librarian_dagster.core.models.calls import ProviderRejected, ProviderUnavailable, RetryBounds
from librarian_dagster.core.models.claude_code import ClaudeCodeConfig
from librarian_dagster.core.settings import Settings
from tests.core.test_llm_digest import _session
from tests.fake_anthropic import STRUCTURED_OUTPUT_TOOL, FakeAnthropic
from tests.fake_gemini import DEFAULT_DIGEST

pytestmark = pytest.mark.process  # starts a process or a server: not in the fast tier

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = ROOT / ".tools" / "claude-code" / "node_modules" / ".bin" / "claude"


@pytest.fixture
def claude() -> str:
    named = os.environ.get("LIBRARIAN_TEST_CLAUDE_CODE")
    cli = Path(named) if named else INSTALLED
    if not cli.exists():
        pytest.skip(f"the Claude Code CLI is absent ({cli}): `bash scripts/test` installs it")
    return str(cli)


@pytest.fixture
def fake(tmp_path, monkeypatch):
    with FakeAnthropic() as server:
        for name in list(os.environ):
            if name.startswith(("ANTHROPIC_", "CLAUDE_CODE_", "CLAUDECODE")):
                monkeypatch.delenv(name)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-stand-in-for-the-login")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        monkeypatch.setenv("DISABLE_TELEMETRY", "1")
        (tmp_path / "home").mkdir()
        yield server


def _digester(command: str, attempts: int = 2) -> ClaudeCodeDigester:
    bounds = RetryBounds(attempts=attempts, backoff_seconds=0.01, max_wait_seconds=1)
    return ClaudeCodeDigester(ClaudeCodeConfig(command, 60), "haiku", bounds)


def test_the_real_cli_digests_through_structured_output_and_leaves_no_transcript(
    claude, fake, tmp_path
):

    # A hook the user has (this product's prompt hook among them) must not run for a digest.
    settings_dir = tmp_path / "home" / ".claude"
    settings_dir.mkdir()
    marker = tmp_path / "hook-ran"
    hook = {"type": "command", "command": f"touch {marker}"}
    (settings_dir / "settings.json").write_text(
        json.dumps({"hooks": {"UserPromptSubmit": [{"hooks": [hook]}]}}), encoding="utf-8"
    )
    result = _digester(claude).digest(_session(), known_tags=["python"])
    assert result.digest.summary == DEFAULT_DIGEST["summary"]
    assert result.model.startswith("haiku+prompt-v") and result.input_tokens > 0
    sent = [call.json for call in fake.calls()]
    assert sent and all(call.path.startswith("/v1/messages") for call in fake.calls())
    first = sent[0]
    assert SYSTEM[:60] in json.dumps(first["system"])
    assert STRUCTURED_OUTPUT_TOOL in [tool.get("name") for tool in first.get("tools", [])]
    assert "zanzibar cache test" in json.dumps(first["messages"])
    assert not marker.exists()
    projects = settings_dir / "projects"
    assert not projects.exists() or not any(projects.rglob("*.jsonl"))


def test_the_settings_choose_the_cli_with_no_key(claude, fake):
    settings = Settings.from_env(
        {"LIBRARIAN_DIGEST_PROVIDER": "claude-code", "LIBRARIAN_CLAUDE_CODE_COMMAND": claude}
    )
    digester = make_digester(digest_config(settings))
    assert isinstance(digester, ClaudeCodeDigester) and digester.model == "haiku"
    assert digester.digest(_session()).digest.summary == DEFAULT_DIGEST["summary"]


def test_a_secret_left_in_the_input_is_never_sent(claude, fake):
    token = "ghp_FalHuG5P6C7ROUopuFRE9oTAvJN6U6PrPod6"
    with pytest.raises(SecretInRequest):
        _digester(claude).digest(_session(reply=f"export GITHUB_TOKEN={token}"))
    assert fake.calls() == []


def _script(tmp_path: Path, body: str) -> str:
    """A stand-in for the CLI's process (not its service): what `claude -p` prints on failure."""
    script = tmp_path / "claude-failing"
    script.write_text(f"#!/bin/sh\ncat >/dev/null\n{body}\n", encoding="utf-8")
    script.chmod(0o755)
    return str(script)


def test_an_overloaded_service_is_retried_within_bounds_then_fails_loudly(tmp_path):
    failed = {"type": "result", "is_error": True, "api_error_status": 529, "result": "Overloaded"}
    command = _script(tmp_path, f"echo '{json.dumps(failed)}'; exit 1")
    with pytest.raises(ProviderUnavailable, match=r"gave up after 2 tries.*HTTP 529: Overloaded"):
        _digester(command).digest(_session())


def test_a_refused_login_or_a_missing_cli_fails_at_once_with_the_reason(tmp_path):
    failed = {
        "type": "result",
        "is_error": True,
        "api_error_status": 401,
        "result": "Invalid API key",
    }
    with pytest.raises(ProviderRejected, match="HTTP 401: Invalid API key"):
        _digester(_script(tmp_path, f"echo '{json.dumps(failed)}'; exit 1")).digest(_session())
    with pytest.raises(ProviderRejected, match="not found: install Claude Code"):
        _digester(str(tmp_path / "no-such-claude")).digest(_session())
