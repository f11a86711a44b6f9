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

from librarian_dagster.core.models.calls import (
    Failure,
    ProviderError,
    RetryBounds,
    call_with_backoff,
)
from librarian_dagster.core.redaction.scan import redact

RETRIES = RetryBounds(attempts=3, backoff_seconds=0.5, max_wait_seconds=5.0, env_prefix=None)
"""A blip is ridden out; an outage costs about 1.5 s plus timeouts, and a 429 that asks for more
than 5 s ends the send: a sensor tick must end within Dagster's timeout."""
TIMEOUT = httpx.Timeout(5.0, connect=3.0)
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
        client = _client(self.token)

        def post() -> None:
            response = client.post(url, json=payload)
            if response.status_code != 200:
                raise _Refused(response)

        try:
            call_with_backoff(post, RETRIES, "Telegram", _failure, self.sleep)
        except ProviderError as exc:
            return str(exc).removeprefix("Telegram: ")
        return None

    def _scrub(self, text: str) -> str:
        return text.replace(self.token, "[REDACTED:telegram_bot]") if self.token else text


class _Refused(Exception):
    """Telegram answered with another status than 200: `_failure` judges whether to try again."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def _failure(exc: Exception) -> Failure | None:
    """Whether another try may help: a connection that failed, a 429 (after the wait Telegram
    asks for) and a 5xx may; a wrong token or chat id (another 4xx) does not heal."""
    if isinstance(exc, httpx.HTTPError):
        # The exception's text can hold the request URL, and so the token: name its type.
        return Failure(retry=True, reason=type(exc).__name__)
    if not isinstance(exc, _Refused):
        return None
    response = exc.response
    problem = f"HTTP {response.status_code}: {_description(response)}"
    if response.status_code == 429:
        return Failure(retry=True, reason=problem, asked_wait=_retry_after(response))
    return Failure(retry=not 400 <= response.status_code < 500, reason=problem)


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
