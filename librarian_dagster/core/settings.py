"""One settings object, read from LIBRARIAN_* environment variables.

Everything else takes a `Settings` (or the values in it) as an argument: nothing below this module
reads `os.environ` for its own configuration.
"""

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from librarian_dagster.core.relevance import DEFAULT_THRESHOLD

DEFAULT_SETTLE_SECONDS = 120.0
DEFAULT_MCP_HOST = "127.0.0.1"
DEFAULT_MCP_PORT = 3201
DEFAULT_RECALL_FLOOR = 0.8
DEFAULT_TELEGRAM_BASE_URL = "https://api.telegram.org"
DEFAULT_UI_URL = "http://127.0.0.1:3000"
DEFAULT_GAP_MINUTES = 60.0
DEFAULT_QUIET_HOURS = 24.0


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
    """Recall leaves out results less likely relevant than this (0 to 1; core/relevance.py)."""
    recall_floor: float = DEFAULT_RECALL_FLOOR
    """The recall@5 on the golden questions below which the quality check warns."""
    recency_boost: float = 0.005
    """How much more a session from today weighs in ranking than an old one (store.Boosts)."""
    importance_boost: float = 0.002
    """How much more each point of importance above 3 weighs in ranking (store.Boosts)."""
    mcp_token: str | None = field(default=None, repr=False)
    """A bearer token the recall server's HTTP endpoints accept with the default scope, beside
    the token file's; kept out of repr (and logs)."""
    mcp_tokens: Path | None = None
    """The token file (core/tokens.py); None means `home/tokens.json`."""
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
            telegram_bot_token=env.get("TELEGRAM_BOT_TOKEN") or None,
            telegram_chat_id=env.get("TELEGRAM_CHAT_ID") or None,
            telegram_base_url=_url(env, "LIBRARIAN_TELEGRAM_BASE_URL", DEFAULT_TELEGRAM_BASE_URL),
            notify_digests=_flag(env, "LIBRARIAN_NOTIFY_DIGESTS", default=True),
            gap_minutes=_number(env, "LIBRARIAN_GAP_MINUTES", DEFAULT_GAP_MINUTES),
            quiet_hours=_number(env, "LIBRARIAN_QUIET_HOURS", DEFAULT_QUIET_HOURS),
            ui_url=_url(env, "LIBRARIAN_UI_URL", DEFAULT_UI_URL),
            mcp_tokens=_path(env, "LIBRARIAN_MCP_TOKENS"),
            stdio_private=_flag(env, "LIBRARIAN_STDIO_PRIVATE"),
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
    value = _number(env, name, default)
    if value != int(value):
        raise SettingsError(f"{name} must be a whole number, got {env[name]!r}")
    return check_port(int(value), name)


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
