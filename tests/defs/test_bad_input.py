"""Bad input is ingested or skipped with a reason in the run's metadata: never a crash."""

import os
import shutil

import dagster as dg
import psycopg
import pytest

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture.readers import session_files_for
from librarian_dagster.dagster_internals import dispose_instance
from librarian_dagster.definitions import defs as load_defs
from librarian_dagster.defs.partitions import keys_by_session, session_id_of
from librarian_dagster.ingest import ingest_sessions, open_instance
from tests.conftest import TRANSCRIPTS
from tests.helpers import (
    age,
    make_settings,
    rows_per_session,
    sensor_tick,
    settings_in_env,
    transcript_line,
)

TRUNCATED = TRANSCRIPTS / "derived" / "03eb5929-52b3-4b13-ada3-b93ae35806b8.truncated.jsonl"
EMPTY = "22222222-2222-2222-2222-222222222222"
SUMMARY_ONLY = (
    TRANSCRIPTS / "daaain__claude-code-log" / "4e27c414-a885-46a0-b5c8-d58e1417377d.jsonl"
)


def _key(instance, session_id: str) -> str:
    """The session's partition key (`<project>/<month>/<id>`)."""
    return keys_by_session(instance.get_dynamic_partitions("sessions"))[session_id]


def _latest_metadata(instance, asset: str, session_id: str):
    """The metadata of an asset's latest materialization for one session, as the UI shows it."""
    partition = _key(instance, session_id)
    [record] = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[partition]), limit=1
    ).records
    return record.asset_materialization.metadata


@pytest.fixture
def bad_mirror(tmp_path):
    folder = tmp_path / "mirror" / "-work-bad"
    folder.mkdir(parents=True)
    (folder / "11111111-1111-1111-1111-111111111111.jsonl").write_text(
        "this is not JSON at all\n<html>oops</html>\n", encoding="utf-8"
    )
    (folder / "22222222-2222-2222-2222-222222222222.jsonl").write_bytes(b"")
    shutil.copy(TRUNCATED, folder / "03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl")
    shutil.copy(SUMMARY_ONLY, folder / SUMMARY_ONLY.name)
    return folder


def test_each_bad_file_is_ingested_or_skipped_with_its_reason(tmp_path, database_url, bad_mirror):
    settings = make_settings(tmp_path, database_url, bad_mirror.parent)
    instance = open_instance(settings)
    outcomes = {
        o.session_id: o
        for o in ingest_sessions(session_files_for([bad_mirror]), settings, instance)
    }
    assert len(outcomes) == 4
    assert {o.status for o in outcomes.values()} <= {"ingested", "skipped"}, outcomes

    not_json = outcomes["11111111-1111-1111-1111-111111111111"]
    assert not_json.status == "skipped" and not_json.detail
    empty = outcomes["22222222-2222-2222-2222-222222222222"]
    assert empty.status == "skipped" and "empty" in empty.detail
    assert outcomes[SUMMARY_ONLY.stem].status == "skipped"
    truncated = outcomes["03eb5929-52b3-4b13-ada3-b93ae35806b8"]
    assert truncated.status == "ingested" and truncated.chunks > 0

    # The reason is in the run's metadata, where the UI shows it.
    metadata = _latest_metadata(instance, "transcript", "03eb5929-52b3-4b13-ada3-b93ae35806b8")
    assert metadata["malformed_lines"].value >= 1
    skipped = _latest_metadata(instance, "transcript", "22222222-2222-2222-2222-222222222222")
    assert "empty" in skipped["skip_reason"].value
    # Nothing is staged or stored for a skipped session. The four went in one run (a range):
    # the later stages' partitions of a skipped session say why they hold nothing.
    assert not list((settings.home / "staging").rglob("22222222-*"))
    for later in ("redacted_session", "session_digest", "memory"):
        assert "nothing to remember" in _latest_metadata(instance, later, EMPTY)["absent"].value

    with Store(database_url) as store:
        assert store.memories.get_memory("03eb5929-52b3-4b13-ada3-b93ae35806b8") is not None
        assert store.memories.get_memory("22222222-2222-2222-2222-222222222222") is None
    dispose_instance(instance)


def test_a_skipped_session_alone_is_not_materialized_past_the_transcript(
    tmp_path, database_url, bad_mirror
):
    settings = make_settings(tmp_path, database_url, bad_mirror.parent)
    instance = open_instance(settings)
    [outcome] = ingest_sessions(
        session_files_for([bad_mirror / f"{EMPTY}.jsonl"]), settings, instance
    )
    assert outcome.status == "skipped"
    for later in ("redacted_session", "session_digest", "memory"):
        assert not instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey(later), asset_partitions=[_key(instance, EMPTY)]
            ),
            limit=1,
        ).records
    dispose_instance(instance)


def test_the_sensor_requests_bad_files_without_failing(
    tmp_path, database_url, bad_mirror, monkeypatch
):
    for path in bad_mirror.iterdir():
        age(path, 600)
    settings = settings_in_env(monkeypatch, tmp_path, database_url, bad_mirror.parent)
    instance = open_instance(settings)
    result = sensor_tick(load_defs(), instance, None)
    assert len(result.run_requests) == 4
    dispose_instance(instance)


GOOD = TRANSCRIPTS / "daaain__claude-code-log" / "4379d1bf-ccb1-414e-a856-9791b73f3af2.jsonl"
BAD_BYTES = "33333333-3333-3333-3333-333333333333"
HUGE_LINE = "44444444-4444-4444-4444-444444444444"
NESTED = "55555555-5555-5555-5555-555555555555"
JUNK = "66666666-6666-6666-6666-666666666666"


@pytest.fixture
def hostile_mirror(tmp_path):
    """A mirror with loops, things that are not transcripts, and sessions with bad lines in them.

    Beside them one good real session, also reachable a second time through a symlinked file.
    """
    mirror = tmp_path / "mirror"
    project = mirror / "-work-app"
    project.mkdir(parents=True)
    shutil.copy(GOOD, project / GOOD.name)
    (project / "up").symlink_to("..", target_is_directory=True)  # a folder linked to its parent
    (project / "loop.jsonl").symlink_to("loop.jsonl")  # a symlink to itself
    (project / "selfdir").symlink_to("selfdir", target_is_directory=True)
    (project / "dangling.jsonl").symlink_to(tmp_path / "gone.jsonl")
    os.mkfifo(project / "77777777-7777-7777-7777-777777777777.jsonl")  # reading it would block
    (project / "folder.jsonl").mkdir()
    (project / "README.md").write_text("# not a transcript\n", encoding="utf-8")
    (project / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    (project / f"{JUNK}.jsonl").write_bytes(bytes(range(256)) * 64)  # binary, named like one
    other = mirror / "-work-other"
    other.mkdir()
    (other / GOOD.name).symlink_to(project / GOOD.name)  # the same file under a second name

    def session(session_id: str, *middle: bytes) -> None:
        first = transcript_line(
            session_id, "user", f"question about the {session_id[:4]} widget", "u1"
        )
        last = transcript_line(
            session_id, "assistant", "the widget now renders in the sidebar", "a1"
        )
        (project / f"{session_id}.jsonl").write_bytes(first + b"".join(middle) + last)

    session(
        BAD_BYTES,
        transcript_line(BAD_BYTES, "user", "caf\u00e9 latte", "u2").replace(
            b"caf\\u00e9", b"caf\xe9"
        ),
        b"\x00" * 500 + b"\n",
        b"\xff\xfe\x80 not utf-8 at all\n",
        transcript_line(BAD_BYTES, "user", "with a nul", "u3").replace(b'"type"', b'\x00"type"'),
    )
    session(HUGE_LINE, transcript_line(HUGE_LINE, "assistant", "x" * (50 * 1024 * 1024), "a0"))
    session(
        NESTED,
        b"[" * 100_000 + b"]" * 100_000 + b"\n",
        b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"\n",
    )
    for path in (*project.iterdir(), *other.iterdir()):
        if path.is_file() and not path.is_symlink():
            age(path, 600)
    return mirror


def test_a_hostile_mirror_is_scanned_and_ingested_around_what_is_bad(
    tmp_path, database_url, hostile_mirror, monkeypatch
):
    settings = settings_in_env(monkeypatch, tmp_path, database_url, hostile_mirror)
    instance = open_instance(settings)
    sessions = {GOOD.stem, BAD_BYTES, HUGE_LINE, NESTED, JUNK}

    # The sensor's scan ends, and asks for each session once: no loop, link or FIFO is one.
    tick = sensor_tick(load_defs(), instance, None)
    assert sorted(session_id_of(r.partition_key) for r in tick.run_requests) == sorted(sessions)

    # `librarian ingest MIRROR` finds the same, and ingests all but the file that is not one.
    found = session_files_for([hostile_mirror])
    assert {s.session_id for s in found} == sessions
    outcomes = {o.session_id: o for o in ingest_sessions(found, settings, instance)}
    dispose_instance(instance)
    assert {k: o.status for k, o in outcomes.items()} == {
        **dict.fromkeys(sessions - {JUNK}, "ingested"),
        JUNK: "skipped",
    }, outcomes

    rows = rows_per_session(database_url)
    assert rows["memories"] == dict.fromkeys(sessions - {JUNK}, 1)
    assert set(rows["indexed_chunks"]) == sessions - {JUNK}
    assert set(rows["session_sources"]) == sessions
    # The line after the NUL byte was read: its prompt is in the session's exchange layer.
    with psycopg.connect(database_url) as conn:
        texts = conn.execute(
            "SELECT text FROM indexed_chunks WHERE session_id = %s", (BAD_BYTES,)
        ).fetchall()
    assert any("with a nul" in text for (text,) in texts)


def test_a_transcript_that_cannot_be_read_now_fails_loudly_and_is_read_again_later(
    tmp_path, database_url
):
    folder = tmp_path / "mirror" / "-work-away"
    folder.mkdir(parents=True)
    path = folder / TRUNCATED.name.replace(".truncated", "")
    shutil.copy(TRUNCATED, path)
    settings = make_settings(tmp_path, database_url, folder.parent).model_copy(
        update={"unreadable_wait_seconds": 2.0}
    )
    instance = open_instance(settings)
    found = session_files_for([folder])
    # Found, then away when the run reads it (a mirror whose mount dropped): a folder in its place.
    path.rename(path.with_suffix(".away"))
    path.mkdir()
    [failed] = ingest_sessions(found, settings, instance)
    assert failed.status == "failed", failed
    with Store(database_url) as store:
        # Not "nothing to remember": that would keep it out for good.
        assert store.ledger.nothing_to_remember([failed.session_id]) == {}
    path.rmdir()
    path.with_suffix(".away").rename(path)
    [again] = ingest_sessions(session_files_for([folder]), settings, instance)
    assert again.status == "ingested", again


def test_the_waits_for_an_unreadable_transcript_double_and_add_up_to_the_setting():
    from librarian_dagster.defs.assets.transcript import unreadable_pauses

    pauses = unreadable_pauses(200.0)
    assert pauses[:4] == [1.0, 2.0, 4.0, 8.0] and sum(pauses) == 200.0
    assert unreadable_pauses(0.0) == []
