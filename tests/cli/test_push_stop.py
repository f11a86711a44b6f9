"""`librarian push --watch` stops at Ctrl-C or SIGTERM (the login unit's stop) between two
sessions, by a flag the signal sets: a KeyboardInterrupt raised where a finalizer runs is
dropped by Python, and the watch went on for good (the suite saw it once). A second signal
stops at once."""

import os
import signal

import pytest

from librarian_dagster.cli.push import _stop_on_signal


@pytest.fixture
def own_handlers():
    kept = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for signum, handler in kept.items():
        signal.signal(signum, handler)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_first_signal_asks_the_watch_to_stop_and_a_second_stops_at_once(own_handlers, signum):
    stop = _stop_on_signal()
    assert not stop.is_set()
    os.kill(os.getpid(), signum)  # its handler runs in this, the main, thread, before the next line
    assert stop.is_set()
    again = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
    assert signal.getsignal(signum) is again
