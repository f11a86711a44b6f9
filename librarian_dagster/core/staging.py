"""Per-session intermediate results between the pipeline's stages, as JSON files.

Each stage writes what the next one reads under LIBRARIAN_HOME/staging/<stage>/<session>.json.
Only redacted data is ever staged: the `transcript` stage parses but stages nothing, so the one
unredacted copy of a session stays the transcript Claude Code itself wrote.
Writes are atomic (temporary file + rename): a crashed stage never leaves half a file.
"""

import dataclasses
import json
import os
import re
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from librarian_dagster.core.transcripts import ParseStats, Session, ToolUse, Turn

_SAFE_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")


class StagingError(RuntimeError):
    """A stage's input is missing: the upstream stage has not run for this session."""


class Staging:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, stage: str, key: str) -> Path:
        if not _SAFE_KEY.match(key) or key.startswith("."):
            raise ValueError(f"not a usable session key: {key!r}")
        return self.root / stage / f"{key}.json"

    def write(self, stage: str, key: str, payload: Any) -> Path:
        target = self.path(stage, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(payload, out, ensure_ascii=False, default=_json_default)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    def read(self, stage: str, key: str) -> Any:
        target = self.path(stage, key)
        try:
            with target.open(encoding="utf-8") as src:
                return json.load(src)
        except FileNotFoundError:
            raise StagingError(
                f"no {stage} output for session {key}: materialize the upstream asset first"
            ) from None


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot stage a {type(value).__name__}")


def session_to_json(session: Session) -> dict[str, Any]:
    return dataclasses.asdict(session)


def session_from_json(data: dict[str, Any]) -> Session:
    turns = [
        Turn(
            **{
                **turn,
                "timestamp": _dt(turn.get("timestamp")),
                "tool_uses": tuple(
                    ToolUse(**{**use, "file_paths": tuple(use.get("file_paths") or ())})
                    for use in turn.get("tool_uses") or ()
                ),
            }
        )
        for turn in data.get("turns") or ()
    ]
    known = {f.name for f in dataclasses.fields(ParseStats)}
    stats = ParseStats(**{k: v for k, v in (data.get("stats") or {}).items() if k in known})
    fields = {f.name for f in dataclasses.fields(Session)}
    plain = {k: v for k, v in data.items() if k in fields and k not in ("turns", "stats")}
    for name in ("started_at", "ended_at"):
        plain[name] = _dt(plain.get(name))
    for name in ("versions", "models", "files"):
        if name in plain and plain[name] is not None:
            plain[name] = tuple(plain[name])
    return Session(**plain, turns=turns, stats=stats)


def _dt(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None
