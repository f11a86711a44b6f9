"""Two people push real sessions of six agents (the agents corpus) to one server with the real
`librarian push`: every session is remembered once, as its pusher's, and a secret planted in a
laptop's transcript is in no byte the server received. Skipped, saying so, without the corpus."""

import json
import shutil
from pathlib import Path

import psycopg
import pytest

from tests.helpers import age, transcript_line
from tests.test_push import SECRET, every_byte, push, server  # noqa: F401 (a fixture)

pytestmark = pytest.mark.process

# The corpus' folder of each agent -> the setting its laptop reads it from.
FOLDERS = {
    "claude-code": "LIBRARIAN_MIRROR",
    "codex": "LIBRARIAN_CODEX_SESSIONS",
    "gemini-cli": "LIBRARIAN_GEMINI_SESSIONS",
    "opencode": "LIBRARIAN_OPENCODE_DATA",
    "copilot-cli": "LIBRARIAN_COPILOT_SESSIONS",
    "pi": "LIBRARIAN_PI_SESSIONS",
}
PEOPLE = {"alice": ("claude-code", "codex", "gemini-cli"), "bob": ("opencode", "copilot-cli", "pi")}
EACH = 1
PLANTED = "5ec2e700-0000-4000-8000-00000000000a"


def _chosen(corpus: Path, agent: str) -> list[dict]:
    """Sessions of the agent (EACH), of middling size: real, quick to ingest."""
    manifest = [json.loads(line) for line in (corpus / "manifest.jsonl").open()]
    mains = [m for m in manifest if m["agent"] == agent and not m["subagent"]]
    return sorted(mains, key=lambda m: abs((corpus / m["file"]).stat().st_size - 60_000))[:EACH]


def _laptop(root: Path, corpus: Path, person: str) -> tuple[dict[str, str], list[str]]:
    import os

    env = {name: str(root / "none" / name) for name in FOLDERS.values()}
    chosen = []
    for agent in PEOPLE[person]:
        folder = root / agent
        for entry in _chosen(corpus, agent):
            target = folder / entry["file"]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(corpus / entry["file"], target)
            age(target, 600)
            chosen.append(entry["session_id"])
        env[FOLDERS[agent]] = str(folder)
    env |= {"PATH": os.environ["PATH"], "HOME": str(root), "LIBRARIAN_HOME": str(root / "home")}
    return env, chosen


def test_two_people_push_six_agents_real_sessions_each_remembered_once_as_theirs(
    server,  # noqa: F811
    agents_corpus,
    tmp_path,
):
    alice, alices = _laptop(tmp_path / "alice", agents_corpus, "alice")
    bob, bobs = _laptop(tmp_path / "bob", agents_corpus, "bob")
    planted = Path(alice["LIBRARIAN_MIRROR"]) / "-work-app" / f"{PLANTED}.jsonl"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(
        transcript_line(PLANTED, "user", f"deploy with GITHUB_TOKEN={SECRET} now", "u1")
        + transcript_line(PLANTED, "assistant", "Deployed; rotate that token.", "a1")
    )
    age(planted, 600)
    alices.append(PLANTED)

    for env, person in ((alice, "alice"), (bob, "bob")):
        done = push(env, server.url, server.tokens[person])
        assert done.returncode == 0, done.stderr
    assert SECRET.encode() not in every_byte(server.settings.uploads)

    asked = server.ingest()
    assert sorted(asked) == sorted(alices + bobs)
    with psycopg.connect(server.settings.database_url) as conn:
        remembered = dict(conn.execute("SELECT session_id, person FROM memories").fetchall())
        empty = {
            r[0]
            for r in conn.execute(
                "SELECT session_id FROM session_sources WHERE nothing_at_fingerprint IS NOT NULL"
            )
        }
        stored = conn.execute(
            "SELECT string_agg(digest_text, ' ') FROM memories"
            " UNION ALL SELECT string_agg(text, ' ') FROM indexed_chunks"
        ).fetchall()
    for person, sessions in (("alice", alices), ("bob", bobs)):
        for session_id in sessions:
            assert remembered.get(session_id) == person or session_id in empty, session_id
    assert len(remembered) >= len(alices + bobs) - 1  # at most one with nothing to keep
    assert "rotate that token" in json.dumps(stored) and SECRET not in json.dumps(stored)
    assert server.ingest() == []  # nothing asked twice
