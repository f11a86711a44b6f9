"""Another agent's session through the one pipeline: found in that agent's own folder by the
sensor, left alone while it is written, remembered with its agent, and taken again (into the
same one memory) when it grows, as Claude Code's sessions are."""

import json
from pathlib import Path

import psycopg
import pytest

from librarian_dagster.core.capture.agents import AGENTS
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.definitions import defs as load_defs
from librarian_dagster.defs.partitions import SESSIONS
from librarian_dagster.ingest import ingest_paths, open_instance
from tests.helpers import age, sensor_tick, settings_in_env

SESSION = "019e7777-aaaa-7000-8000-000000000001"


def _line(timestamp: str, kind: str, payload: dict) -> str:
    return json.dumps({"timestamp": timestamp, "type": kind, "payload": payload}) + "\n"


def _exchange(minute: int, prompt: str, answer: str) -> str:
    at = f"2026-05-01T10:{minute:02d}:00.000Z"
    return _line(
        at, "response_item",
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]},
    ) + _line(
        at, "response_item",
        {"type": "message", "role": "assistant", "phase": "final_answer",
         "content": [{"type": "output_text", "text": answer}]},
    )  # fmt: skip


def _rollout(folder: Path) -> Path:
    """A Codex rollout where Codex writes it: `sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`."""
    path = folder / "2026" / "05" / "01" / f"rollout-2026-05-01T10-00-00-{SESSION}.jsonl"
    path.parent.mkdir(parents=True)
    meta = {"id": SESSION, "timestamp": "2026-05-01T10:00:00.000Z", "cwd": "/home/dev/harbor",
            "originator": "codex_cli_rs", "cli_version": "0.169.0", "source": "cli",
            "git": {"branch": "main"}}  # fmt: skip
    path.write_text(
        _line("2026-05-01T10:00:00.000Z", "session_meta", meta)
        + _exchange(1, "why do the harbor webhooks arrive twice", "the retry queue had no key"),
        encoding="utf-8",
    )
    return path


def _memories(url: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT m.session_id, m.agent, string_agg(c.text, ' ') FROM memories m"
            " JOIN indexed_chunks c USING (session_id) GROUP BY m.session_id, m.agent"
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


@pytest.fixture
def codex_env(tmp_path, database_url, monkeypatch):
    settings = settings_in_env(monkeypatch, tmp_path, database_url, tmp_path / "mirror")
    codex = tmp_path / "codex" / "sessions"
    monkeypatch.setenv("LIBRARIAN_CODEX_SESSIONS", str(codex))
    instance = open_instance(settings)
    yield settings, codex, instance
    dispose_instance(instance)


def test_a_codex_session_settles_is_remembered_as_codex_and_again_when_it_grows(
    codex_env, database_url
):
    settings, codex, instance = codex_env
    definitions = load_defs()
    path = _rollout(codex)
    # Just written: the sensor waits for it to settle (Claude Code's mirror folder is absent).
    waiting = sensor_tick(definitions, instance, None)
    assert waiting.run_requests == []
    age(path, 600)
    settled = sensor_tick(definitions, instance, waiting.cursor)
    assert [r.partition_key for r in settled.run_requests] == [f"harbor/2026-05/codex/{SESSION}"]

    [outcome] = ingest_paths([codex], settings)
    assert (outcome.session_id, outcome.status) == (SESSION, "ingested")
    [(session_id, agent, text)] = _memories(database_url)
    assert (session_id, agent) == (SESSION, "codex") and "retry queue" in text
    assert sensor_tick(definitions, instance, settled.cursor).run_requests == []

    # Codex appends to the rollout when the session is resumed: one more request, one memory.
    with path.open("a", encoding="utf-8") as fh:
        fh.write(_exchange(30, "and the zeppelin banner is blank", "lazy loading hid it"))
    age(path, 600)
    grown = sensor_tick(definitions, instance, settled.cursor)
    assert len(grown.run_requests) == 1
    [again] = ingest_paths([path], settings)
    assert again.status == "ingested"
    [(session_id, agent, text)] = _memories(database_url)
    assert (session_id, agent) == (SESSION, "codex") and "zeppelin" in text
    assert sensor_tick(definitions, instance, grown.cursor).run_requests == []
    assert [k for k in instance.get_dynamic_partitions(SESSIONS) if k.endswith(SESSION)] == [
        f"harbor/2026-05/codex/{SESSION}"
    ]


LIVE = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
"""Sessions the real CLIs of today wrote in the tests that run them (tests/hooks/test_*_cli.py),
hooks adding context to each: each is ingested through the one pipeline as its agent's."""


def test_what_today_s_cli_of_each_agent_wrote_is_remembered_as_that_agent_s(
    codex_env, database_url, tmp_path
):
    import shutil

    settings, _, _ = codex_env
    live = tmp_path / "live"
    for source in [
        LIVE / "codex" / "rollout-0171-live.jsonl",
        LIVE / "gemini" / "tmp",
        LIVE / "opencode" / "opencode-1.18.33-live.db",
        LIVE / "copilot" / "live",
        LIVE / "pi" / "pi-0.73.1-live.jsonl",
    ]:
        copy = live / source.parent.name / source.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, copy)
    outcomes = ingest_paths([live], settings)
    assert {o.status for o in outcomes} == {"ingested"}, outcomes
    remembered: dict[str, str] = {}
    for _, agent, text in _memories(database_url):  # gemini/tmp holds older chats beside it
        remembered[agent] = remembered.get(agent, "") + text
    assert set(remembered) == set(AGENTS) - {"claude-code"}
    # Each holds what was asked in it (the runs' prompts), not only a shell of a session.
    assert "notes.txt" in remembered["codex"] and "discounts" in remembered["gemini"]
