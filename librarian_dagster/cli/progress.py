"""Progress of `librarian ingest`, `backfill` and `push`, on stderr while they run.

On a terminal, tqdm's bar: sessions done of the total, the rate, the time left, and the failures
so far, each failure also said on a line of its own as it comes. Piped, or under CI (`CI` set),
a bar redrawn in place is noise in a log: a plain line instead at every tenth of the work or
every 30 s, whichever comes first, and one at the end.
"""

import os
import time
from collections.abc import Callable
from typing import Protocol, TextIO

PLAIN_EVERY_S = 30.0


class Outcome(Protocol):
    @property
    def session_id(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def detail(self) -> str: ...


class Progress:
    def __init__(
        self, out: TextIO, clock: Callable[[], float] = time.monotonic, tty: bool | None = None
    ) -> None:
        self.out, self.clock = out, clock
        self.tty = out.isatty() and not os.environ.get("CI") if tty is None else tty
        self.total = self.done = self.failed = 0
        self._bar = None
        self._began = self._said_at = clock()
        self._said_tenths = 0

    def start(self, total: int) -> None:
        self.total, self._began, self._said_at = total, self.clock(), self.clock()
        if self.tty and total:
            from tqdm import tqdm

            self._bar = tqdm(total=total, file=self.out, unit="session", dynamic_ncols=True)
            self._bar.set_postfix_str("0 failed")

    def update(self, outcome: Outcome) -> None:
        self.done += 1
        if outcome.status == "failed":
            self.failed += 1
            self.say(f"failed   {outcome.session_id}  {outcome.detail}")
        if self._bar is not None:
            self._bar.set_postfix_str(f"{self.failed} failed", refresh=False)
            self._bar.update(1)
            if self.done >= self.total:
                self.close()
            return
        tenths = 10 * self.done // max(1, self.total)
        if self.done >= self.total or tenths > self._said_tenths:
            self._said_tenths = tenths
            self._plain()
        elif self.clock() - self._said_at >= PLAIN_EVERY_S:
            self._plain()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def say(self, line: str) -> None:
        """A line of its own, above the bar while there is one."""
        if self._bar is not None:
            self._bar.write(line, file=self.out)
        else:
            print(line, file=self.out, flush=True)

    def _plain(self) -> None:
        self._said_at = now = self.clock()
        elapsed = now - self._began
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else None
        share = 100 * self.done // max(1, self.total)
        when = f", {_duration(left)} left" if left is not None and self.done < self.total else ""
        self.say(
            f"{self.done}/{self.total} sessions ({share}%), {rate:.2f}/s{when}, "
            f"{self.failed} failed"
        )


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
