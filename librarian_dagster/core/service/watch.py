"""`librarian up` watching what it depends on: a database that dies or hangs is restarted, or `up`
exits saying why; an agent's folder that cannot be read is waited for; either way someone is told.

A watch probes every LIBRARIAN_WATCH_INTERVAL_SECONDS (the database with `SELECT 1` within a
timeout, which a stopped server never answers; an agent's folder by listing it). After DOWN_AFTER
failed probes in a row it is an incident: one alert, sent by this process, which needs no database
to send it (the alert sensors keep their state in the database that failed). The embedded database
is then restarted, with a pause between tries; an external one (LIBRARIAN_DATABASE_URL), or a
folder, has nothing here to restart, and is watched until it answers (LIBRARIAN_HOME full, for at
most `wait_s`: no one heals a full disk by waiting). When it answers again, one recovery message,
the incident recorded (core/service/incidents.py: the runs it failed are run again), and `healed` is
set so that `up` restarts its children (their connections, and Dagster's daemon threads, died with
the server). When every restart fails, one last alert, and `lost` holds the line `up` exits with: a
process supervisor then restarts the whole, and its own failure alert fires.
"""

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from librarian_dagster.core.service.incidents import Incident, record_incident
from librarian_dagster.core.service.telegram import Notifier
from librarian_dagster.core.service.terminal import say
from librarian_dagster.core.settings import Settings
from librarian_dagster.core.store.database import (
    describe_location,
    probe,
    restart_embedded_server,
)

DOWN_AFTER = 2
"""Failed probes in a row that make an incident: one failed probe can be a blip."""
RESTART_PAUSES_S = (2.0, 5.0, 10.0, 20.0)
"""After each restart that did not bring the server back: four tries in about 40 s."""


@dataclass
class Watch:
    what: str
    """What is watched, as an alert names it: "the database", "Codex's folder"."""
    where: str
    """Where it is (the database as `describe_location` names it: no password)."""
    probe: Callable[[], str | None]
    """None when it answers, else why not."""
    restart: Callable[[], None] | None
    """Starts it again (the embedded database); None where there is nothing to restart."""
    alert: Callable[[str], object]
    interval_s: float
    down_after: int = DOWN_AFTER
    pauses_s: tuple[float, ...] = RESTART_PAUSES_S
    trouble: str = "stopped answering"
    """What an incident's alert says of it: "cannot be read", "is short of space"."""
    wait_s: float | None = None
    """With nothing to restart: how long an incident may last before it is lost (None: it is
    waited for as long as it lasts)."""
    on_healed: Callable[[float, float], object] | None = None
    """Told when an incident heals, with when it began and when it healed (seconds since the
    epoch): `up` records it, so that the runs it failed are run again
    (core/service/incidents.py)."""
    clock: Callable[[], float] = time.monotonic
    healed: threading.Event = field(default_factory=threading.Event)
    """Set when it answers again after an incident: restart what used it."""
    lost: str | None = None
    """Why `up` must exit: it is down and could not be restarted."""
    incidents: int = 0
    down: bool = False
    """Within an incident: what uses it may fail now, and is not to be blamed."""

    def run(self, stopping: threading.Event) -> None:
        """Watch until `stopping` is set or what is watched is lost; never raises."""
        failed = 0
        while not stopping.wait(self.interval_s):
            why = self.probe()
            if why is None:
                failed = 0
                continue
            failed += 1
            if failed < self.down_after:
                continue
            if not self._incident(why, stopping):
                return
            failed = 0

    def _incident(self, why: str, stopping: threading.Event) -> bool:
        """Handle one incident to its end; False when the watch is over (lost, or stopping)."""
        self.incidents += 1
        self.down = True
        began, began_at = self.clock(), time.time()
        doing = "restarting it" if self.restart else "nothing here can restart it; waiting"
        self.alert(f"Librarian: {self.what} {self.trouble} ({self.where}): {why}. {doing}.")
        if self.restart is None:
            while (still := self.probe()) is not None:
                if self.wait_s is not None and self.clock() - began >= self.wait_s:
                    return self._lose(f"{self.what} ({self.where}): {still}")
                if stopping.wait(self.interval_s):
                    return False
            self._recovered(began, began_at, "answers again")
            return True
        for tries, pause in enumerate(self.pauses_s, start=1):
            try:
                self.restart()
            except Exception as exc:  # the start's own failure: tried again after a pause
                why = " ".join(str(exc).split())[:300] or type(exc).__name__
            else:
                why = self.probe() or ""
                if not why:
                    self._recovered(began, began_at, f"was restarted (try {tries})")
                    return True
            if stopping.wait(pause):
                return False
        return self._lose(
            f"{self.what} ({self.where}) is down and {len(self.pauses_s)} restarts did not "
            f"bring it back: {why}"
        )

    def _lose(self, why: str) -> bool:
        self.lost = why
        self.alert(f"Librarian: {why}. librarian up is exiting.")
        return False

    def _recovered(self, began: float, began_at: float, how: str) -> None:
        self.alert(f"Librarian: {self.what} {how} after {self.clock() - began:.0f} s.")
        if self.on_healed is not None:
            try:
                self.on_healed(began_at, time.time())
            except OSError as exc:  # a home that cannot be written: the reruns are lost, said
                print(f"librarian up: could not record the incident: {exc}", file=sys.stderr)
        self.down = False
        self.healed.set()


def alert_here(settings: Settings, text: str) -> None:
    """Said on stderr, and sent to Telegram where a bot is set, by this process: an alert that
    needs no database (the alert sensors keep their state in it)."""
    say("alert", text)
    if settings.telegram_configured:
        notifier = Notifier(
            settings.telegram_base_url, settings.telegram_bot_token, settings.telegram_chat_id,
            log_info=lambda _line: None, log_warning=lambda line: print(line, file=sys.stderr),
        )  # fmt: skip
        notifier.send(text)


def database_watch(settings: Settings, url: str) -> Watch:
    """The watch of the database at `url`: the embedded one restarted, an external one (its own
    supervisor's) waited for; alerts from this process."""
    return Watch(
        what="the database",
        where=describe_location(settings),
        probe=lambda: probe(url),
        restart=None if settings.database_url else (lambda: restart_embedded_server(settings)),
        alert=lambda text: alert_here(settings, text),
        interval_s=settings.watch_interval_seconds,
        on_healed=recorder(settings, "the database"),
    )


def recorder(settings: Settings, what: str) -> Callable[[float, float], None]:
    """A watch's `on_healed` that records its incidents in LIBRARIAN_HOME."""

    def record(began: float, healed: float) -> None:
        record_incident(settings.incidents_file, Incident(what, began, healed))

    return record
