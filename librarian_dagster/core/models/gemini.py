"""The one way to Google's models: a google-genai client for the Gemini API or Vertex AI, and
bounded, loud retries around every call.

Both services go through the same SDK (`google-genai`): the Gemini API with an API key, Vertex AI
with `vertexai=True`, a project, a location and the credentials google-auth finds (application
default credentials). `google-cloud-aiplatform` is not used: its `TextEmbeddingModel` was
deprecated in June 2025 and removed in June 2026, and it pins `google-genai<3`
(docs/decisions/0011).

Retries are ours, not the SDK's: the SDK's own retry ignores `Retry-After`, so its retries are
off and `call_with_backoff` waits as the server asks (the `Retry-After` header, or the
`RetryInfo.retryDelay` of Google's error body), else exponentially, never longer than a cap, and
gives up after a bounded number of tries with the reason.

google-genai is imported inside the functions: it costs ~0.6 s, and this module is imported by
code (the MCP server, `librarian search`) that may not need it.
"""

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from librarian_dagster.core.settings import default

if TYPE_CHECKING:
    from google import genai
    from google.auth.credentials import Credentials

T = TypeVar("T")

Service = Literal["gemini", "vertex"]

# 408 request timeout, 429 rate limit or quota, 5xx the service's own trouble: worth another try.
RETRYABLE_CODES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class ClientConfig:
    """What a client needs: which service, how to reach it, and how long to wait for it."""

    service: Service
    api_key: str | None = None
    project: str | None = None
    location: str | None = None
    base_url: str | None = None
    timeout_seconds: float = default("llm_timeout_seconds")

    def __repr__(self) -> str:
        # The key never reaches a log line through a repr.
        return (
            f"ClientConfig(service={self.service!r}, project={self.project!r}, "
            f"location={self.location!r}, base_url={self.base_url!r})"
        )


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


def make_client(config: ClientConfig, credentials: "Credentials | None" = None) -> "genai.Client":
    """A google-genai client for the Gemini API (`api_key`) or Vertex AI (project, location).

    `credentials` is for Vertex only; None lets google-auth find the application default
    credentials, as `gcloud auth application-default login` or a service account provide.
    """
    from google import genai
    from google.genai import types

    http_options = types.HttpOptions(
        base_url=config.base_url,
        timeout=int(config.timeout_seconds * 1000),
        # No SDK retries: call_with_backoff retries, honouring Retry-After.
        retry_options=None,
    )
    if config.service == "gemini":
        if not config.api_key:
            raise ProviderRejected("the Gemini API needs GEMINI_API_KEY (or GOOGLE_API_KEY)")
        return genai.Client(api_key=config.api_key, http_options=http_options)
    if not config.project:
        raise ProviderRejected("Vertex AI needs GOOGLE_CLOUD_PROJECT")
    return genai.Client(
        vertexai=True,
        project=config.project,
        location=config.location,
        credentials=credentials,
        http_options=http_options,
    )


def call_with_backoff(
    call: Callable[[], T],
    bounds: RetryBounds,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """`call()`, tried again on 429, 5xx and timeouts, at most `bounds.attempts` times."""
    import httpx
    from google.genai import errors

    for attempt in range(1, bounds.attempts + 1):
        asked: float | None = None
        try:
            return call()
        except errors.APIError as exc:
            if exc.code not in RETRYABLE_CODES:
                raise ProviderRejected(f"{what}: {_describe(exc)}") from None
            reason, asked = _describe(exc), _asked_wait(exc)
        except httpx.TimeoutException:
            reason = "timed out"
        except httpx.TransportError as exc:
            reason = f"connection failed ({type(exc).__name__})"
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


def _describe(exc: Any) -> str:
    message = (exc.message or "").strip().splitlines()
    return f"HTTP {exc.code} {exc.status or ''}".rstrip() + (
        f": {message[0][:300]}" if message else ""
    )


def _asked_wait(exc: Any) -> float | None:
    """How long the server asks us to wait: Retry-After, else Google's RetryInfo.retryDelay."""
    headers = getattr(exc.response, "headers", None)
    raw = headers.get("retry-after") if headers is not None else None
    if raw:
        raw = raw.strip()
        if re.fullmatch(r"\d+(\.\d+)?", raw):
            return float(raw)
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            when = None
        if when is not None:
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            return max(0.0, (when - datetime.now(UTC)).total_seconds())
    details = exc.details.get("error", {}).get("details") if isinstance(exc.details, dict) else None
    for item in details or []:
        delay = item.get("retryDelay") if isinstance(item, dict) else None
        if isinstance(delay, str) and (m := re.fullmatch(r"(\d+(?:\.\d+)?)s", delay.strip())):
            return float(m.group(1))
    return None
