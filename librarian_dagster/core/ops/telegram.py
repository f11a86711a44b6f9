"""Alerts over the Telegram Bot API, or to the log when no bot is configured.

`Notifier.send(text)` redacts the text (the one place every alert passes), then POSTs it to
`{base}/bot<token>/sendMessage`. A send is tried a bounded number of times; when it still fails
it is logged and the caller carries on: an alert never fails a run or a sensor tick. Once one send
has failed, the rest of that notifier's sends go straight to the log, so an outage costs one
round of retries per sensor tick, not one per message (a tick must end within Dagster's timeout).

The token is part of the URL path, so it must never reach a log line: we never log the URL, and a
filter scrubs it from httpx's and httpcore's own request log records.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import httpx

from librarian_dagster.core.redaction.scan import redact

ATTEMPTS = 3
BACKOFF_SECONDS = (0.5, 1.5)
"""Pauses between attempts: a blip is ridden out, an outage costs about 2 s plus timeouts."""
TIMEOUT = httpx.Timeout(5.0, connect=3.0)
MAX_RETRY_AFTER = 5.0
"""Telegram's 429 says how long to wait; we wait at most this long within one tick."""
MAX_CHARS = 4096
"""Telegram's limit for one message's text."""

Log = Callable[[str], None]


@dataclass
class Notifier:
    """Sends alerts to one Telegram chat, or logs them when `token`/`chat_id` are not set."""

    base_url: str
    token: str | None = field(default=None, repr=False)
    chat_id: str | None = None
    log_info: Log = logging.getLogger(__name__).info
    log_warning: Log = logging.getLogger(__name__).warning
    sleep: Callable[[float], None] = time.sleep
    failed: bool = False
    """A send of this notifier has failed: later ones are logged without trying again."""

    @property
    def configured(self) -> bool:
        return bool(self.token and self.chat_id)

    def send(self, text: str) -> bool:
        """Deliver `text` (redacted first); never raises.

        True when it reached its destination: Telegram's chat, or the log when no bot is
        configured (then the log is where alerts go, and a gap alert is not repeated every tick).
        False when Telegram is configured but did not take it: the caller may try again later.
        """
        clean, _findings = redact(text)
        clean = clean[:MAX_CHARS]
        if not self.configured:
            self.log_warning(f"alert (Telegram not configured, log only): {clean}")
            return True
        if self.failed:
            self.log_warning(f"alert not sent (Telegram failed earlier in this tick): {clean}")
            return False
        problem = self._post(clean)
        if problem is None:
            self.log_info(f"alert sent to Telegram: {clean.splitlines()[0] if clean else ''}")
            return True
        self.failed = True
        self.log_warning(f"alert not sent to Telegram ({self._scrub(problem)}): {clean}")
        return False

    def _post(self, text: str) -> str | None:
        """POST the message; None when accepted, else what went wrong (without the URL)."""
        assert self.token is not None
        url = f"{self.base_url.rstrip('/')}/bot{self.token}/sendMessage"
        payload = {
            "chat_id": self.chat_id,
            "text": text,
            "link_preview_options": {"is_disabled": True},
        }
        problem = "not tried"
        for attempt in range(ATTEMPTS):
            wait = BACKOFF_SECONDS[min(attempt, len(BACKOFF_SECONDS) - 1)]
            try:
                response = _client(self.token).post(url, json=payload)
            except httpx.HTTPError as exc:
                # The exception's text can hold the request URL, and so the token: name its type.
                problem = f"{type(exc).__name__} after {attempt + 1} attempt(s)"
            else:
                if response.status_code == 200:
                    return None
                problem = f"HTTP {response.status_code}: {_description(response)}"
                if response.status_code == 429:
                    wait = min(MAX_RETRY_AFTER, _retry_after(response) or wait)
                elif 400 <= response.status_code < 500:
                    return problem  # a wrong token or chat id does not heal by retrying
            if attempt + 1 < ATTEMPTS:
                self.sleep(wait)
        return problem

    def _scrub(self, text: str) -> str:
        return text.replace(self.token, "[REDACTED:telegram_bot]") if self.token else text


def _description(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.reason_phrase or "no description"
    if isinstance(body, dict):
        return str(body.get("description") or response.reason_phrase)
    return response.reason_phrase or "no description"


def _retry_after(response: httpx.Response) -> float | None:
    try:
        value = response.json().get("parameters", {}).get("retry_after")
    except (ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) else None


class _ScrubToken(logging.Filter):
    """Takes the bot token out of a log record before any handler sees it."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.token in message:
            record.msg, record.args = message.replace(self.token, "[REDACTED:telegram_bot]"), ()
        return True


_filters_lock = threading.Lock()


@cache
def _client(token: str) -> httpx.Client:
    # One kept client (and connection pool) per bot for the process: sensor ticks and runs in
    # the same process reuse the TLS connection instead of a handshake per alert.
    with _filters_lock:
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).addFilter(_ScrubToken(token))
    return httpx.Client(timeout=TIMEOUT)
