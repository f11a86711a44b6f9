"""`librarian ingest` and `search` from the command line with Gemini providers (a fake server).

What the commands print and return is under test, not their process: they run in this one."""

import os

from tests.fake_gemini import FakeGemini
from tests.helpers import free_port, write_transcript

SESSION = "66666666-6666-6666-6666-666666666666"
KEY = "AIzaSyFAKE-cli-key-0123456789abcdefghij"


def test_ingest_then_search_with_gemini_from_the_command_line(
    tmp_path, database_url, librarian_cli
):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(
        folder, SESSION, "Why does the zanzibar cache test hang?", "The lock was held."
    )
    with FakeGemini() as fake:
        env = {
            **os.environ,
            "LIBRARIAN_HOME": str(tmp_path / "home"),
            "LIBRARIAN_DATABASE_URL": database_url,
            "LIBRARIAN_DIGEST_PROVIDER": "gemini",
            "LIBRARIAN_EMBED_PROVIDER": "gemini",
            "GEMINI_API_KEY": KEY,
            "LIBRARIAN_GEMINI_BASE_URL": fake.url,
            # No recall server there: `search` runs in this process, as this test means.
            "LIBRARIAN_MCP_PORT": str(free_port()),
        }
        ingest = librarian_cli(["ingest", str(folder)], env)
        assert ingest.returncode == 0, ingest.stdout + ingest.stderr
        assert f"ingested {SESSION}" in ingest.stdout
        assert fake.calls("generateContent") and fake.calls("batchEmbedContents")

        # Words of the digest the fake wrote ("... zanzibar cache test ... lock in teardown");
        # some are the session's own too: relevance is judged on the session's exchanges.
        search = librarian_cli(["search", "zanzibar cache lock teardown"], env)
        assert search.returncode == 0, search.stderr
        assert SESSION in search.stdout and "teardown" in search.stdout

        status = librarian_cli(["status"], env)
        assert status.returncode == 0, status.stderr
        assert "digests:     gemini gemini-2.5-flash" in status.stdout
        assert "embeddings:  gemini gemini-embedding-001 (768-d)" in status.stdout
        assert "llm tokens:  1,200 in, 300 out, 1 call(s)" in status.stdout
        assert KEY not in ingest.stdout + ingest.stderr + search.stdout + status.stdout

        # The same store searched with the local embedder: it says how to re-embed.
        local = {k: v for k, v in env.items() if k != "LIBRARIAN_EMBED_PROVIDER"}
        mismatch = librarian_cli(["search", "zanzibar cache lock teardown"], local)
        assert mismatch.returncode == 1
        assert "gemini-embedding-001" in mismatch.stderr and "librarian ingest" in mismatch.stderr
        status = librarian_cli(["status"], local)
        assert "not searchable now" in status.stdout


def test_a_missing_key_is_a_clear_error(tmp_path, librarian_cli):
    env = {k: v for k, v in os.environ.items() if k not in ("GEMINI_API_KEY", "GOOGLE_API_KEY")}
    env |= {"LIBRARIAN_HOME": str(tmp_path / "home"), "LIBRARIAN_DIGEST_PROVIDER": "gemini"}
    result = librarian_cli(["status"], env)
    assert result.returncode != 0
    assert "GEMINI_API_KEY" in result.stderr
