"""`librarian ingest` with Claude as the digester (LIBRARIAN_DIGEST_PROVIDER=anthropic): the real
Dagster run and the real `anthropic` SDK against a stand-in Messages API. Only the redacted
session leaves the machine, the digest is paid once per content and model, and the Dagster UI
shows the key's variable, never the key."""

import pytest

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.settings import Settings
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.defs.resources import build_resources
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.fake_anthropic import FakeAnthropic, api_error
from tests.fake_gemini import DEFAULT_DIGEST
from tests.helpers import write_transcript

SESSION = "58585858-5858-4585-8585-585858585858"
KEY = "sk-ant-api03-FAKEFAKEFAKEFAKEFAKEFAKE"
TOKEN = "ghp_FalHuG5P6C7ROUopuFRE9oTAvJN6U6PrPod6"


@pytest.fixture
def fake():
    with FakeAnthropic() as server:
        yield server


def _settings(tmp_path, database_url, fake, monkeypatch) -> Settings:
    # The resources bind the key by name (dg.EnvVar): it must be in the environment.
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    return Settings.from_env(
        {
            "LIBRARIAN_HOME": str(tmp_path / "home"),
            "LIBRARIAN_MIRROR": str(tmp_path / "mirror"),
            "LIBRARIAN_DATABASE_URL": database_url,
            "LIBRARIAN_DIGEST_PROVIDER": "anthropic",
            "ANTHROPIC_API_KEY": KEY,
            "LIBRARIAN_ANTHROPIC_BASE_URL": fake.url,
            "LIBRARIAN_LLM_ATTEMPTS": "2",
            "LIBRARIAN_LLM_BACKOFF_SECONDS": "0.01",
        }
    )


def test_claude_digests_the_redacted_session_once_and_a_failure_stores_nothing(
    tmp_path, database_url, fake, monkeypatch
):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, SESSION, f"Push with {TOKEN} please", "The lock was held.")
    settings = _settings(tmp_path, database_url, fake, monkeypatch)
    digester = build_resources(settings)["digester"]
    assert KEY not in repr(digester) and "ANTHROPIC_API_KEY" in repr(digester)

    # The service refuses the key (no retry can help): the run fails loudly, nothing is stored.
    fake.script = [api_error(401, "authentication_error", "invalid x-api-key")]
    instance = open_instance(settings)
    files = session_files_for([folder])
    [failed] = ingest_sessions(files, settings, instance)
    assert failed.status == "failed" and "HTTP 401" in failed.detail, failed.detail
    with Store(database_url) as store:
        assert store.memories.get_memory(SESSION) is None

    fake.script = []
    [done] = ingest_sessions(files, settings, instance)
    assert done.status == "ingested", done.detail
    with Store(database_url) as store:
        memory = store.memories.get_memory(SESSION)
        assert memory is not None and memory.summary == DEFAULT_DIGEST["summary"]
    sent = [call.body.decode() for call in fake.calls()]
    assert sent and all(TOKEN not in body and KEY not in body for body in sent)
    assert "[REDACTED:" in sent[-1]
    calls = len(sent)
    [again] = ingest_sessions(files, settings, instance)
    assert again.status == "ingested" and len(fake.calls()) == calls  # paid once
    dispose_instance(instance)
