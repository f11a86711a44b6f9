"""The proposals waiting for a person: each project's last diff that `library_notes` could not
apply on its own (new lines, lines retired or superseded, or no checkout here to write into),
kept under `LIBRARIAN_HOME/library/` for the page and the UI to show."""

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from librarian_dagster.core.consolidation.cache import write_json


@dataclass(frozen=True)
class Waiting:
    project: str
    diff: str
    checkout: str | None
    """Where `librarian library consolidate PROJECT --apply` would write it, if anywhere here."""
    sources: dict[str, list[str]]
    """Each line it proposes -> the sessions it cites, newest first."""


class Pending:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @staticmethod
    def file_name(project: str) -> str:
        """A name for the project's files: readable, and one of its own whatever it holds."""
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", project)[:60]
        return f"{safe}-{hashlib.sha256(project.encode()).hexdigest()[:8]}"

    def _path(self, project: str) -> Path:
        return self.folder / f"{self.file_name(project)}.json"

    def save(
        self, project: str, diff: str, checkout: str | None, sources: dict[str, list[str]]
    ) -> None:
        """Keep `diff` as the project's proposal; an empty one clears it."""
        path = self._path(project)
        if not diff:
            path.unlink(missing_ok=True)
            return
        write_json(
            path, {"project": project, "diff": diff, "checkout": checkout, "sources": sources}
        )

    def all(self) -> list[Waiting]:
        found = []
        for path in sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []:
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                found.append(Waiting(data["project"], data["diff"], data.get("checkout"),
                                     data.get("sources", {})))  # fmt: skip
            except (OSError, ValueError, KeyError):
                continue  # being replaced, or not ours: the next run writes it again
        return sorted(found, key=lambda w: w.project)
