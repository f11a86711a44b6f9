"""How a stage goes over the sessions of its run (`per_session`), on a real Dagster run of a range
of three partitions: one session's error drops that session only, and a lost database ends the
run at once instead of failing every later session the same way, each after Dagster's retries."""

import dagster as dg
import psycopg
import pytest

from librarian_dagster.defs.assets._common import per_session

KEYS = ["a", "b", "c"]


def _run(error: Exception) -> tuple[list[str], dg.ExecuteInProcessResult]:
    """A run of every key, where the work for "a" raises `error`: which keys were worked on."""
    worked: list[str] = []

    def work(key: str, item: int):
        worked.append(key)
        if key == "a":
            raise error
        return item, {"item": item}

    @dg.asset(partitions_def=dg.StaticPartitionsDefinition(KEYS))
    def stage(context: dg.AssetExecutionContext) -> None:
        per_session(context, dict(zip(KEYS, range(3), strict=True)), work)

    result = dg.materialize(
        [stage],
        instance=dg.DagsterInstance.ephemeral(),
        tags={"dagster/asset_partition_range_start": "a", "dagster/asset_partition_range_end": "c"},
        raise_on_error=False,
    )
    return worked, result


def test_one_sessions_error_leaves_the_others_to_go_on():
    worked, result = _run(ValueError("not a transcript"))
    assert worked == KEYS
    assert result.success
    errors = [
        m.metadata["error"].value
        for m in result.asset_materializations_for_node("stage")
        if "error" in m.metadata
    ]
    assert errors == ["not a transcript"]


@pytest.mark.parametrize(
    "error",
    [
        psycopg.OperationalError("connection to server on socket failed: No such file"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
    ],
)
def test_a_lost_database_ends_the_run_at_once(error):
    worked, result = _run(error)
    assert worked == ["a"]  # "b" and "c" were not tried against a database that is gone
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert type(error).__name__ in str(failure.step_failure_data.error)


def test_a_statement_that_timed_out_is_that_sessions_alone():
    worked, result = _run(psycopg.errors.QueryCanceled("canceling statement due to timeout"))
    assert worked == KEYS and result.success
