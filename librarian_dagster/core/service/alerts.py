"""What is worth an alert, and when it has cleared: pure functions of the state and a clock.

Four kinds of capture gap (the way memory is silently lost):

- `ingest_gap`: settled sessions (in the agents' folders here, or pushed here) still not handled
  `gap_minutes` after they were due (settled, or requested by the sessions sensor, whichever is
  later). A session is handled once a run got to it after its files last changed: its memory is
  newer than its files, or (for a session with nothing to remember, or one whose run failed,
  which the failure alert covers) its `transcript` stage ran after that.
- `folders_quiet`: the newest transcript in the agents' folders here is older than
  `quiet_hours` (0: never asked), or no agent's folder exists: the copy from the laptop may have
  stopped. Asked only of folders in use (`folders_in_use`): where sessions come by push, folders
  nobody copies into are no gap, and each pushing machine is watched instead.
- `machine_quiet:<person>/<machine>`: a machine that pushes here (`librarian push`, whose watch
  says hello each round even with nothing new) has not been heard of for `quiet_hours`.
- `sessions_sensor_silent`: the sessions sensor has had no successful tick for ten minutes
  (stopped in the UI, or every tick failing), so settled sessions are not even requested.

The gap sensor keeps the open incidents in its cursor: one alert when an incident opens, one
recovery message when it clears, nothing in between. An alert whose send failed is tried again
on the next tick; a recovery is only sent for an alert that was delivered.
"""

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from librarian_dagster.core.capture.ingest_plan import Snapshot
from librarian_dagster.core.capture.readers import named_folders
from librarian_dagster.core.store.pushes import PushMachine

INGEST_GAP = "ingest_gap"
FOLDERS_QUIET = "folders_quiet"
_RENAMED = {"mirror_quiet": FOLDERS_QUIET}
"""Incident keys of earlier versions, read from a cursor under their name now: an incident open
across an upgrade is neither alerted again nor said to be over."""
MACHINE_QUIET = "machine_quiet"
SESSIONS_SENSOR_SILENT = "sessions_sensor_silent"
SENSOR_SILENCE_SECONDS = 600.0
"""The sessions sensor ticks every 30 s: ten minutes without a good tick is not a slow tick."""
_SHOWN_SESSIONS = 3


@dataclass(frozen=True)
class Incident:
    key: str
    alert: str
    recovery: str


@dataclass(frozen=True)
class Overdue:
    session_id: str
    folder: str
    """The folder its transcript lies in (`transcript_folder_of`)."""
    due_since: float


@dataclass
class OpenIncident:
    alert: str
    recovery: str
    opened_at: float
    sent: bool


@dataclass
class GapState:
    """The gap sensor's cursor: since when it watches, and the incidents open now."""

    watching_since: float
    open: dict[str, OpenIncident] = field(default_factory=dict)

    def to_cursor(self) -> str:
        return json.dumps(
            {
                "watching_since": self.watching_since,
                "open": {k: asdict(v) for k, v in self.open.items()},
            },
            sort_keys=True,
        )

    @classmethod
    def from_cursor(cls, cursor: str | None, now: float) -> "GapState":
        try:
            value = json.loads(cursor) if cursor else None
            if not isinstance(value, dict):
                raise ValueError(cursor)
            return cls(
                watching_since=float(value["watching_since"]),
                open={
                    _RENAMED.get(str(k), str(k)): OpenIncident(**v)
                    for k, v in value["open"].items()
                },
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            # First tick, or an unreadable cursor: start watching now (an open incident is
            # found again by its condition, and alerted once more at worst).
            return cls(watching_since=now)


# -- the gap conditions ---------------------------------------------------------------------------


def due_sessions(
    snapshots: Sequence[Snapshot],
    handled: Mapping[str, float],
    requested: Mapping[str, tuple[str, float]],
    *,
    now: float,
    settle_seconds: float,
    gap_minutes: float,
    watching_since: float = float("-inf"),
) -> list[Overdue]:
    """Sessions settled and not handled since their files last changed, `gap_minutes` past due.

    `handled`: session id -> when a run last got to it (seconds since the epoch). `requested`:
    session id -> (fingerprint, when) the sessions sensor last requested a run for it. No session
    is due before `watching_since`: on the first start, the backlog of old sessions the sessions
    sensor has not even requested yet is not a gap.
    """
    overdue = []
    for snap in snapshots:
        sid = snap.files.session_id
        if now - snap.last_modified < settle_seconds:
            continue  # still being written: not due yet
        if handled.get(sid, float("-inf")) >= snap.last_modified:
            continue
        due_since = max(snap.last_modified + settle_seconds, watching_since)
        fingerprint, requested_at = requested.get(sid, ("", 0.0))
        if fingerprint == snap.fingerprint:
            due_since = max(due_since, requested_at)  # a backfill's queue is not a gap at once
        if now - due_since > gap_minutes * 60:
            overdue.append(Overdue(sid, transcript_folder_of(snap), due_since))
    return sorted(overdue, key=lambda o: (o.due_since, o.session_id))


def capture_incidents(
    *,
    now: float,
    folders: Mapping[str, Path],
    present: Mapping[str, Path],
    snapshots: Sequence[Snapshot],
    overdue: Sequence[Overdue],
    sensor_watched: bool,
    last_sensor_tick: float | None,
    watching_since: float,
    gap_minutes: float,
    quiet_hours: float,
    machines: Sequence[PushMachine] = (),
) -> list[Incident]:
    """The capture gaps open at `now`.

    `folders`: every agent's folder here, by agent; `present`: those that exist. `snapshots`:
    the sessions in them (not those pushed here), whose newest tells quiet folders. `machines`:
    those that push here. `sensor_watched`: whether the
    sessions sensor has a stored state at all. The daemon that runs this check runs the sessions
    sensor too, so without one (a test, a direct evaluation) there is nothing to judge yet; with
    one, its last good tick (or, if it never had one, the time this watch began) must be recent.
    """
    folders_gap = None
    if folders_in_use(bool(present), snapshots, machines):
        folders_gap = _folders_gap(now, folders, present, snapshots, watching_since, quiet_hours)
    found = [
        _ingest_gap(overdue, gap_minutes, now),
        folders_gap,
        _sensor_gap(now, sensor_watched, last_sensor_tick, watching_since),
        *machine_gaps(machines, now, quiet_hours),
    ]
    return [incident for incident in found if incident is not None]


def folders_in_use(
    present: bool, snapshots: Sequence[Snapshot], machines: Sequence[PushMachine]
) -> bool:
    """Whether sessions come through the agents' folders here, so that their silence is a gap.

    While no machine pushes here they are the only way sessions come. Once one does, they count
    only if a transcript was written there since the first push: folders the copy from a laptop
    still fills beside the pushes. Folders absent, empty, or left as they were when the laptops
    turned to `librarian push` are nobody's, and each pushing machine is watched instead.
    """
    if not machines:
        return True
    if not present:
        return False
    newest = max((s.last_modified for s in snapshots), default=None)
    first_push = min(m.first_push.timestamp() for m in machines)
    return newest is not None and newest >= first_push


def folders_retired(folders: Mapping[str, Path]) -> str:
    """Said in place of the recovery of a quiet-folders alert when the folders are no longer
    watched: not "the folders are back", which they are not."""
    return (
        f"Librarian: the agents' folders here ({named_folders(folders)}) are no longer watched: "
        "sessions come by push (`librarian push`), and each machine that pushes is watched "
        "instead."
    )


def machine_gaps(machines: Sequence[PushMachine], now: float, quiet_hours: float) -> list[Incident]:
    """One gap per machine not heard of for `quiet_hours` (0: never asked): its push, or the
    watch's hello each round, stopped (the laptop off, asleep, or its push not running)."""
    if quiet_hours <= 0:
        return []
    found = []
    for m in machines:
        last = m.last_push.timestamp()
        if now - last <= quiet_hours * 3600:
            continue
        who = f"{m.person}'s laptop `{m.machine}`"
        found.append(
            Incident(
                f"{MACHINE_QUIET}:{m.person}/{m.machine}",
                f"Librarian capture gap: {who} has not pushed for {(now - last) / 3600:.0f} h "
                f"(last at {_when(last)}); is `librarian push --watch` still running there?",
                f"Librarian recovered: {who} pushes again.",
            )
        )
    return found


def _ingest_gap(overdue: Sequence[Overdue], gap_minutes: float, now: float) -> Incident | None:
    if not overdue:
        return None
    oldest = overdue[0]
    shown = ", ".join(f"{o.session_id} ({o.folder})" for o in overdue[:_SHOWN_SESSIONS])
    more = f" and {len(overdue) - _SHOWN_SESSIONS} more" if len(overdue) > _SHOWN_SESSIONS else ""
    return Incident(
        INGEST_GAP,
        f"Librarian capture gap: {len(overdue)} settled session(s) not ingested after "
        f"{gap_minutes:g} min, the oldest due since "
        f"{_when(oldest.due_since)}: {shown}{more}.",
        f"Librarian recovered: every settled session is ingested again (checked {_when(now)}).",
    )


def _folders_gap(
    now: float,
    folders: Mapping[str, Path],
    present: Mapping[str, Path],
    snapshots: Sequence[Snapshot],
    watching_since: float,
    quiet_hours: float,
) -> Incident | None:
    if not present:
        return Incident(
            FOLDERS_QUIET,
            f"Librarian capture gap: no agent's folder exists here ({named_folders(folders)}); "
            "no session can be captured (the agents' folder settings, or the copy from the "
            "laptop).",
            "Librarian recovered: an agent's folder is here again.",
        )
    if quiet_hours <= 0:
        return None
    newest = max((s.last_modified for s in snapshots), default=None)
    quiet_since = newest if newest is not None else watching_since
    if now - quiet_since <= quiet_hours * 3600:
        return None
    written = f"newest transcript written {_when(newest)}" if newest else "no transcripts"
    return Incident(
        FOLDERS_QUIET,
        f"Librarian capture gap: the agents' folders here ({named_folders(present)}) have not "
        f"changed for {(now - quiet_since) / 3600:.0f} h ({written}); is the copy from the "
        "laptop still running?",
        "Librarian recovered: the agents' folders here are filling again.",
    )


def _sensor_gap(
    now: float, sensor_watched: bool, last_sensor_tick: float | None, watching_since: float
) -> Incident | None:
    silent_since = last_sensor_tick if last_sensor_tick is not None else watching_since
    if not sensor_watched or now - silent_since <= SENSOR_SILENCE_SECONDS:
        return None
    last = f"last good tick {_when(last_sensor_tick)}" if last_sensor_tick else "no good tick"
    return Incident(
        SESSIONS_SENSOR_SILENT,
        f"Librarian capture gap: the sensor that finds new sessions (sessions_sensor) has not "
        f"ticked for {(now - silent_since) / 60:.0f} min ({last}); new sessions are not "
        "requested. Is it stopped in the UI, or failing (see its ticks)?",
        "Librarian recovered: the sensor that finds new sessions (sessions_sensor) is ticking "
        "again.",
    )


# -- one alert per incident -----------------------------------------------------------------------


def advance(
    state: GapState,
    incidents: Sequence[Incident],
    now: float,
    send: Callable[[str], bool],
    said: Callable[[str], None] = lambda _text: None,
    unwatched: Mapping[str, str] | None = None,
) -> GapState:
    """Alert what opened (or whose alert was not delivered yet), recover what cleared; `said`
    hears each opening and clearing once, whether or not its message was delivered.

    `unwatched`: incident key -> what is said, in place of its recovery, when it clears because
    it is no longer asked (`folders_retired`), not because it healed."""
    current = {i.key: i for i in incidents}
    still_open: dict[str, OpenIncident] = {}
    for key, known in state.open.items():
        if key in current:
            if not known.sent:
                known.sent = send(known.alert)
            still_open[key] = known
        else:
            closing = (unwatched or {}).get(key, known.recovery)
            said(closing)
            if known.sent:
                send(closing)  # attempted once: a lost recovery only leaves a stale alert
    for key, incident in current.items():
        if key not in still_open:
            said(incident.alert)
            sent = send(incident.alert)
            still_open[key] = OpenIncident(incident.alert, incident.recovery, now, sent)
    return GapState(state.watching_since, still_open)


# -- messages -------------------------------------------------------------------------------------


def digest_message(project: str, summary: str, importance: int, session_id: str) -> str:
    return f"New memory · {project} · importance {importance}/5\n{summary}\n(session {session_id})"


def digest_rollup(count: int, projects: Mapping[str, int]) -> str:
    top = ", ".join(f"{p} ({n})" for p, n in sorted(projects.items(), key=lambda x: -x[1])[:5])
    return f"… and {count} more new memories this minute: {top}"


def run_failure_message(job: str, session: str | None, error: str, run_id: str, ui_url: str) -> str:
    where = f" for session {session}" if session else ""
    return f"Librarian run failed: {job}{where}\n{first_line(error)}\n{run_link(ui_url, run_id)}"


def run_link(ui_url: str, run_id: str) -> str:
    """Where a run is in the Dagster UI."""
    return f"{ui_url.rstrip('/')}/runs/{run_id}"


def first_line(text: str) -> str:
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()[:300]
    return "(no error message)"


def transcript_folder_of(snap: Snapshot) -> str:
    """The folder a session's transcript lies in, as an alert names where it is late (Claude
    Code's project slug, `-work-app`): not the project ingest names from its cwd."""
    files = snap.files
    if files.main is not None:
        return files.main.parent.name  # <project>/<session>.jsonl
    if not files.subagents:
        return "?"
    path = files.subagents[0]
    # <project>/<session>/subagents/agent-*.jsonl, or an old-layout <project>/agent-*.jsonl
    return path.parents[2].name if path.parent.name == "subagents" else path.parent.name


def _when(timestamp: float | None) -> str:
    if timestamp is None:
        return "never"
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M UTC")
