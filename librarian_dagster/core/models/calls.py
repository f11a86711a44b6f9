"""Bounded, loud retries around every call to a model service, whoever serves it.

Retries are ours, not the SDKs': an SDK's own retry ignores `Retry-After` or retries without a
bound we set, so the SDKs' retries are off and `call_with_backoff` waits as the server asks (the
`Retry-After` header, or what the service's error says), else exponentially, never longer than a
cap, and gives up after a bounded number of tries with the reason. Each service module
(`gemini.py`, `anthropic.py`) says which of its SDK's errors are worth another try.
"""

import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TypeVar

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


def call_with_backoff(
    call: Callable[[], T],
    bounds: RetryBounds,
    what: str,
    failure: Callable[[Exception], Failure | None],
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`, tried again while `failure` says another try may help, at most
    `bounds.attempts` times. An exception `failure` does not know (None) is raised as it is."""
    for attempt in range(1, bounds.attempts + 1):
        try:
            return call()
        except Exception as exc:
            failed = failure(exc)
            if failed is None:
                raise
        if not failed.retry:
            raise ProviderRejected(f"{what}: {failed.reason}") from None
        reason, asked = failed.reason, failed.asked_wait
        if attempt == bounds.attempts:
            raise ProviderUnavailable(
                f"{what}: gave up after {attempt} tries (LIBRARIAN_LLM_ATTEMPTS); last: {reason}"
            )
        if asked is not None and asked > bounds.max_wait_seconds:
            raise ProviderUnavailable(
                f"{what}: {reason}; the service asks to wait {asked:.0f}s, longer than "
                f"LIBRARIAN_LLM_MAX_WAIT_SECONDS ({bounds.max_wait_seconds:.0f}s)"
            )
        if asked is not None:
            delay = asked
        else:
            # Jitter, so parallel runs that failed together do not retry together.
            delay = bounds.backoff_seconds * 2 ** (attempt - 1) * random.uniform(0.8, 1.2)
        sleep(min(delay, bounds.max_wait_seconds))
    raise AssertionError("unreachable: the loop returns or raises")


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
