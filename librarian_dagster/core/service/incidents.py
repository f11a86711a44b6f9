"""The incidents `librarian up` healed (the database, an agent's folder), kept where the code
location reads them, so that the runs an incident failed are run again once it is over
(defs/monitoring.py, `incident_rerun_sensor`).

A file of JSON lines under LIBRARIAN_HOME, not a table: the incident may have been the database.
`up` rewrites it whole when an incident heals (renamed into place), keeping those of the last
KEPT_S; a line that cannot be read (a file edited by hand, an older format) is skipped.
"""

import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

KEPT_S = 7 * 86400.0
"""How long a healed incident is kept: longer than any run it failed can wait in the queue."""

# The database's and the folders' watches are threads of one `up`: one rewrite at a time, or
# one could drop the other's incident (and both write the same temporary file).
_WRITING = threading.Lock()


@dataclass(frozen=True)
class Incident:
    what: str
    """What failed, as the alerts name it: "the database", "Codex's folder"."""
    began: float
    """When it was seen failing (seconds since the epoch)."""
    healed: float
    """When it answered again."""


def record_incident(path: Path, incident: Incident, now: float | None = None) -> None:
    """Add `incident`, dropping those older than KEPT_S; written whole and renamed into place."""
    now = time.time() if now is None else now
    with _WRITING:
        kept = [i for i in read_incidents(path) if now - i.healed < KEPT_S] + [incident]
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text("".join(json.dumps(asdict(i), sort_keys=True) + "\n" for i in kept))
        partial.replace(path)


def read_incidents(path: Path) -> list[Incident]:
    """The incidents recorded at `path`, oldest first; none when there is no file."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    incidents = []
    for line in lines:
        try:
            value = json.loads(line)
            incidents.append(
                Incident(str(value["what"]), float(value["began"]), float(value["healed"]))
            )
        except (ValueError, KeyError, TypeError):
            continue
    return incidents
