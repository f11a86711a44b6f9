"""Which digester and embedder the settings ask for: turned from names into objects.

The Dagster resources, `librarian search`/`eval`/`status` and the MCP server all come here, so
the write path and the read path always use the same embedding space.
"""

from dataclasses import dataclass

from librarian_dagster.core.digest.offline import OfflineDigester
from librarian_dagster.core.digest.schema import Digester
from librarian_dagster.core.models.calls import RetryBounds
from librarian_dagster.core.models.embeddings import Embedder, GeminiEmbedder
from librarian_dagster.core.models.gemini import ClientConfig, Service
from librarian_dagster.core.models.minilm import local_embedder
from librarian_dagster.core.settings import Settings, default


@dataclass(frozen=True)
class ProviderConfig:
    """What a provider needs, as plain values (a Dagster resource's fields map onto it)."""

    provider: str
    model: str = ""
    dimension: int = 0
    api_key: str | None = None
    project: str | None = None
    location: str | None = None
    base_url: str | None = None
    attempts: int = default("llm_attempts")
    backoff_seconds: float = default("llm_backoff_seconds")
    max_wait_seconds: float = default("llm_max_wait_seconds")
    timeout_seconds: float = default("llm_timeout_seconds")
    input_token_budget: int = default("digest_input_tokens")
    command: str = default("claude_code_command")

    def __repr__(self) -> str:
        return f"ProviderConfig(provider={self.provider!r}, model={self.model!r})"

    def client(self) -> ClientConfig:
        service: Service = "vertex" if self.provider == "vertex" else "gemini"
        return ClientConfig(
            service=service,
            api_key=self.api_key if service == "gemini" else None,
            project=self.project,
            location=self.location,
            base_url=self.base_url,
            timeout_seconds=self.timeout_seconds,
        )

    def bounds(self) -> RetryBounds:
        return RetryBounds(self.attempts, self.backoff_seconds, self.max_wait_seconds)


def digest_config(settings: Settings) -> ProviderConfig:
    return _config(settings, settings.digest_provider, settings.digest_model_name, 0)


def embed_config(settings: Settings) -> ProviderConfig:
    return _config(
        settings, settings.embed_provider, settings.embed_model, settings.embed_dimension
    )


def _config(settings: Settings, provider: str, model: str, dimension: int) -> ProviderConfig:
    anthropic = provider == "anthropic"
    return ProviderConfig(
        provider=provider,
        model=model,
        dimension=dimension,
        api_key=settings.anthropic_api_key if anthropic else settings.gemini_api_key,
        project=settings.google_cloud_project,
        location=settings.google_cloud_location,
        base_url=settings.anthropic_base_url if anthropic else settings.gemini_base_url,
        attempts=settings.llm_attempts,
        backoff_seconds=settings.llm_backoff_seconds,
        max_wait_seconds=settings.llm_max_wait_seconds,
        timeout_seconds=settings.llm_timeout_seconds,
        input_token_budget=settings.digest_input_tokens,
        command=settings.claude_code_command,
    )


def make_digester(config: ProviderConfig) -> Digester:
    if config.provider == "offline":
        return OfflineDigester()
    if config.provider in ("gemini", "vertex"):
        from librarian_dagster.core.digest.llm import GeminiDigester

        return GeminiDigester(
            config.client(), config.model, config.bounds(), config.input_token_budget
        )
    if config.provider == "anthropic":
        from librarian_dagster.core.digest.llm import AnthropicDigester
        from librarian_dagster.core.models.anthropic import AnthropicConfig

        return AnthropicDigester(
            AnthropicConfig(config.api_key, config.base_url, config.timeout_seconds),
            config.model,
            config.bounds(),
            config.input_token_budget,
        )
    if config.provider == "claude-code":
        from librarian_dagster.core.digest.llm import ClaudeCodeDigester
        from librarian_dagster.core.models.claude_code import ClaudeCodeConfig

        return ClaudeCodeDigester(
            ClaudeCodeConfig(config.command, config.timeout_seconds),
            config.model,
            config.bounds(),
            config.input_token_budget,
        )
    raise ValueError(
        f"unknown digest provider {config.provider!r} "
        "(offline, gemini, vertex, anthropic, claude-code)"
    )


def make_embedder(config: ProviderConfig) -> Embedder:
    if config.provider == "local":
        return local_embedder()
    if config.provider in ("gemini", "vertex"):
        return GeminiEmbedder(config.client(), config.model, config.dimension, config.bounds())
    raise ValueError(f"unknown embedding provider {config.provider!r} (local, gemini, vertex)")


def configured_embedder(settings: Settings) -> Embedder:
    """The embedder of these settings: the space searches are made in."""
    return make_embedder(embed_config(settings))


def describe(settings: Settings) -> dict[str, str]:
    """Which providers and models are in use, for `librarian status` (never a key)."""
    digest = (
        "offline (extracts, no model)"
        if settings.digest_provider == "offline"
        else f"{settings.digest_provider} {settings.digest_model_name}"
    )
    embed = (
        "local all-MiniLM-L6-v2 (384-d)"
        if settings.embed_provider == "local"
        else f"{settings.embed_provider} {settings.embed_model} ({settings.embed_dimension}-d)"
    )
    where = []
    if settings.uses_vertex:
        where.append(f"vertex {settings.google_cloud_project}/{settings.google_cloud_location}")
    if settings.gemini_base_url:
        where.append(f"base URL {settings.gemini_base_url}")
    if settings.digest_provider == "anthropic" and settings.anthropic_base_url:
        where.append(f"Anthropic base URL {settings.anthropic_base_url}")
    return {"digests": digest, "embeddings": embed, "endpoint": ", ".join(where)}
