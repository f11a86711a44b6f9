"""The way to Claude: an `anthropic` SDK client for the Messages API, and which of its errors are
worth another try (`calls.call_with_backoff` retries; the SDK's own retries are off).

The SDK is imported inside the functions, as google-genai is (gemini.py): what imports this
module (the providers, the settings' checks) may never call Claude.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from librarian_dagster.core.models.calls import (
    RETRYABLE_CODES,
    Failure,
    ProviderRejected,
    retry_after,
)
from librarian_dagster.core.settings import ANTHROPIC_KEY_VARIABLE, default

if TYPE_CHECKING:
    import anthropic


@dataclass(frozen=True)
class AnthropicConfig:
    """What a client needs: the key, where the API is, and how long to wait for it."""

    api_key: str | None = None
    base_url: str | None = None
    """None: Anthropic's endpoint; else a proxy, a gateway or a test's stand-in."""
    timeout_seconds: float = default("llm_timeout_seconds")

    def __repr__(self) -> str:
        # The key never reaches a log line through a repr.
        return f"AnthropicConfig(base_url={self.base_url!r})"


def make_client(config: AnthropicConfig) -> "anthropic.Anthropic":
    import anthropic

    if not config.api_key:
        raise ProviderRejected(f"the Messages API needs {ANTHROPIC_KEY_VARIABLE}")
    return anthropic.Anthropic(
        api_key=config.api_key,
        base_url=config.base_url,
        timeout=config.timeout_seconds,
        max_retries=0,  # call_with_backoff retries, honouring Retry-After
    )


def anthropic_failure(exc: Exception) -> Failure | None:
    """What an `anthropic` call's exception says: 429, 529 (overloaded), 5xx and timeouts are
    worth another try; a bad key, model or request is not."""
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        message = _message(exc)
        reason = f"HTTP {exc.status_code}" + (f": {message}" if message else "")
        asked = retry_after(exc.response.headers)
        return Failure(exc.status_code in RETRYABLE_CODES, reason, asked)
    if isinstance(exc, anthropic.APITimeoutError):
        return Failure(True, "timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        return Failure(True, f"connection failed ({type(exc.__cause__ or exc).__name__})")
    return None


def _message(exc: "anthropic.APIStatusError") -> str:
    """The error body's own message (`{"type": "error", "error": {"type", "message"}}`)."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    if not isinstance(error, dict):
        error = {}
    text = str(error.get("message") or "").strip().splitlines()
    kind = str(error.get("type") or "")
    return " ".join(part for part in (kind, text[0][:300] if text else "") if part)
