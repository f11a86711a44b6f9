"""One session as `librarian push` sends it: its files under its agent's folder, redacted here.

Every string in a transcript is redacted before it leaves this machine, by the pipeline's own
leak-check (core/redaction/scan.py): a JSON line's string values one by one, so the file stays
the agent's format and the server's reader reads it as it reads a file of its own machine (a
line that is not JSON is redacted as text; the server's reader counts and skips it, as here).
Names (keys) are the agent's own and stay.

An OpenCode session lives in a database that holds every session, written while OpenCode runs: it
is read in one read transaction (no torn copy) and sent as `opencode export` files, the session
and each of its child sessions, which OpenCode's reader takes on the server.
"""

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.opencode.database import is_sqlite, load_database
from librarian_dagster.core.capture.opencode.storage import is_storage_session, load_storage
from librarian_dagster.core.capture.opencode.thread import Thread
from librarian_dagster.core.capture.uploads import StagedFile
from librarian_dagster.core.redaction.scan import redact_many, redact_strings

__all__ = ["Bundle", "content_sha256", "redacted_files", "redacted_json_text"]

OPENCODE = "opencode"
COPILOT = "copilot"


@dataclass(frozen=True)
class Bundle:
    """A session ready to send: its redacted files and what the server records of it."""

    agent: str
    session_id: str
    files: list[StagedFile]
    sha256: str
    redactions: int


def content_sha256(agent: str, session_id: str, files: list[StagedFile]) -> str:
    """What names a session's bytes, on both sides: its agent, id and each file's name and
    bytes, in name order (not mtimes: a file touched but unchanged is the same session)."""
    digest = hashlib.sha256(f"{agent}\0{session_id}\0".encode())
    for file in sorted(files, key=lambda f: f.name):
        digest.update(f"{file.name}\0{len(file.data)}\0".encode())
        digest.update(file.data)
    return digest.hexdigest()


def _redacted_values(values: list[Any]) -> tuple[list[Any], int]:
    """Each JSON value with every string in it redacted (in one batch); and how many secrets."""
    clean, counts = redact_strings(values)
    return clean, sum(counts.values())


def redacted_json_text(text: str, lines: bool) -> tuple[str, int]:
    """A transcript's text with every string redacted: JSON lines (`lines`) one record each, or
    one JSON document. What is not JSON is redacted as text."""
    if not lines:
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError):
            clean, findings = redact_many([text])
            return clean[0], len(findings[0])
        (value,), count = _redacted_values([doc])
        return json.dumps(value, ensure_ascii=False, indent=2), count
    parts = text.split("\n")
    values: list[Any] = []  # each JSON line's value, in order
    raw: list[int] = []  # the lines that are not JSON (nor blank): redacted as text
    for i, line in enumerate(parts):
        if not line.strip():
            continue
        try:
            values.append(json.loads(line))
        except (ValueError, RecursionError):
            raw.append(i)
    clean_values, count = _redacted_values(values)
    raw_clean, raw_found = redact_many([parts[i] for i in raw])
    count += sum(len(f) for f in raw_found)
    by_value, by_raw, raw_lines = iter(clean_values), iter(raw_clean), set(raw)
    out = []
    for i, line in enumerate(parts):
        if not line.strip():
            out.append(line)
        elif i in raw_lines:
            out.append(next(by_raw))
        else:
            out.append(json.dumps(next(by_value), ensure_ascii=False, separators=(",", ":")))
    return "\n".join(out), count


def _name_under(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.name


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def redacted_files(files: SessionFiles, root: Path) -> tuple[list[StagedFile], int]:
    """The session's files, redacted, named by their path under its agent's folder `root`; and
    how many secrets were replaced. Raises OSError for a file that cannot be read now."""
    if files.agent == OPENCODE and files.main is not None and not _is_export(files):
        return _opencode_exports(files)
    staged: list[StagedFile] = []
    count = 0
    for path in files.paths:
        raw = path.read_bytes().decode("utf-8", errors="replace")
        text, found = redacted_json_text(raw, lines=path.suffix != ".json")
        staged.append(StagedFile(_name_under(path, root), text.encode("utf-8"), _mtime(path)))
        count += found
    beside = _beside(files)
    if beside is not None:
        clean, findings = redact_many([beside.read_text(encoding="utf-8", errors="replace")])
        staged.append(StagedFile(_name_under(beside, root), clean[0].encode(), _mtime(beside)))
        count += len(findings[0])
    return staged, count


def _beside(files: SessionFiles) -> Path | None:
    """A file the reader reads beside the session's own: Copilot CLI's `workspace.yaml` (the
    session's name and summary)."""
    main = files.main
    if files.agent != COPILOT or main is None or main.name != "events.jsonl":
        return None
    workspace = main.parent / "workspace.yaml"
    return workspace if workspace.is_file() else None


def _is_export(files: SessionFiles) -> bool:
    main = files.main
    return main is not None and main.suffix == ".json" and not is_storage_session(main)


def _threads(thread: Thread) -> Iterator[Thread]:
    yield thread
    for child in thread.children:
        yield from _threads(child)


def _opencode_exports(files: SessionFiles) -> tuple[list[StagedFile], int]:
    """An OpenCode session from its database (one read transaction) or its `storage/` files,
    as the `opencode export` files of it and of each child session."""
    main = files.main
    assert main is not None
    if is_sqlite(main):
        thread, _, _ = load_database(main, files.session_id)
    else:
        thread, _, _ = load_storage(files)
    if thread is None:
        raise OSError(f"OpenCode session {files.session_id} is gone from {main}")
    mtime = max(_mtime(p) for p in files.paths)
    docs = [{"info": t.info, "messages": t.messages} for t in _threads(thread)]
    clean, count = _redacted_values(docs)
    staged = [
        StagedFile(
            f"{doc['info'].get('id', files.session_id)}.json",
            json.dumps(doc, ensure_ascii=False, indent=2).encode("utf-8"),
            mtime,
        )
        for doc in clean
    ]
    return staged, count
