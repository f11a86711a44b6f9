"""The ingest job with Gemini digests and embeddings: the real SDK against a fake server."""

import json

import dagster as dg
import pytest

from librarian_dagster.core.assembly.providers import configured_embedder
from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.core.recall.answer import NOTHING_RELEVANT, EmbeddingSpaceMismatch, recall
from librarian_dagster.core.settings import Settings
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.defs.assets.session_digest import session_digest
from librarian_dagster.defs.partitions import session_id_of
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.conftest import FIXTURES
from tests.fake_gemini import FakeGemini, digest_reply, error, generation
from tests.helpers import write_transcript

SESSION = "55555555-5555-5555-5555-555555555555"
OTHER = "66666666-6666-6666-6666-666666666666"
KEY = "AIzaSyFAKE-test-key-0123456789abcdefgh"
PROMPT, REPLY = "Why does the zanzibar cache test hang on CI?", "The lock was held."


@pytest.fixture
def fake():
    with FakeGemini() as server:
        yield server


def _settings(tmp_path, database_url, fake, monkeypatch, **extra) -> Settings:
    env = {
        "LIBRARIAN_HOME": str(tmp_path / "home"),
        "LIBRARIAN_MIRROR": str(tmp_path / "mirror"),
        "LIBRARIAN_DATABASE_URL": database_url,
        "LIBRARIAN_DIGEST_PROVIDER": "gemini",
        "LIBRARIAN_EMBED_PROVIDER": "gemini",
        "GEMINI_API_KEY": KEY,
        "LIBRARIAN_GEMINI_BASE_URL": fake.url,
        "LIBRARIAN_LLM_ATTEMPTS": "3",
        "LIBRARIAN_LLM_BACKOFF_SECONDS": "0.01",
        # The step's own later runs (10 and 20 s by default): the same runs, sooner.
        "LIBRARIAN_LLM_STEP_RETRY_SECONDS": "0.5",
        **extra,
    }
    # The resources bind the key by name (dg.EnvVar): it must be in the environment.
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    return Settings.from_env(env)


def _metadata(instance, asset: str):
    [record] = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset)), limit=1
    ).records
    return {k: v.value for k, v in record.asset_materialization.metadata.items()}


def test_gemini_digest_and_embeddings_then_an_unchanged_session_costs_no_call(
    tmp_path, database_url, fake, monkeypatch
):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, SESSION, PROMPT, REPLY)
    settings = _settings(tmp_path, database_url, fake, monkeypatch)
    instance = open_instance(settings)
    files = session_files_for([folder])

    [first] = ingest_sessions(files, settings, instance)
    assert first.status == "ingested", first.detail
    digest_meta = _metadata(instance, "session_digest")
    assert digest_meta["model"] == "gemini-2.5-flash+prompt-v1"
    assert (digest_meta["input_tokens"], digest_meta["output_tokens"]) == (1200, 300)
    assert digest_meta["calls"] == 1 and digest_meta["reused"] is False
    # Tags normalised on the write path: "Python", "py" -> python; "Testing" -> testing.
    assert digest_meta["tags"] == "python, testing, ci"
    assert _metadata(instance, "chunk_embeddings")["model"] == "gemini-embedding-001"
    with Store(database_url) as store:
        memory = store.memories.get_memory(SESSION)
        assert memory is not None and memory.summary.startswith("Fixed the flaky zanzibar")
        assert memory.embedding_model == "gemini-embedding-001"
        spaces = store.search.embedding_spaces()
        assert [(s.model, s.dimension) for s in spaces] == [("gemini-embedding-001", 768)]
        assert store.memories.stats().input_tokens == 1200
    calls = len(fake.calls())
    assert len(fake.calls("generateContent")) == 1 and calls >= 2

    [second] = ingest_sessions(files, settings, instance)
    assert second.status == "ingested"
    assert _metadata(instance, "session_digest")["reused"] is True
    assert _metadata(instance, "chunk_embeddings")["embedded"] == 0
    assert len(fake.calls()) == calls  # not one request more

    # Search uses the configured space: the query is embedded as a RETRIEVAL_QUERY.
    with Store(database_url) as store:
        found = recall(
            store.search, configured_embedder(settings), "zanzibar cache lock teardown", limit=5
        )
    assert found.results and found.results[0].session_id == SESSION
    # Found by the digest the fake wrote, not only by the session's own words.
    assert any("teardown" in r.text for r in found.results if r.section != "exchange")
    assert fake.calls()[-1].json["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
    # The key went in a header, never into the stored settings of the run.
    assert KEY not in json.dumps(
        [r.dagster_run.run_config for r in instance.get_run_records()], default=str
    )

    # Switching to the local embedder without re-embedding: search says how to re-embed.
    local = Settings.from_env({"LIBRARIAN_DATABASE_URL": database_url})
    with (
        Store(database_url) as store,
        pytest.raises(EmbeddingSpaceMismatch, match=r"gemini-embedding-001.*librarian ingest"),
    ):
        recall(store.search, configured_embedder(local), "zanzibar cache lock")
    dispose_instance(instance)


def test_a_new_prompt_version_or_model_digests_again(tmp_path, database_url, fake, monkeypatch):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, SESSION, PROMPT, REPLY)
    settings = _settings(tmp_path, database_url, fake, monkeypatch)
    instance = open_instance(settings)
    files = session_files_for([folder])
    ingest_sessions(files, settings, instance)
    other = _settings(
        tmp_path, database_url, fake, monkeypatch, LIBRARIAN_DIGEST_MODEL="gemini-2.5-pro"
    )
    [outcome] = ingest_sessions(files, other, instance)
    assert outcome.status == "ingested"
    assert _metadata(instance, "session_digest")["model"] == "gemini-2.5-pro+prompt-v1"
    assert len(fake.calls("generateContent")) == 2
    dispose_instance(instance)


def test_429_then_success(tmp_path, database_url, fake, monkeypatch):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, SESSION, PROMPT, REPLY)
    settings = _settings(tmp_path, database_url, fake, monkeypatch)
    fake.generate_script = [
        error(429, "Resource has been exhausted.", "RESOURCE_EXHAUSTED", {"Retry-After": "0"})
    ]
    instance = open_instance(settings)
    [outcome] = ingest_sessions(session_files_for([folder]), settings, instance)
    assert outcome.status == "ingested", outcome.detail
    assert len(fake.calls("generateContent")) == 2
    dispose_instance(instance)


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        # 3 tries in the step, and the retry policy's 2 more runs of the step: 9 calls.
        ([error(500, "Internal error encountered.", "INTERNAL")] * 9, "gave up after 3 tries"),
        ([generation("Error: quota exceeded for this project.")], "no digest"),
        ([generation("{not json")] * 2, "even after one repair attempt"),
    ],
)
def test_a_failed_digest_fails_the_run_and_writes_nothing(
    tmp_path, database_url, fake, monkeypatch, script, reason
):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, SESSION, PROMPT, REPLY)
    settings = _settings(tmp_path, database_url, fake, monkeypatch)
    fake.generate_script = list(script)
    instance = open_instance(settings)
    [outcome] = ingest_sessions(session_files_for([folder]), settings, instance)
    assert outcome.status == "failed" and reason in outcome.detail
    assert "session_digest" in outcome.detail
    assert len(fake.calls("generateContent")) == len(script)
    with Store(database_url) as store:
        assert store.memories.get_memory(SESSION) is None
    assert fake.calls("batchEmbedContents") == []  # no later stage ran
    dispose_instance(instance)


def test_no_request_body_holds_a_secret(tmp_path, database_url, fake, monkeypatch):
    samples = FIXTURES / "eval" / "secrets-dev.jsonl"  # in the repository: a clone tests itself
    cases = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
    secrets = [s for c in cases for s in c["secrets"]]
    assert len(secrets) >= 50
    folder = tmp_path / "mirror" / "-work-app"
    half = len(cases) // 2
    prompt = "Deploy with these settings:\n" + "\n".join(c["text"] for c in cases[:half])
    reply = "Done. I used:\n" + "\n".join(c["text"] for c in cases[half:])
    write_transcript(folder, SESSION, prompt, reply)
    settings = _settings(tmp_path, database_url, fake, monkeypatch)
    instance = open_instance(settings)
    [outcome] = ingest_sessions(session_files_for([folder]), settings, instance)
    assert outcome.status == "ingested", outcome.detail
    bodies = [r.body.decode("utf-8") for r in fake.calls()]
    assert fake.calls("generateContent") and fake.calls("batchEmbedContents")
    # JSON escapes (\n, \") aside, a secret would appear as itself: look in the decoded text too.
    sent = "\n".join(bodies + [json.dumps(json.loads(b), ensure_ascii=False) for b in bodies])
    decoded = "\n".join(
        p.get("text", "")
        for b in bodies
        for part in (json.loads(b).get("contents") or [])
        + [r["content"] for r in json.loads(b).get("requests") or []]
        for p in part["parts"]
    )
    leaked = [s for s in secrets if s in sent or s in decoded]
    assert leaked == []
    assert "[REDACTED:" in decoded
    dispose_instance(instance)


def test_the_digest_asset_is_bounded():
    assert session_digest.op.pool == "llm"


def test_a_spent_daily_budget_defers_the_digest_to_the_next_day(
    tmp_path, database_url, fake, monkeypatch
):
    first, second = SESSION, "77777777-7777-7777-7777-777777777777"
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, first, PROMPT, REPLY)
    write_transcript(folder, second, "How do I rotate the nginx logs?", "Use logrotate.")
    # One digest from the fake costs 1,500 tokens: the first spends the budget.
    settings = _settings(
        tmp_path, database_url, fake, monkeypatch, LIBRARIAN_DAILY_TOKEN_BUDGET="1000"
    )
    instance = open_instance(settings)
    outcomes = ingest_sessions(session_files_for([folder]), settings, instance)
    by_id = {o.session_id: o for o in outcomes}
    assert by_id[first].status == "ingested"
    assert by_id[second].status == "deferred"
    assert "daily token budget is spent (1,500 of 1,000" in by_id[second].detail
    assert len(fake.calls("generateContent")) == 1  # nothing spent on the deferred one
    with Store(database_url) as store:
        assert store.memories.get_memory(second) is None
        assert store.ledger.due_deferrals() == []  # due tomorrow, not today

        # Tomorrow: the deferral is due, and today's spend is yesterday's.
        with store.database.connection() as conn:
            conn.execute("UPDATE deferred_digests SET deferred_on = deferred_on - 1")
            conn.execute("UPDATE llm_usage SET day = day - 1")
        assert store.ledger.due_deferrals() == [second]
        [again] = ingest_sessions(
            session_files_for([folder / f"{second}.jsonl"]), settings, instance
        )
        assert again.status == "ingested", again.detail
        assert store.ledger.due_deferrals() == [] and store.memories.get_memory(second) is not None
    dispose_instance(instance)


def test_the_sensor_asks_again_for_a_deferral_due_today(tmp_path, database_url, monkeypatch):
    from librarian_dagster.definitions import defs as load_defs
    from tests.helpers import sensor_tick

    monkeypatch.setenv("LIBRARIAN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LIBRARIAN_MIRROR", str(tmp_path / "mirror"))
    monkeypatch.setenv("LIBRARIAN_DATABASE_URL", database_url)
    (tmp_path / "mirror").mkdir()
    with Store(database_url) as store:
        store.ledger.defer_digest(SESSION)
    instance = open_instance(Settings.from_env())
    quiet = sensor_tick(load_defs(), instance, None)
    assert not quiet.run_requests  # deferred today: due tomorrow
    with Store(database_url) as store, store.database.connection() as conn:
        conn.execute("UPDATE deferred_digests SET deferred_on = deferred_on - 1")
    due = sensor_tick(load_defs(), instance, None)
    [request] = due.run_requests
    assert session_id_of(request.partition_key) == SESSION and ":deferred:" in (
        request.run_key or ""
    )
    dispose_instance(instance)


def test_a_question_only_the_digest_answers_is_answered_and_one_about_nothing_is_not(
    tmp_path, database_url, fake, monkeypatch
):
    # The digest says in its own words what the session's transcript never does: relevance
    # reads both layers, against the Gemini space's own scale, not the local model's.
    fake.default_generate = lambda _body: digest_reply(summary="QUOKKA fake text about the session")
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, SESSION, PROMPT, REPLY)
    write_transcript(folder, OTHER, "Rename the build script", "Renamed it to build.sh.")
    settings = _settings(tmp_path, database_url, fake, monkeypatch)
    instance = open_instance(settings)
    outcomes = ingest_sessions(session_files_for([folder]), settings, instance)
    assert [o.status for o in outcomes] == ["ingested", "ingested"]
    embedder = configured_embedder(settings)
    with Store(database_url) as store:
        found = recall(store.search, embedder, "QUOKKA fake text about the session", limit=5)
        assert found.note is None and found.results[0].session_id == SESSION
        assert found.results[0].score >= settings.recall_threshold
        nothing = recall(
            store.search, embedder, "how did we tune pod autoscaling for the billing service"
        )
        assert nothing.results == [] and nothing.note == NOTHING_RELEVANT
    dispose_instance(instance)


def _two_sessions(tmp_path):
    folder = tmp_path / "mirror" / "-work-app"
    write_transcript(folder, SESSION, PROMPT, REPLY)
    write_transcript(folder, OTHER, "How did we shard the quokka index?", "By tenant id.")
    return session_files_for([folder])


def _embedded_texts(call) -> list[str]:
    return [" ".join(p["text"] for p in r["content"]["parts"]) for r in call.json["requests"]]


def test_a_runs_sessions_are_embedded_in_one_call(tmp_path, database_url, fake, monkeypatch):
    settings = _settings(tmp_path, database_url, fake, monkeypatch)
    instance = open_instance(settings)
    outcomes = ingest_sessions(_two_sessions(tmp_path), settings, instance, per_run=2)
    assert [o.status for o in outcomes] == ["ingested", "ingested"], outcomes
    [call] = fake.calls("batchEmbedContents")
    texts = " ".join(_embedded_texts(call))
    assert "zanzibar" in texts and "quokka" in texts
    with Store(database_url) as store:
        for session in (SESSION, OTHER):
            memory = store.memories.get_memory(session)
            assert memory is not None and memory.embedding_model == "gemini-embedding-001"
    dispose_instance(instance)


def test_a_run_wide_embedding_call_that_fails_falls_back_to_each_session_alone(
    tmp_path, database_url, fake, monkeypatch
):
    settings = _settings(tmp_path, database_url, fake, monkeypatch)
    # Refused for good (not retried): the run's call fails; each session's own call then passes.
    fake.embed_script = [error(400, "Request payload size exceeds the limit.", "INVALID_ARGUMENT")]
    instance = open_instance(settings)
    outcomes = ingest_sessions(_two_sessions(tmp_path), settings, instance, per_run=2)
    assert [o.status for o in outcomes] == ["ingested", "ingested"], outcomes
    first, *alone = fake.calls("batchEmbedContents")
    assert len(alone) == 2
    assert "zanzibar" in " ".join(_embedded_texts(first)) and "quokka" in " ".join(
        _embedded_texts(first)
    )
    assert ["quokka" in " ".join(_embedded_texts(c)) for c in alone].count(True) == 1
    dispose_instance(instance)
