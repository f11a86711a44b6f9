"""Forgetting sessions: everything the product holds of them removed, and kept out from then on.

One service for `librarian forget`, the recall server's page and the sessions sensor. What is
removed, for each session:

- the store: its memory, chunks (their postings go with them), session vector, where its files
  were and a deferral waiting for tomorrow's budget;
- the staged file of every stage (`LIBRARIAN_HOME/staging/<stage>/<session>.json`);
- a pushed session's files as its laptop sent them (`LIBRARIAN_HOME/uploads/`) and its record;
- the BM25 postings kept on this machine (`LIBRARIAN_HOME/cache/postings/`, decision 0032): they
  hold the words of every chunk, the session's too, and are a cache the next search rebuilds
  (deleted under each store's writers' lock, so a writer that read the store before the forget
  cannot leave a file behind it). A server that has them mapped goes on with its copy, the
  session's rows masked, and the next writer keeps a new base without them;
- Dagster's record of it (`RunHistory`, librarian_dagster/forget.py): the runs that materialized
  its partition, whose event metadata quotes its summary, its digest and its files, and its
  partition key. Those need Dagster, which neither core nor the recall server imports: the
  session is queued in the store first (`run_history_to_forget`), and the queue is emptied by
  whoever holds Dagster: `librarian forget` at once (`--pending`: the queue alone), the sessions
  sensor of `librarian up` at its next tick for what the page forgot.

The session goes on the skip list first, so the sessions sensor cannot take it again while it is
being forgotten, or ever after (`librarian skip --undo` lets it back). A recall server running
meanwhile stops returning it at its next question: its postings follow the store's generation
(core/recall/lexical.py), and its facts are read from the store.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from librarian_dagster.core.assembly.store import Store
from librarian_dagster.core.capture import uploads
from librarian_dagster.core.capture.keys import staged_file, staging_dir
from librarian_dagster.core.recall import postings_file
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.ledger import Ledger


@dataclass(frozen=True)
class RunsForgotten:
    sessions: tuple[str, ...]
    """Whose runs and partitions were looked for and deleted."""
    runs: tuple[str, ...]
    partitions: int
    others: tuple[str, ...]
    """Sessions of other partitions in the deleted runs: memories kept, run history gone."""

    def said(self) -> str:
        """What `librarian forget --pending` did, in one line."""
        if not self.sessions:
            return "nothing forgotten from the page is left in Dagster"
        return (
            f"deleted Dagster's runs and partitions of {len(self.sessions)} session(s) forgotten "
            f"from the page: {len(self.runs)} run(s), {self.partitions} partition(s)"
        )


NO_RUNS = RunsForgotten((), (), 0, ())


class RunHistory(Protocol):
    """Dagster's record of sessions: their runs, deleted whole (a run is what Dagster can
    delete), and their partition keys."""

    def forget(self, session_ids: Sequence[str]) -> RunsForgotten: ...


@dataclass(frozen=True)
class Forgotten:
    sessions: tuple[str, ...]
    memories: int
    """Of `sessions`, those the store held a memory of."""
    staged_files: int
    search_caches: int
    """BM25 postings files of this machine's searches, deleted."""
    history: RunsForgotten | None
    """Dagster's records deleted; None: queued for the sessions sensor (the page's forget)."""

    @property
    def others(self) -> tuple[str, ...]:
        return self.history.others if self.history else ()

    def said(self) -> str:
        """What was removed, in one line (`librarian forget` prints it, the page shows it)."""
        if self.history is None:
            dagster = (
                "their Dagster runs and partitions go at the next tick of `librarian up`'s "
                "sessions sensor, or with `librarian forget --pending`"
            )
        else:
            dagster = (
                f"{len(self.history.runs)} Dagster run(s), {self.history.partitions} partition(s)"
            )
            earlier = [s for s in self.history.sessions if s not in self.sessions]
            if earlier:
                dagster += f" (with those of {len(earlier)} session(s) forgotten from the page)"
        return (
            f"forgot {len(self.sessions)} session(s): {self.memories} memories with their "
            f"chunks, {self.staged_files} staged files, {self.search_caches} search cache "
            f"file(s), {dagster}; on the skip list from now on"
        )

    def others_said(self) -> str:
        """What forgetting did to the `others`, to be followed by which they are."""
        return (
            f"{len(self.others)} other session(s) ran in the same runs: their memories are kept, "
            "their run history in the UI went with the runs (`librarian backfill` writes it "
            "again)"
        )


def forget_sessions(
    session_ids: Sequence[str], settings: Settings, store: Store, history: RunHistory | None
) -> Forgotten:
    """Forget these sessions; with `history`, Dagster's records of them (and of any session
    forgotten before without it) too."""
    ids = tuple(dict.fromkeys(session_ids))
    store.ledger.skip_sessions(ids)  # first: nothing takes them again from here on
    store.ledger.queue_run_history(ids)  # and a forget cut short is finished by the next
    memories = sum(store.memories.delete_memory(s) for s in ids)
    store.ledger.forget_sources(ids)
    # A pushed session's transcript, as its laptop sent it (redacted), goes too.
    uploads.unstage(settings.uploads, store.pushes.forget(ids))
    staged = _delete_staged(settings, ids)
    caches = postings_file.delete_all(settings.postings_dir)
    forgotten = forget_queued_run_history(store.ledger, history) if history else None
    return Forgotten(ids, memories, staged, caches, forgotten)


def forget_queued_run_history(ledger: Ledger, history: RunHistory) -> RunsForgotten:
    """Dagster's records of every session forgotten and not yet deleted from them."""
    queued = ledger.queued_run_history()
    if not queued:
        return NO_RUNS
    forgotten = history.forget(queued)
    ledger.run_history_forgotten(queued)
    return forgotten


def _delete_staged(settings: Settings, session_ids: Sequence[str]) -> int:
    folder = staging_dir(settings.home)
    stages = [p.name for p in folder.iterdir() if p.is_dir()] if folder.is_dir() else []
    deleted = 0
    for session_id in session_ids:
        for stage in stages:
            path = staged_file(settings.home, stage, session_id)
            if path.exists():
                path.unlink()
                deleted += 1
    return deleted
