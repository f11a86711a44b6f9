"""What each session offered consolidation, kept by the fingerprint of its files: the watermark
of `library_notes`, so that a run parses and redacts only the sessions new since the last (a
project of 200 sessions: 4 s the first time). A session no longer in the store loses its entry,
so nothing of a forgotten session stays here."""

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from librarian_dagster.core.consolidation.evidence import Evidence, Failure


class EvidenceCache:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, session_id: str) -> Path:
        # A session id names a file here only through its hash: ids come from transcripts.
        return self.folder / f"{hashlib.sha256(session_id.encode()).hexdigest()[:32]}.json"

    def get(self, session_id: str, fingerprint: str) -> Evidence | None:
        try:
            held = json.loads(self._path(session_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if held.get("fingerprint") != fingerprint:
            return None
        return _evidence(held["evidence"])

    def put(self, evidence: Evidence, fingerprint: str) -> None:
        data = asdict(evidence)
        data["started_at"] = evidence.started_at.isoformat() if evidence.started_at else None
        write_json(self._path(evidence.session_id), {"fingerprint": fingerprint, "evidence": data})

    def keep_only(self, session_ids: Iterable[str]) -> int:
        """Drop the entries of every other session; how many were dropped."""
        kept = {self._path(s).name for s in session_ids}
        dropped = 0
        for path in self.folder.glob("*.json") if self.folder.is_dir() else []:
            if path.name not in kept:
                path.unlink(missing_ok=True)
                dropped += 1
        return dropped


def write_json(path: Path, data: object) -> None:
    """`data` as JSON at `path`, whole or not at all: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(data), encoding="utf-8")
    partial.replace(path)


def _evidence(data: dict) -> Evidence:
    started = data["started_at"]
    return Evidence(
        session_id=data["session_id"],
        started_at=datetime.fromisoformat(started) if started else None,
        agent=data["agent"],
        changed=tuple(data["changed"]),
        passed=tuple(data["passed"]),
        failures=tuple(
            Failure(f["command"], tuple(f["lines"]), f["then"], tuple(f["changed"]))
            for f in data["failures"]
        ),
        reverted=data["reverted"],
        asked=tuple(data["asked"]),
    )
