"""One settings object, read from LIBRARIAN_* environment variables.

Everything else takes a `Settings` (or the values in it) as an argument: nothing below this module
reads `os.environ` for its own configuration.
"""

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from librarian_dagster.core.recall.relevance import DEFAULT_THRESHOLD

DEFAULT_SETTLE_SECONDS = 120.0
DEFAULT_MCP_HOST = "127.0.0.1"
DEFAULT_MCP_PORT = 3201
DEFAULT_RECALL_FLOOR = 0.8
DEFAULT_TELEGRAM_BASE_URL = "https://api.telegram.org"
DEFAULT_UI_URL = "http://127.0.0.1:3000"
DEFAULT_GAP_MINUTES = 60.0
DEFAULT_QUIET_HOURS = 24.0

DIGEST_PROVIDERS = ("offline", "gemini", "vertex")
EMBED_PROVIDERS = ("local", "gemini", "vertex")
DEFAULT_DIGEST_MODEL = "gemini-2.5-flash"
DEFAULT_EMBED_MODEL = "gemini-embedding-001"
DEFAULT_EMBED_DIMENSION = 768
DEFAULT_VERTEX_LOCATION = "us-central1"
DEFAULT_LLM_ATTEMPTS = 5
DEFAULT_LLM_BACKOFF_SECONDS = 2.0
DEFAULT_LLM_MAX_WAIT_SECONDS = 60.0
DEFAULT_LLM_TIMEOUT_SECONDS = 120.0
DEFAULT_DIGEST_INPUT_TOKENS = 200_000


class SettingsError(ValueError):
    """A LIBRARIAN_* variable holds a value we cannot use; the message names it."""


@dataclass(frozen=True)
class Settings:
    home: Path
    """Embedded database files, DAGSTER_HOME and logs live here."""
    mirror: Path
    """The folder of Claude Code transcripts the sensor watches (~/.claude/projects layout)."""
    database_url: str | None
    """An external PostgreSQL with pgvector; None means the embedded server under `home`."""
    settle_seconds: float
    """A session file must be unchanged this long before the sensor ingests it."""
    include_thinking: bool = False
    """Whether thinking blocks are part of the digest input."""
    mcp_host: str = DEFAULT_MCP_HOST
    mcp_port: int = DEFAULT_MCP_PORT
    recall_threshold: float = DEFAULT_THRESHOLD
    """Recall leaves out results less likely relevant than this (0 to 1; recall/relevance.py)."""
    recall_floor: float = DEFAULT_RECALL_FLOOR
    """The recall@5 on the golden questions below which the quality check warns."""
    recency_boost: float = 0.005
    """How much more a session from today weighs in ranking than an old one (store.Boosts)."""
    importance_boost: float = 0.002
    """How much more each point of importance above 3 weighs in ranking (store.Boosts)."""
    exclude: tuple[str, ...] = ()
    """Globs over project folder names or transcript paths never ingested (capture/mirror.py)."""
    mcp_token: str | None = field(default=None, repr=False)
    """A bearer token the recall server's HTTP endpoints accept with the default scope, beside
    the token file's; kept out of repr (and logs)."""
    mcp_tokens: Path | None = None
    """The token file (core/ops/tokens.py); None means `home/tokens.json`."""
    stdio_private: bool = False
    """Whether the stdio server (local, started by its user) returns the `private` domain."""
    telegram_bot_token: str | None = field(default=None, repr=False)
    """The Telegram bot alerts are sent through; kept out of repr (and logs). None: log only."""
    telegram_chat_id: str | None = None
    """The chat (user, group or channel id) alerts go to; both it and the token are needed."""
    telegram_base_url: str = DEFAULT_TELEGRAM_BASE_URL
    """Where the Bot API answers: only tests point it elsewhere (a fake server on 127.0.0.1)."""
    notify_digests: bool = True
    """Whether each new digest is announced (project, summary, importance)."""
    gap_minutes: float = DEFAULT_GAP_MINUTES
    """A settled session not ingested this long after it was due is a capture gap."""
    quiet_hours: float = DEFAULT_QUIET_HOURS
    """A mirror unchanged this long is a capture gap (0: never), and the memory turns stale."""
    ui_url: str = DEFAULT_UI_URL
    """The Dagster UI's address, for links to runs in alerts."""
    digest_provider: str = "offline"
    """Who writes digests: `offline` (no key), `gemini` (Gemini API) or `vertex` (Vertex AI)."""
    embed_provider: str = "local"
    """Who embeds chunks and queries: `local` (MiniLM in a wheel), `gemini` or `vertex`."""
    gemini_api_key: str | None = field(default=None, repr=False)
    """The Gemini API key (GEMINI_API_KEY, else GOOGLE_API_KEY); kept out of repr (and logs)."""
    gemini_api_key_variable: str | None = None
    """Which variable held the key, so Dagster resources can bind it by name (dg.EnvVar)."""
    google_cloud_project: str | None = None
    google_cloud_location: str = DEFAULT_VERTEX_LOCATION
    gemini_base_url: str | None = None
    """Where the SDK sends requests instead of Google's endpoint: a proxy, or the tests' fake."""
    digest_model: str = DEFAULT_DIGEST_MODEL
    embed_model: str = DEFAULT_EMBED_MODEL
    embed_dimension: int = DEFAULT_EMBED_DIMENSION
    llm_attempts: int = DEFAULT_LLM_ATTEMPTS
    """Tries per request (the first included) on 429, 5xx and timeouts, before the step fails."""
    llm_backoff_seconds: float = DEFAULT_LLM_BACKOFF_SECONDS
    """The first wait between tries; it doubles each time, capped by `llm_max_wait_seconds`."""
    llm_max_wait_seconds: float = DEFAULT_LLM_MAX_WAIT_SECONDS
    """The longest single wait, Retry-After included: a server asking for more fails the try."""
    llm_timeout_seconds: float = DEFAULT_LLM_TIMEOUT_SECONDS
    digest_input_tokens: int = DEFAULT_DIGEST_INPUT_TOKENS
    """The most (estimated) tokens of session one digest request carries; longer sessions are
    digested in segments whose digests are merged."""
    daily_token_budget: int | None = None
    """Digest tokens (in + out) that may be spent per UTC day; None is no limit."""

    @property
    def uses_gemini_api(self) -> bool:
        return "gemini" in (self.digest_provider, self.embed_provider)

    @property
    def uses_vertex(self) -> bool:
        return "vertex" in (self.digest_provider, self.embed_provider)

    @property
    def pgdata(self) -> Path:
        return self.home / "pgdata"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @property
    def tokens_file(self) -> Path:
        """The recall server's bearer tokens (hashed, with their scopes)."""
        return self.mcp_tokens or self.home / "tokens.json"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def eval_dir(self) -> Path:
        """Golden question files (`*.jsonl`) the recall quality asset measures."""
        return self.home / "eval"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        env = os.environ if env is None else env
        digest_provider = _choice(env, "LIBRARIAN_DIGEST_PROVIDER", DIGEST_PROVIDERS)
        embed_provider = _choice(env, "LIBRARIAN_EMBED_PROVIDER", EMBED_PROVIDERS)
        key_variable = next((n for n in ("GEMINI_API_KEY", "GOOGLE_API_KEY") if env.get(n)), None)
        project = env.get("GOOGLE_CLOUD_PROJECT") or None
        if "gemini" in (digest_provider, embed_provider) and key_variable is None:
            raise SettingsError(
                "the gemini provider needs an API key: set GEMINI_API_KEY (or GOOGLE_API_KEY), "
                "or use LIBRARIAN_DIGEST_PROVIDER=offline / LIBRARIAN_EMBED_PROVIDER=local"
            )
        if "vertex" in (digest_provider, embed_provider) and project is None:
            raise SettingsError(
                "the vertex provider needs GOOGLE_CLOUD_PROJECT (and GOOGLE_CLOUD_LOCATION, "
                f"default {DEFAULT_VERTEX_LOCATION}); credentials come from google-auth's "
                "application default credentials (`gcloud auth application-default login`)"
            )
        base_url = (env.get("LIBRARIAN_GEMINI_BASE_URL") or "").strip() or None
        if base_url is not None and not base_url.startswith(("http://", "https://")):
            raise SettingsError(
                f"LIBRARIAN_GEMINI_BASE_URL must be an http(s) URL, got {base_url!r}"
            )
        budget = _whole(env, "LIBRARIAN_DAILY_TOKEN_BUDGET", 0)
        home = Path(env.get("LIBRARIAN_HOME") or "~/.librarian").expanduser()
        mirror = Path(env.get("LIBRARIAN_MIRROR") or "~/.claude/projects").expanduser()
        return cls(
            home=home.absolute(),
            mirror=mirror.absolute(),
            database_url=env.get("LIBRARIAN_DATABASE_URL") or None,
            settle_seconds=_number(env, "LIBRARIAN_SETTLE_SECONDS", DEFAULT_SETTLE_SECONDS),
            include_thinking=_flag(env, "LIBRARIAN_INCLUDE_THINKING"),
            mcp_host=env.get("LIBRARIAN_MCP_HOST") or DEFAULT_MCP_HOST,
            mcp_port=_port(env, "LIBRARIAN_MCP_PORT", DEFAULT_MCP_PORT),
            recall_threshold=_share(env, "LIBRARIAN_RECALL_THRESHOLD", DEFAULT_THRESHOLD),
            recall_floor=_share(env, "LIBRARIAN_RECALL_FLOOR", DEFAULT_RECALL_FLOOR),
            recency_boost=_share(env, "LIBRARIAN_RECENCY_BOOST", 0.005),
            importance_boost=_share(env, "LIBRARIAN_IMPORTANCE_BOOST", 0.002),
            mcp_token=env.get("LIBRARIAN_MCP_TOKEN") or None,
            exclude=tuple(
                g.strip() for g in (env.get("LIBRARIAN_EXCLUDE") or "").split(",") if g.strip()
            ),
            telegram_bot_token=env.get("TELEGRAM_BOT_TOKEN") or None,
            telegram_chat_id=env.get("TELEGRAM_CHAT_ID") or None,
            telegram_base_url=_url(env, "LIBRARIAN_TELEGRAM_BASE_URL", DEFAULT_TELEGRAM_BASE_URL),
            notify_digests=_flag(env, "LIBRARIAN_NOTIFY_DIGESTS", default=True),
            gap_minutes=_number(env, "LIBRARIAN_GAP_MINUTES", DEFAULT_GAP_MINUTES),
            quiet_hours=_number(env, "LIBRARIAN_QUIET_HOURS", DEFAULT_QUIET_HOURS),
            ui_url=_url(env, "LIBRARIAN_UI_URL", DEFAULT_UI_URL),
            mcp_tokens=_path(env, "LIBRARIAN_MCP_TOKENS"),
            stdio_private=_flag(env, "LIBRARIAN_STDIO_PRIVATE"),
            digest_provider=digest_provider,
            embed_provider=embed_provider,
            gemini_api_key=env.get(key_variable) if key_variable else None,
            gemini_api_key_variable=key_variable,
            google_cloud_project=project,
            google_cloud_location=env.get("GOOGLE_CLOUD_LOCATION") or DEFAULT_VERTEX_LOCATION,
            gemini_base_url=base_url,
            digest_model=_name(env, "LIBRARIAN_DIGEST_MODEL", DEFAULT_DIGEST_MODEL),
            embed_model=_name(env, "LIBRARIAN_EMBED_MODEL", DEFAULT_EMBED_MODEL),
            embed_dimension=_whole(env, "LIBRARIAN_EMBED_DIMENSION", DEFAULT_EMBED_DIMENSION, 1),
            llm_attempts=_whole(env, "LIBRARIAN_LLM_ATTEMPTS", DEFAULT_LLM_ATTEMPTS, 1),
            llm_backoff_seconds=_number(
                env, "LIBRARIAN_LLM_BACKOFF_SECONDS", DEFAULT_LLM_BACKOFF_SECONDS
            ),
            llm_max_wait_seconds=_number(
                env, "LIBRARIAN_LLM_MAX_WAIT_SECONDS", DEFAULT_LLM_MAX_WAIT_SECONDS
            ),
            llm_timeout_seconds=_number(
                env, "LIBRARIAN_LLM_TIMEOUT_SECONDS", DEFAULT_LLM_TIMEOUT_SECONDS
            ),
            digest_input_tokens=_whole(
                env, "LIBRARIAN_DIGEST_INPUT_TOKENS", DEFAULT_DIGEST_INPUT_TOKENS, 1000
            ),
            daily_token_budget=budget or None,
        )

    @property
    def telegram_configured(self) -> bool:
        return bool(self.telegram_bot_token and self.telegram_chat_id)


def _path(env: Mapping[str, str], name: str) -> Path | None:
    raw = env.get(name)
    return Path(raw).expanduser().absolute() if raw else None


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value):  # float() takes "nan" and "inf", which no setting can mean
        raise SettingsError(f"{name} must be a finite number, got {raw!r}")
    if value < 0:
        raise SettingsError(f"{name} must not be negative, got {raw!r}")
    return value


def check_port(value: int, name: str) -> int:
    """A TCP port a server can listen on; `name` says where the value came from."""
    if not 1 <= value <= 65535:
        raise SettingsError(f"{name} must be a port from 1 to 65535, got {value}")
    return value


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    return check_port(_whole(env, name, default), name)


def _whole(env: Mapping[str, str], name: str, default: int, minimum: int = 0) -> int:
    value = _number(env, name, default)
    if value != int(value) or value < minimum:
        raise SettingsError(
            f"{name} must be a whole number of at least {minimum}, got {env[name]!r}"
        )
    return int(value)


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    raw = (env.get(name) or "").strip().lower()
    if not raw:
        return choices[0]
    if raw not in choices:
        raise SettingsError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return raw


def _name(env: Mapping[str, str], name: str, default: str) -> str:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    # A model name goes into a URL path (models/<name>:generateContent): no spaces or slashes.
    if not all(c.isalnum() or c in "-._@" for c in raw):
        raise SettingsError(f"{name} must be a model name such as {default}, got {raw!r}")
    return raw


def _share(env: Mapping[str, str], name: str, default: float) -> float:
    value = _number(env, name, default)
    if value > 1:
        raise SettingsError(f"{name} must be between 0 and 1, got {env[name]!r}")
    return value


def _flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw == "":
        return default
    if raw in ("0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise SettingsError(f"{name} must be true or false, got {raw!r}")


def _url(env: Mapping[str, str], name: str, default: str) -> str:
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    if not raw.startswith(("http://", "https://")):
        raise SettingsError(f"{name} must be an http:// or https:// URL, got {raw!r}")
    return raw.rstrip("/")
