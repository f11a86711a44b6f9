"""What recurs becomes a note (core/consolidation/, decision 0049): `library_notes`, one
partition per project, and the sensor that asks for it when a project has new memories.

A run reads only the sessions new since the last (their evidence is kept by the files'
fingerprint), proposes the project's library, and applies on its own only what needs no person:
stale marks and sources, on the project's checkout on this machine. Anything else (a new line, a
retired or superseded one) waits on the page until a person runs `librarian library consolidate
PROJECT --apply`. Off unless LIBRARIAN_CONSOLIDATION is on; the command works either way.
"""

import json

import dagster as dg

from librarian_dagster.core.consolidation.consolidate import propose
from librarian_dagster.core.consolidation.wording import model_of
from librarian_dagster.defs.resources import (
    DigesterResource,
    LedgerResource,
    LibraryResource,
    MemoriesResource,
)

PROJECTS = "projects"
projects_partitions = dg.DynamicPartitionsDefinition(name=PROJECTS)
LIBRARY = "library"


@dg.asset(partitions_def=projects_partitions, group_name=LIBRARY, kinds={"python"})
def library_notes(
    context: dg.AssetExecutionContext,
    ledger: LedgerResource,
    library: LibraryResource,
    digester: DigesterResource,
) -> dg.MaterializeResult:
    """A project's `_memory_library/` as its sessions support it: what repeats across them, each
    line in the deepest folder their changes share, citing them. Applied here only where no
    person is needed (stale marks, sources); the rest waits on the page."""
    project = context.partition_key
    answer = model_of(digester.get())  # a configured model may only say lines shorter
    proposal = propose(ledger.get(), project, None, cache=library.cache(project), answer=answer)
    own = proposal.library is not None and not proposal.needs_a_person()
    applied = proposal.apply() if own else []
    waiting = "" if own else proposal.diff()
    checkout = str(proposal.library.parent) if proposal.library else None
    library.pending().save(project, waiting, checkout, proposal.cited if waiting else {})
    return dg.MaterializeResult(
        metadata={
            "sessions read": proposal.read,
            "lines": proposal.lines,
            "retired or superseded": proposal.archived,
            "checkout": checkout or "none on this machine",
            "applied": ", ".join(applied) or "nothing",
            "waiting for a person": bool(waiting),
        }
    )


consolidate_library_job = dg.define_asset_job(
    "consolidate_library",
    selection=[library_notes],
    partitions_def=projects_partitions,
    description="Propose a project's library from what its sessions repeat (decision 0049).",
    executor_def=dg.in_process_executor,
)


@dg.sensor(
    job=consolidate_library_job,
    minimum_interval_seconds=300,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def library_sensor(
    context: dg.SensorEvaluationContext, memories: MemoriesResource, library: LibraryResource
):
    """Asks for `library_notes` of each project with memories written since its last run."""
    if not library.enabled:
        return dg.SkipReason("LIBRARIAN_CONSOLIDATION is off")
    seen = json.loads(context.cursor) if context.cursor else {}
    written = {p: w.isoformat() for p, w in memories.get().last_written().items()}
    changed = sorted(p for p, w in written.items() if seen.get(p) != w)
    if not changed:
        return dg.SkipReason("no project has new memories")
    known = set(context.instance.get_dynamic_partitions(PROJECTS))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=p, run_key=f"{p}@{written[p]}") for p in changed],
        dynamic_partitions_requests=[
            projects_partitions.build_add_request([p for p in changed if p not in known])
        ],
        cursor=json.dumps(written, sort_keys=True),
    )
