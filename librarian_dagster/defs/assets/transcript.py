"""The first step of a session's run: its files read once, into two assets.

`transcript` is what the parser made of the files (counted in its metadata, never stored) and
`redacted_session` the session with every secret replaced by `[REDACTED:<family>]`, the first
thing stored. One step makes both, so a run reads and parses each file once; the two assets
keep their own keys, metadata and lineage (transcript -> redacted_session) in the UI, and either
can be materialized alone. Nothing unredacted is written anywhere: the parsed session lives in
this step's memory until it is redacted, and the one unredacted copy stays the file Claude Code
wrote.
"""

import getpass
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import dagster as dg
from pydantic import TypeAdapter

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.keys import session_id_of
from librarian_dagster.core.capture.readers import known_cwds, parse_session
from librarian_dagster.core.capture.repository import attribute, project_of_remote, remote_of
from librarian_dagster.core.capture.session import UNREADABLE, Session
from librarian_dagster.core.redaction.scan import find_secrets_many, redact_session
from librarian_dagster.core.service.journal import skipped_text
from librarian_dagster.core.store.ledger import Ledger
from librarian_dagster.core.store.pushes import PushedSession
from librarian_dagster.defs.assets._common import (
    EXCLUDED,
    GROUP,
    kept_out,
    per_session,
    source_files,
)
from librarian_dagster.defs.partitions import BATCH, sessions_partitions
from librarian_dagster.defs.resources import JournalResource, LedgerResource, SessionFoldersResource

TRANSCRIPT = dg.AssetKey("transcript")


def unreadable_pauses(total: float) -> list[float]:
    """Waits before reading an unreadable transcript again, 1 s doubling, adding up to `total`
    (LIBRARIAN_UNREADABLE_WAIT_SECONDS): a folder away for a while costs the run that while,
    not the session its memory."""
    pauses: list[float] = []
    pause = 1.0
    while sum(pauses) < total:
        pauses.append(min(pause, total - sum(pauses)))
        pause *= 2
    return pauses


REDACTED = dg.AssetKey("redacted_session")


@dataclass
class _Read:
    files: SessionFiles
    parsed: Session | str
    """The parsed session, or why it was kept out before any reading."""


@dg.multi_asset(
    # The step keeps the name of its first asset: run failures and alerts name it `transcript`.
    name="transcript",
    outs={
        "transcript": dg.AssetOut(
            dagster_type=dg.Nothing,
            is_required=False,
            kinds={"python"},
            group_name=GROUP,
            description="A session's transcript files parsed into normalised turns (counted "
            "here, never stored). A session with nothing to remember (empty, summary-only, not "
            "JSON) says why in `skip_reason`, and no later stage materializes it.",
        ),
        "redacted_session": dg.AssetOut(
            is_required=False,
            kinds={"python"},
            group_name=GROUP,
            description="The session with every secret replaced by [REDACTED:<family>]: the "
            "first stage stored. A session with nothing to remember is left out, so no later "
            "stage materializes it; the reason is in the `transcript` stage's metadata.",
        ),
    },
    internal_asset_deps={"transcript": set(), "redacted_session": {TRANSCRIPT}},
    partitions_def=sessions_partitions,
    backfill_policy=BATCH,
    can_subset=True,
)
def transcript(
    context: dg.AssetExecutionContext,
    ledger: LedgerResource,
    folders: SessionFoldersResource,
    journal: JournalResource,
) -> Iterator[dg.Output[Any]]:
    """Read each session of the run once; report it as `transcript`, store it redacted."""
    db = ledger.get()
    skips = db.skip_list()
    # Read once per run, and only when a transcript names no folder of its own (Gemini CLI's).
    cwds = _Lazy(lambda: _cwds_of_run(db, context.partition_keys))
    selected = context.selected_asset_keys
    reported = TRANSCRIPT in selected
    # A session whose files cannot be found fails on the first asset of the selection.
    asset = "transcript" if reported else "redacted_session"

    pushed = ledger.pushes().pushed([session_id_of(k) for k in context.partition_keys])

    def read(key: str, _: str) -> tuple[_Read, dict[str, Any]]:
        files = source_files(db, key)
        reason = kept_out(files, folders.exclude or (), skips)
        if reason:
            found = _Read(files, reason)
            metadata = {"files": [str(p) for p in files.paths], "skip_reason": reason}
        else:
            session = _whose(_parsed(key, files, folders, cwds), pushed, folders)
            found, metadata = _Read(files, session), _counts(files, session)
        return found, metadata if reported else {}

    read_by_key = per_session(context, {k: k for k in context.partition_keys}, read, asset=asset)
    if reported:
        yield dg.Output(None, output_name="transcript")
    if REDACTED not in selected:
        return

    def redact(key: str, _: str):
        # Popped: a parsed session is held only until its redacted copy exists.
        done = read_by_key.pop(key)
        files, session = done.files, done.parsed
        why = _absent(db, files, session)
        if why is not None:
            context.add_asset_metadata({"absent": why}, asset_key=REDACTED, partition_key=key)
            journal.note("skipped", skipped_text(key, why))
            return None
        assert isinstance(session, Session)
        clean, counts = redact_session(session)
        return clean, {
            "redactions": sum(counts.values()),
            "redactions_by_family": dict(sorted(counts.items())),
            "turns": len(clean.turns),
        }

    sessions = per_session(context, {k: k for k in read_by_key}, redact, asset="redacted_session")
    if sessions:
        yield dg.Output(sessions, output_name="redacted_session")


def _whose(
    session: Session, pushed: dict[str, PushedSession], folders: SessionFoldersResource
) -> Session:
    """The session as its person's: who pushed it, with what their machine knew of it; else
    this machine's person's, its repository read from its folder here."""
    push = pushed.get(session.session_id)
    if push is not None:
        return attribute(session, push.person, push.remote, push.private)
    remote = remote_of(session.cwd)
    own = {session.project, *([project_of_remote(remote)] if remote else [])}
    private = bool(own & set(folders.private_projects or ()))
    return attribute(session, folders.person or getpass.getuser(), remote, private)


def _absent(db: Ledger, files: SessionFiles, session: Session | str) -> str | None:
    """Why a session read has no redacted copy (kept out, or nothing to remember), recorded so
    that the sensor does not ask for it again; None when it has one."""
    if isinstance(session, str):  # kept out
        if session == EXCLUDED:
            db.record_nothing_to_remember(files.session_id, files.fingerprint())
        # A skipped session is not marked "nothing to remember": once taken off the skip list,
        # the sensor asks for it again.
        return session
    if session.skip_reason:
        db.record_nothing_to_remember(session.session_id, session.fingerprint)
        return f"nothing to remember: {session.skip_reason}"
    return None


class _Lazy:
    """Folders where stored sessions ran, asked of the store the first time they are iterated."""

    def __init__(self, fetch: Callable[[], list[str]]) -> None:
        self._fetch = fetch
        self._cwds: list[str] | None = None

    def __iter__(self) -> Iterator[str]:
        if self._cwds is None:
            self._cwds = self._fetch()
        return iter(self._cwds)


def _cwds_of_run(db: Ledger, keys: Iterable[str]) -> list[str]:
    """Where the stored sessions ran, and where the run's own sessions did (their heads say)."""
    sources = [f for f in (db.session_source(session_id_of(k)) for k in keys) if f is not None]
    return list(dict.fromkeys([*db.known_cwds(), *known_cwds(sources)]))


def _parsed(
    key: str, files: SessionFiles, folders: SessionFoldersResource, known_cwds: Iterable[str] = ()
) -> Session:
    """The session, read again while it cannot be read, for up to the folders' wait;
    `known_cwds`: where stored sessions ran, for a transcript that names no folder."""

    def parse() -> Session:
        return parse_session(
            files, include_thinking=folders.include_thinking, known_cwds=known_cwds
        )

    session = parse()
    for pause in unreadable_pauses(folders.unreadable_wait_seconds):
        if not (session.skip_reason or "").startswith(UNREADABLE):
            break
        time.sleep(pause)
        session = parse()
    if (session.skip_reason or "").startswith(UNREADABLE):
        # Failed, and said: recorded as "nothing to remember" it would never be read again.
        raise dg.Failure(
            f"{key}: {session.skip_reason}: the transcript cannot be read now; nothing is "
            "recorded of it, and it is read again when the session is run again"
        )
    return session


def _counts(files: SessionFiles, session: Session) -> dict[str, Any]:
    """What the `transcript` asset shows of a parsed session: counts, never content."""
    stats = session.stats
    return {
        "files": [str(p) for p in files.paths],
        "records": sum(stats.records_by_type.values()),
        "records_by_type": dict(stats.records_by_type),
        "malformed_lines": stats.malformed_lines,
        "malformed_examples": list(stats.malformed_examples[:10]),
        "turns": len(session.turns),
        "tool_uses": stats.tool_uses,
        "subagents": stats.subagents,
        "compactions": stats.compactions,
        "project": session.project,
        "skip_reason": session.skip_reason or "",
    }


@dg.asset_check(
    asset=REDACTED,
    blocking=True,
    partitions_def=sessions_partitions,
    description="The stored, redacted session, read back as the digest will read it, holds no "
    "secret. Blocking: a session that fails never reaches the digest (and so never an LLM).",
)
def no_secrets_remain(redacted_session: dict[str, Session]) -> dg.AssetCheckResult:
    # The input is loaded from the stored file, not handed over in memory: what is checked is
    # what later stages read. Each string on its own, as the digest reads them: scanning the JSON
    # text instead would see escapes (`\\n`) that are not in the data, and look-alikes across
    # field boundaries.
    leftovers: Counter[str] = Counter()
    leaking: list[str] = []
    for key, session in redacted_session.items():
        # All its strings scanned together, as the redaction scans them (find_secrets_many):
        # each string's findings are find_secrets' of it alone, for a fifth of the time.
        found = Counter(f.family for fs in find_secrets_many(list(_strings(session))) for f in fs)
        if found:
            leaking.append(key)
            leftovers += found
    return dg.AssetCheckResult(
        passed=not leftovers,
        severity=dg.AssetCheckSeverity.ERROR,
        # Families, counts and session ids only: the value, or any part of it, goes nowhere.
        metadata={"remaining_by_family": dict(leftovers), "sessions": leaking},
    )


_SESSION = TypeAdapter(Session)


def _strings(session: Session) -> Iterator[str]:
    yield from _walk(_SESSION.dump_python(session, mode="json"))


def _walk(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)
