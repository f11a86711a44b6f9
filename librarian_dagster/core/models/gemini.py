"""The one way to Google's models: a google-genai client for the Gemini API or Vertex AI, and which
of its errors are worth another try (`calls.call_with_backoff` retries).

Both services go through the same SDK (`google-genai`): the Gemini API with an API key, Vertex AI
with `vertexai=True`, a project, a location and the credentials google-auth finds (application
default credentials). `google-cloud-aiplatform` is not used: its `TextEmbeddingModel` was
deprecated in June 2025 and removed in June 2026, and it pins `google-genai<3`
(docs/decisions/0011).

The SDK's own retry ignores `Retry-After`, so it is off: `genai_failure` says what a failed call
asks for (the `Retry-After` header, or the `RetryInfo.retryDelay` of Google's error body).

google-genai is imported inside the functions: it costs ~0.6 s, and this module is imported by
code (the MCP server, `librarian search`) that may not need it.
"""

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from librarian_dagster.core.models.calls import (
    RETRYABLE_CODES,
    Failure,
    ProviderRejected,
    retry_after,
)
from librarian_dagster.core.settings import default

if TYPE_CHECKING:
    from google import genai
    from google.auth.credentials import Credentials

Service = Literal["gemini", "vertex"]


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


def genai_failure(exc: Exception) -> Failure | None:
    """What a google-genai call's exception says: 429, 5xx and timeouts are worth another try."""
    import httpx
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        return Failure(exc.code in RETRYABLE_CODES, _describe(exc), _asked_wait(exc))
    if isinstance(exc, httpx.TimeoutException):
        return Failure(True, "timed out")
    if isinstance(exc, httpx.TransportError):
        return Failure(True, f"connection failed ({type(exc).__name__})")
    return None


def _describe(exc: Any) -> str:
    message = (exc.message or "").strip().splitlines()
    return f"HTTP {exc.code} {exc.status or ''}".rstrip() + (
        f": {message[0][:300]}" if message else ""
    )


def _asked_wait(exc: Any) -> float | None:
    """How long the server asks us to wait: Retry-After, else Google's RetryInfo.retryDelay."""
    asked = retry_after(getattr(exc.response, "headers", None))
    if asked is not None:
        return asked
    details = exc.details.get("error", {}).get("details") if isinstance(exc.details, dict) else None
    for item in details or []:
        delay = item.get("retryDelay") if isinstance(item, dict) else None
        if isinstance(delay, str) and (m := re.fullmatch(r"(\d+(?:\.\d+)?)s", delay.strip())):
            return float(m.group(1))
    return None
