"""Bounded, loud retries around every call to a service outside this machine: the model services,
whoever serves them, and Telegram (core/service/telegram.py).

Retries are ours, not the SDKs': an SDK's own retry ignores `Retry-After` or retries without a
bound we set, so the SDKs' retries are off and `call_with_backoff` (on tenacity) waits as the
server asks (the `Retry-After` header, or what the service's error says), else exponentially with
jitter, never longer than a cap, and gives up after a bounded number of tries with the reason. A
server that asks for a longer wait than the cap ends the call at once. Each caller says which of
its errors are worth another try (`failure`).
"""

import random
import re
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

import tenacity

from librarian_dagster.core.settings import default

T = TypeVar("T")

# 408 request timeout, 429 rate limit or quota, 5xx the service's own trouble (529: Anthropic's
# "overloaded"): worth another try.
RETRYABLE_CODES = frozenset({408, 429, 500, 502, 503, 504, 529})


@dataclass(frozen=True)
class RetryBounds:
    attempts: int = default("llm_attempts")
    """Tries per call, the first included."""
    backoff_seconds: float = default("llm_backoff_seconds")
    """The first wait when the server does not say how long; doubled after each try."""
    max_wait_seconds: float = default("llm_max_wait_seconds")
    """The longest single wait; a server asking for longer ends the call now, with the reason."""
    env_prefix: str | None = "LIBRARIAN_LLM"
    """The prefix of the settings these bounds come from, named when they end a call (None:
    they are constants of the caller's)."""

    def named(self, suffix: str) -> str:
        """` (LIBRARIAN_LLM_<suffix>)`: the setting to change, or nothing."""
        return f" ({self.env_prefix}_{suffix})" if self.env_prefix else ""


class ProviderError(RuntimeError):
    """A call to the model service failed; the message says why (never what was sent)."""

    transient = False
    # What the failed attempt had already spent (a digest's earlier calls, a repair): set by the
    # digester, so the spend is counted even when the digest fails.
    input_tokens = 0
    output_tokens = 0
    calls = 0


class ProviderUnavailable(ProviderError):
    """Rate-limited, overloaded or timing out after every allowed try: worth a later retry."""

    transient = True


class ProviderRejected(ProviderError):
    """The service refused the request (bad key, unknown model, bad request): retrying is moot."""


@dataclass(frozen=True)
class Failure:
    """What a failed call says: whether another try may help, why, and how long the server asks
    to wait (None: it does not say)."""

    retry: bool
    reason: str
    asked_wait: float | None = None


class _Again(Exception):
    """A failed try that another may mend: what it said, for the wait and the last word."""

    def __init__(self, failed: Failure) -> None:
        super().__init__(failed.reason)
        self.failed = failed


def call_with_backoff(
    call: Callable[[], T],
    bounds: RetryBounds,
    what: str,
    failure: Callable[[Exception], Failure | None],
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`, tried again while `failure` says another try may help, at most
    `bounds.attempts` times. An exception `failure` does not know (None) is raised as it is;
    ProviderRejected when it says retrying is moot, ProviderUnavailable when the tries run out
    or the server asks for a longer wait than the bounds allow."""

    def once() -> T:
        try:
            return call()
        except Exception as exc:
            failed = failure(exc)
            if failed is None:
                raise
            if not failed.retry:
                raise ProviderRejected(f"{what}: {failed.reason}") from None
            asked = failed.asked_wait
            if asked is not None and asked > bounds.max_wait_seconds:
                raise ProviderUnavailable(
                    f"{what}: {failed.reason}; the service asks to wait {asked:.0f}s, longer "
                    f"than {bounds.max_wait_seconds:.0f}s{bounds.named('MAX_WAIT_SECONDS')}"
                ) from None
            raise _Again(failed) from exc

    def wait(state: tenacity.RetryCallState) -> float:
        failed = _failed(state.outcome)
        if failed.asked_wait is not None:
            return min(failed.asked_wait, bounds.max_wait_seconds)
        # Jitter, so parallel runs that failed together do not retry together.
        delay = bounds.backoff_seconds * 2 ** (state.attempt_number - 1)
        return min(delay * random.uniform(0.8, 1.2), bounds.max_wait_seconds)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(bounds.attempts),
        wait=wait,
        retry=tenacity.retry_if_exception_type(_Again),
        sleep=sleep,
    )
    try:
        return retrying(once)
    except tenacity.RetryError as exc:
        tries, last = exc.last_attempt.attempt_number, _failed(exc.last_attempt)
        raise ProviderUnavailable(
            f"{what}: gave up after {tries} tries{bounds.named('ATTEMPTS')}; last: {last.reason}"
        ) from None


def _failed(outcome: "Future[object] | None") -> Failure:
    """What the try that ended in `outcome` said (tenacity retries on `_Again` alone)."""
    error = outcome.exception() if outcome is not None else None
    assert isinstance(error, _Again)
    return error.failed


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """The wait a `Retry-After` header asks for (seconds, or an HTTP date), if any."""
    raw = headers.get("retry-after") if headers is not None else None
    if not raw:
        return None
    raw = raw.strip()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        return float(raw)
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
