"""deploy/dagster.yaml opened by Dagster itself, against a real PostgreSQL (the embedded server)."""

from pathlib import Path

import dagster as dg
import psycopg
import pytest
import yaml
from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

from librarian_dagster.core.service import dagster_home
from librarian_dagster.core.settings import Settings
from tests.helpers import assert_shared_instance_config

DAGSTER_YAML = Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml"


def test_instance_from_deploy_yaml_stores_runs_in_postgres(instance_env, pg_server, dagster_db):
    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.run_storage, PostgresRunStorage)
        assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
        assert isinstance(instance.schedule_storage, PostgresScheduleStorage)

        result = assert_shared_instance_config(instance)
        stored = instance.get_run_by_id(result.run_id)
        assert stored is not None and stored.status == dg.DagsterRunStatus.SUCCESS

    # The run is a row in PostgreSQL, not in a SQLite file under DAGSTER_HOME.
    with psycopg.connect(pg_server.get_uri(dagster_db)) as conn:
        rows = conn.execute("SELECT status FROM runs WHERE run_id = %s", (result.run_id,))
        assert rows.fetchall() == [("SUCCESS",)]
    assert not list(instance_env.rglob("*.db"))


def test_a_missing_credential_is_named(instance_env, monkeypatch):
    monkeypatch.delenv("DAGSTER_PG_PASSWORD")
    with pytest.raises(Exception, match="DAGSTER_PG_PASSWORD"):
        dg.DagsterInstance.get()


def test_deploy_yaml_agrees_with_what_librarian_up_writes(tmp_path):
    """The embedded dagster.yaml (core/service/dagster_home.py) and the server's differ only in
    where the storage is and where its credentials come from: the rest is one text, shared."""
    settings = Settings.from_env(
        {
            "LIBRARIAN_HOME": str(tmp_path / "home"),
            "LIBRARIAN_DATABASE_URL": "postgresql://librarian:secret@db.internal:5432/librarian",
        }
    )
    dagster_home.prepare_dagster_home(settings)
    embedded_text = (settings.dagster_home / "dagster.yaml").read_text(encoding="utf-8")
    server_text = DAGSTER_YAML.read_text(encoding="utf-8")
    shared = dagster_home.shared_instance_yaml()
    # Word for word, comments included: deploy/dagster.yaml ends with the shared settings.
    assert server_text.endswith("\n" + shared), (
        "deploy/dagster.yaml must end with librarian_dagster/core/service/dagster_instance.yaml"
    )
    assert embedded_text.endswith("\n" + shared)

    embedded, server = yaml.safe_load(embedded_text), yaml.safe_load(server_text)
    assert {k: v for k, v in embedded.items() if k != "storage"} == {
        k: v for k, v in server.items() if k != "storage"
    }
    assert embedded["storage"]["postgres"]["postgres_url"].startswith("postgresql+psycopg2://")
    assert server["storage"]["postgres"]["postgres_db"]["scheme"] == "postgresql+psycopg2"
    # Credentials only from the environment: every value under postgres_db but the scheme.
    for key, value in server["storage"]["postgres"]["postgres_db"].items():
        assert key == "scheme" or set(value) == {"env"}, key
