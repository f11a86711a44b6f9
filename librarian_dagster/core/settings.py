"""One settings object, read from LIBRARIAN_* environment variables.

Everything else takes a `Settings` (or the values in it) as an argument: nothing below this module
reads `os.environ` for its own configuration.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from librarian_dagster.core.relevance import DEFAULT_THRESHOLD

DEFAULT_SETTLE_SECONDS = 120.0
DEFAULT_MCP_HOST = "127.0.0.1"
DEFAULT_MCP_PORT = 3201
DEFAULT_RECALL_FLOOR = 0.8


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
    exclude: tuple[str, ...] = ()
    """Globs over project folder names or transcript paths never ingested (core/mirror.py)."""
    mcp_token: str | None = field(default=None, repr=False)
    """A bearer token the recall server's HTTP endpoints demand; kept out of repr (and logs)."""

    @property
    def pgdata(self) -> Path:
        return self.home / "pgdata"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

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
            mcp_port=int(_number(env, "LIBRARIAN_MCP_PORT", DEFAULT_MCP_PORT)),
            recall_threshold=_share(env, "LIBRARIAN_RECALL_THRESHOLD", DEFAULT_THRESHOLD),
            recall_floor=_share(env, "LIBRARIAN_RECALL_FLOOR", DEFAULT_RECALL_FLOOR),
            recency_boost=_share(env, "LIBRARIAN_RECENCY_BOOST", 0.005),
            importance_boost=_share(env, "LIBRARIAN_IMPORTANCE_BOOST", 0.002),
            mcp_token=env.get("LIBRARIAN_MCP_TOKEN") or None,
            exclude=tuple(
                g.strip() for g in (env.get("LIBRARIAN_EXCLUDE") or "").split(",") if g.strip()
            ),
        )


def _number(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    if value < 0:
        raise SettingsError(f"{name} must not be negative, got {raw!r}")
    return value


def _share(env: Mapping[str, str], name: str, default: float) -> float:
    value = _number(env, name, default)
    if value > 1:
        raise SettingsError(f"{name} must be between 0 and 1, got {env[name]!r}")
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise SettingsError(f"{name} must be true or false, got {raw!r}")
