"""`librarian push URL`: every settled session of every agent on this machine, sent to a server.

The same folders (core/capture/agents.py), exclusions (LIBRARIAN_EXCLUDE) and settle rule
(LIBRARIAN_SETTLE_SECONDS) as the sensor of `librarian up`, and no database, Dagster or model
here. What was sent is kept in a small state file per server (`LIBRARIAN_HOME/push/`): a session
whose files have not changed since is not read again, and one whose redacted bytes are those
sent is not sent again. The server keeps its own record of the same, so a lost state file costs
one pass of `unchanged` answers, never a second memory.

A project named in LIBRARIAN_PUSH_EXCLUDE is never sent; one in LIBRARIAN_PRIVATE_PROJECTS is
sent as private (only its person's tokens read it there). Either names a project as this machine
names it (the repository's name from its remote, else the session's folder), or the folder.
"""

import contextlib
import json
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from librarian_dagster.core.capture.agents import folders
from librarian_dagster.core.capture.files import SessionFiles, SessionHead
from librarian_dagster.core.capture.ingest_plan import Snapshot, is_excluded, snapshot
from librarian_dagster.core.capture.readers import READERS, session_heads
from librarian_dagster.core.capture.repository import project_of_remote, remote_of
from librarian_dagster.core.push.bundle import content_sha256, redacted_files
from librarian_dagster.core.push.client import PushClient, PushStopped, SessionMeta
from librarian_dagster.core.settings import Settings

__all__ = ["Candidate", "PushState", "Pushed", "pending", "push_sessions", "state_file"]


@dataclass(frozen=True)
class Candidate:
    """A settled session not sent as it is now, with where it ran."""

    snap: Snapshot
    root: Path
    head: SessionHead
    remote: str | None

    @property
    def files(self) -> SessionFiles:
        return self.snap.files

    @property
    def folder(self) -> str:
        return self.head.project

    @property
    def project(self) -> str:
        return project_of_remote(self.remote) if self.remote else self.head.project


@dataclass(frozen=True)
class Pushed:
    """What became of one session: `pushed`, `unchanged`, `refused` or `failed`."""

    session_id: str
    status: str
    detail: str
    project: str
    agent: str


def state_file(settings: Settings, url: str) -> Path:
    """Where what was sent to the server at `url` is kept."""
    name = re.sub(r"[^A-Za-z0-9.-]+", "_", url.split("://", 1)[-1]).strip("_") or "server"
    return settings.home / "push" / f"{name}.json"


class PushState:
    """Per session (`agent/id`): the fingerprint last read and the SHA-256 last sent of it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            self.sessions: dict[str, dict[str, str]] = dict(doc.get("sessions", {}))
        except (OSError, ValueError, AttributeError):
            self.sessions = {}  # none, or unreadable: the server's own record keeps it once

    def seen(self, files: SessionFiles) -> dict[str, str]:
        return self.sessions.get(f"{files.agent}/{files.session_id}", {})

    def record(self, files: SessionFiles, fingerprint: str, sha256: str, refused: str = "") -> None:
        entry = {"fingerprint": fingerprint, "sha256": sha256}
        if refused:
            entry["refused"] = refused
        self.sessions[f"{files.agent}/{files.session_id}"] = entry

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".push-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"sessions": self.sessions}, out)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _found(settings: Settings) -> Iterator[tuple[SessionFiles, Path]]:
    for agent, root in folders(settings).items():
        if root.is_dir():
            for files in READERS[agent].discover(root):
                if not is_excluded(files, settings.exclude):
                    yield files, root


def pending(settings: Settings, state: PushState, now: float) -> list[Candidate]:
    """The sessions to send now: settled, changed since last sent, not excluded."""
    found = list(_found(settings))
    roots = {(files.agent, files.session_id): root for files, root in found}
    changed: list[Snapshot] = []
    for snap in snapshot(files for files, _ in found):
        if state.seen(snap.files).get("fingerprint") == snap.fingerprint:
            continue
        if now - snap.last_modified >= settings.settle_seconds:
            changed.append(snap)
    heads = session_heads([s.files for s in changed])
    # Read once a pass, not kept between passes: a remote added since is read at the next.
    remotes = {cwd: remote_of(cwd) for cwd in {h.cwd for h in heads if h.cwd}}
    candidates = []
    for snap, head in zip(changed, heads, strict=True):
        root = roots[(snap.files.agent, snap.files.session_id)]
        candidate = Candidate(snap, root, head, remotes.get(head.cwd) if head.cwd else None)
        if not {candidate.project, candidate.folder} & set(settings.push_exclude):
            candidates.append(candidate)
    return candidates


def push_sessions(
    settings: Settings,
    client: PushClient,
    state: PushState,
    candidates: Sequence[Candidate],
    said: Callable[[Pushed], None],
    stop: threading.Event | None = None,
) -> list[Pushed]:
    """Send each candidate; `said` hears of each as it is done; none more once `stop` is set.
    Raises PushStopped (after keeping what was done) when the server can take nothing more now."""
    done: list[Pushed] = []
    try:
        for candidate in candidates:
            if stop is not None and stop.is_set():
                break
            outcome = _push_one(settings, client, state, candidate)
            done.append(outcome)
            said(outcome)
            if len(done) % 20 == 0:
                state.save()
    finally:
        with contextlib.suppress(OSError):
            state.save()
    return done


def _push_one(
    settings: Settings, client: PushClient, state: PushState, candidate: Candidate
) -> Pushed:
    files = candidate.files

    def outcome(status: str, detail: str) -> Pushed:
        return Pushed(files.session_id, status, detail, candidate.project, files.agent)

    try:
        staged, redactions = redacted_files(files, candidate.root)
    except (OSError, ValueError) as exc:
        # Read again at the next push: a file locked or moved now may be readable then.
        return outcome("failed", f"cannot read it now: {getattr(exc, 'strerror', None) or exc}")
    sha = content_sha256(files.agent, files.session_id, staged)
    if state.seen(files).get("sha256") == sha:
        state.record(files, candidate.snap.fingerprint, sha)
        return outcome("unchanged", "")
    private = bool({candidate.project, candidate.folder} & set(settings.private_projects))
    meta = SessionMeta(
        files.agent,
        files.session_id,
        sha,
        candidate.project,
        candidate.folder,
        candidate.head.cwd,
        candidate.remote,
        private,
    )
    sent = client.send(meta, staged)
    refused = sent.reason if sent.status == "refused" else ""
    state.record(files, candidate.snap.fingerprint, sha, refused)
    size = sum(len(f.data) for f in staged)
    if sent.status == "refused":
        return outcome("refused", sent.reason)
    detail = f"{size / 1024:.0f} KB" + (f", {redactions} secret(s) redacted" if redactions else "")
    return outcome("pushed" if sent.status == "stored" else "unchanged", detail)


def watch(
    settings: Settings,
    client: PushClient,
    state: PushState,
    interval: float,
    said: Callable[[Pushed], None],
    stopped: Callable[[str], None],
    rounds: int | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Push, then again every `interval` seconds as sessions settle, until `stop` is set (or
    after `rounds`): between two sessions, or at once while it waits. A stop from the server (none
    there, a refused token) is said once, and tried again.

    Each round says hello first, even with nothing to push: the server takes a machine it has
    not heard of for LIBRARIAN_QUIET_HOURS for a capture gap, which an idle laptop is not."""
    stop = stop or threading.Event()
    last_stop = ""
    done = 0
    while (rounds is None or done < rounds) and not stop.is_set():
        try:
            client.hello()
            candidates = pending(settings, state, time.time())
            push_sessions(settings, client, state, candidates, said, stop)
            if last_stop:
                stopped("")
            last_stop = ""
        except PushStopped as exc:
            if str(exc) != last_stop:
                stopped(str(exc))
            last_stop = str(exc)
        done += 1
        if rounds is None or done < rounds:
            stop.wait(interval)
