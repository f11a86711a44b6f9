"""`librarian ingest` with the user's own Claude Code as digester
(LIBRARIAN_DIGEST_PROVIDER=claude-code): the real Dagster run, the real CLI from npm, a stand-in
Messages API behind it. Only the redacted session is sent, the digest is paid once per content
and model, and the memory is stored from what the CLI's structured output said."""

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.settings import Settings
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.ingest import ingest_sessions, open_instance

# The real CLI (skipped, saying so, when absent) and the stand-in service it is pointed at.
from tests.core.test_claude_code_digest import claude, fake  # noqa: F401
from tests.fake_gemini import DEFAULT_DIGEST
from tests.helpers import write_transcript

SESSION = "59595959-5959-4595-9595-595959595959"
TOKEN = "ghp_FalHuG5P6C7ROUopuFRE9oTAvJN6U6PrPod6"


def test_claude_code_digests_a_session_through_the_real_job_once(
    tmp_path,
    database_url,
    claude,  # noqa: F811 (the imported fixture)
    fake,  # noqa: F811
):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, SESSION, f"Push with {TOKEN} please", "The lock was held.")
    settings = Settings.from_env(
        {
            "LIBRARIAN_HOME": str(tmp_path / "librarian"),
            "LIBRARIAN_MIRROR": str(tmp_path / "mirror"),
            "LIBRARIAN_DATABASE_URL": database_url,
            "LIBRARIAN_DIGEST_PROVIDER": "claude-code",
            "LIBRARIAN_CLAUDE_CODE_COMMAND": claude,
        }
    )
    instance = open_instance(settings)
    files = session_files_for([folder])
    [done] = ingest_sessions(files, settings, instance)
    assert done.status == "ingested", done.detail
    with Store(database_url) as store:
        memory = store.memories.get_memory(SESSION)
        assert memory is not None and memory.summary == DEFAULT_DIGEST["summary"]
        assert memory.digest_model.startswith("haiku+prompt-v")
    sent = [call.body.decode() for call in fake.calls()]
    assert sent and all(TOKEN not in body for body in sent)
    assert any("[REDACTED:" in body for body in sent)
    calls = len(sent)
    [again] = ingest_sessions(files, settings, instance)
    assert again.status == "ingested" and len(fake.calls()) == calls  # paid once
    dispose_instance(instance)
