"""Sessions pushed from other machines (`librarian push`), staged where the sensor reads them.

The recall server receives a session whole, in one request (mcp_server/push_api.py), and stages
its files under `LIBRARIAN_HOME/uploads/`, laid out as its agent lays them out under its own
folder, so that the agent's reader finds it as it finds a session on this machine:

    uploads/versions/<agent>/<session>.<sha>/...   one folder per pushed version, written whole
    uploads/sessions/<agent>/<session>             a symlink to the newest version

A version is written beside the others and then named by the symlink, which `os.replace` swaps
in one step: a reader sees the old session or the new one, never half of either; a push cut
anywhere before the swap (the server killed) leaves the old one staged and what it wrote beside
it, which the next push of that session clears. The session's path through the symlink stays the
same across versions, so the fingerprint (sizes and mtimes, core/capture/files.py) tells a grown
session from an unchanged one, as it does on this machine.

Standard library only: the recall server imports this without dagster.
"""

import glob
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from librarian_dagster.core.capture.files import SessionFiles
from librarian_dagster.core.capture.readers import READERS, label
from librarian_dagster.core.capture.skips import valid_session_id

__all__ = [
    "StagedFile",
    "UploadRefused",
    "check_file_name",
    "check_session_id",
    "stage",
    "staged_sessions",
    "staged_version",
    "unstage",
]

SESSIONS = "sessions"
VERSIONS = "versions"
_MAX_NAME = 512
_MAX_DEPTH = 8
_SHA = re.compile(r"[0-9a-f]{64}")
_INCOMING = ".incoming-"
"""A version being written: `.incoming-<session>~<random>` (`~` is in no session id)."""


class UploadRefused(ValueError):
    """A pushed session that is not staged, with the HTTP status that says why and a message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class StagedFile:
    """One file of a pushed session: its path under the agent's folder, its bytes, its mtime
    on the machine it came from."""

    name: str
    data: bytes
    mtime: float


def check_session_id(session_id: str) -> str:
    if not valid_session_id(session_id):  # as every command that names a session takes one
        raise UploadRefused(400, "a session id is 1 to 200 letters, digits, '.', '_' or '-'")
    return session_id


def check_file_name(name: str) -> PurePosixPath:
    """A file's path under its agent's folder as a push names it: relative, downward only."""
    path = PurePosixPath(name)
    if (
        not name
        or len(name) > _MAX_NAME
        or "\\" in name
        or "\0" in name
        or path.is_absolute()
        or len(path.parts) > _MAX_DEPTH
        or any(part in ("", ".", "..") for part in name.split("/"))
    ):
        raise UploadRefused(400, f"a file name must be a relative path inside its folder: {name!r}")
    return path


def _link(root: Path, agent: str, session_id: str) -> Path:
    return root / SESSIONS / agent / session_id


def staged_version(root: Path, agent: str, session_id: str) -> str | None:
    """The SHA-256 of the bytes staged for this session, or None when none are."""
    try:
        target = os.readlink(_link(root, agent, session_id))
    except OSError:
        return None
    sha = target.rsplit(".", 1)[-1]
    return sha if _SHA.fullmatch(sha) else None


def stage(
    root: Path, agent: str, session_id: str, files: list[StagedFile], sha256: str
) -> SessionFiles:
    """Stage a pushed session's files as the newest version of it (its reader must find exactly
    this session in them, else UploadRefused 422), and return it as the sensor will find it.
    `sha256` names the version: the caller has checked it against the bytes."""
    reader = READERS.get(agent)
    if reader is None:
        raise UploadRefused(400, f"unknown agent {agent!r}: one of {', '.join(READERS)}")
    check_session_id(session_id)
    names = [check_file_name(f.name) for f in files]
    if not files or len(set(names)) != len(names):
        raise UploadRefused(400, "a session is one or more files, each named once")
    versions = root / VERSIONS / agent
    versions.mkdir(parents=True, exist_ok=True)
    # The caller holds this session's claim (core/store/pushes.py): no other push of it is
    # writing now, so what is here of it beside the staged version a killed server left.
    _clear(versions, session_id, keep=staged_version(root, agent, session_id))
    incoming = Path(tempfile.mkdtemp(dir=versions, prefix=f"{_INCOMING}{session_id}~"))
    try:
        _write(incoming, names, files)
        found = [s for s in reader.discover(incoming) if s.session_id == session_id]
        if len(found) != 1:
            raise UploadRefused(
                422, f"not a {label(agent)} transcript of session {session_id}: nothing staged"
            )
        version = versions / f"{session_id}.{sha256}"
        shutil.rmtree(version, ignore_errors=True)  # a version a cut push left: written again
        os.rename(incoming, version)
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    _point(_link(root, agent, session_id), Path("..", "..", VERSIONS, agent, version.name))
    _clear(versions, session_id, keep=sha256)
    return _found_at(_link(root, agent, session_id), agent, session_id)


def _clear(versions: Path, session_id: str, keep: str | None) -> None:
    """Remove this session's versions but `keep`, and any folder of it left half-written."""
    for path in versions.iterdir():
        name, _, sha = path.name.rpartition(".")
        half = path.name.startswith(f"{_INCOMING}{session_id}~")
        if half or (name == session_id and _SHA.fullmatch(sha) and sha != keep):
            shutil.rmtree(path, ignore_errors=True)


def _write(folder: Path, names: list[PurePosixPath], files: list[StagedFile]) -> None:
    for name, file in zip(names, files, strict=True):
        path = folder.joinpath(*name.parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            out.write(file.data)
            out.flush()
            os.fsync(out.fileno())
        os.utime(path, (file.mtime, file.mtime))


def _point(link: Path, target: Path) -> None:
    """Make `link` a symlink to `target`, replacing what it named in one step."""
    link.parent.mkdir(parents=True, exist_ok=True)
    # One a server killed between the two steps left: no other push of this session is here now
    # (the caller holds its claim), so it is a dead one's.
    dead = re.compile(rf"\.{re.escape(link.name)}\.[0-9a-f]{{16}}")
    for left in link.parent.glob(f".{glob.escape(link.name)}.*"):
        if dead.fullmatch(left.name):
            left.unlink(missing_ok=True)
    # A random name: replicas of the server share the folder, and each may be process 1.
    temporary = link.with_name(f".{link.name}.{secrets.token_hex(8)}")
    os.symlink(target, temporary)
    os.replace(temporary, link)


def _found_at(link: Path, agent: str, session_id: str) -> SessionFiles:
    found = [s for s in READERS[agent].discover(link) if s.session_id == session_id]
    if not found:
        raise UploadRefused(500, f"session {session_id} staged but not found again")
    return found[0]


def staged_sessions(
    root: Path, recorded: Mapping[str, str | None] | None = None
) -> list[SessionFiles]:
    """Every session staged under `root` (LIBRARIAN_HOME/uploads), through its symlink; with
    `recorded` ({session id: SHA-256 the server recorded}), only those staged as recorded: a
    server killed between staging a push and recording it (its person among what it records)
    leaves a session that waits for the laptop's next push rather than one of no one's."""
    sessions: list[SessionFiles] = []
    top = root / SESSIONS
    if not top.is_dir():
        return sessions
    for agent_folder in sorted(top.iterdir()):
        reader = READERS.get(agent_folder.name)
        if reader is None or not agent_folder.is_dir():
            continue
        for link in sorted(agent_folder.iterdir()):
            if link.name.startswith(".") or not link.is_dir():
                continue
            if recorded is not None:
                sha = recorded.get(link.name)
                if sha is None or sha != staged_version(root, agent_folder.name, link.name):
                    continue
            sessions.extend(s for s in reader.discover(link) if s.session_id == link.name)
    return sessions


def unstage(root: Path, sessions: Mapping[str, str]) -> None:
    """Take these staged sessions ({session id: agent}) away, every version of each."""
    for session_id, agent in sessions.items():
        _link(root, agent, session_id).unlink(missing_ok=True)
        versions = root / VERSIONS / agent
        if versions.is_dir():
            _clear(versions, session_id, keep=None)
