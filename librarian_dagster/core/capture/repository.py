"""The repository a session worked in, named by its remote: one project across machines and people.

Each person checks a repository out under a folder of their own (`cli`, `20260205-cli`, a
worktree named for its branch); its remote is the same everywhere. `librarian push` reads it where
the session ran, at push time, and the server names the session's project by it.

A remote URL is kept without its scheme, user, password or port (`https://x:tok@github.com/a/b.git`
-> `github.com/a/b`): no credential in it ever leaves this machine.

Standard library only.
"""

import os
import re
import subprocess

from librarian_dagster.core.capture.session import Session

__all__ = ["attribute", "git_output", "normal_remote", "project_of_remote", "remote_of"]

_SCP_LIKE = re.compile(r"^(?:[^@/]+@)?([^:/]+):(?!//)(.+)$")
_NORMAL = re.compile(r"^[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+/[^/].*$")
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://(?:[^@/]*@)?([^/:]+)(?::\d+)?(/.*)?$")


def normal_remote(url: str) -> str | None:
    """`git@github.com:acme/cli.git`, `https://user:pw@github.com/acme/cli` and
    `ssh://git@github.com:22/acme/cli.git` -> `github.com/acme/cli`; a local path's last two
    folders. None for nothing usable."""
    url = url.strip()
    if not url:
        return None
    match = _URL.match(url)
    if match:
        host, path = match.group(1), match.group(2) or ""
    elif "://" not in url and (scp := _SCP_LIKE.match(url)) and not os.path.isabs(url):
        host, path = scp.group(1), scp.group(2)
    elif _NORMAL.match(url):  # already `host/owner/name`: as it is
        host, _, path = url.partition("/")
    else:
        host, path = "", url
    parts = [p for p in re.split(r"[\\/]+", path) if p and p not in (".", "..")]
    if parts:
        parts[-1] = parts[-1].removesuffix(".git")
    parts = [p for p in parts if p]
    if not parts:
        return None
    if not host:
        parts = parts[-2:]
    return "/".join([host.lower(), *parts] if host else parts)


def project_of_remote(remote: str) -> str:
    """The project a repository's sessions are of: its name (`github.com/acme/cli` -> `cli`)."""
    return remote.rstrip("/").rsplit("/", 1)[-1]


def git_output(folder: str, args: list[str], timeout: float) -> str | None:
    """What `git -C folder ARGS` prints, or None where git cannot say (no such folder, no
    repository, no git, or not within `timeout`). Never raises."""
    if not folder or not os.path.isdir(folder):
        return None
    try:
        done = subprocess.run(
            ["git", "-C", folder, *args],
            capture_output=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


def remote_of(cwd: str | None, timeout: float = 2.0) -> str | None:
    """The remote of the repository `cwd` is in (`origin`, else the first one), normalised;
    None where there is no folder, no repository, no remote or no git."""
    said = git_output(cwd, ["remote", "-v"], timeout) if cwd else None
    if said is None:
        return None
    remotes: dict[str, str] = {}
    for line in said.splitlines():
        fields = line.split()
        if len(fields) >= 2:
            remotes.setdefault(fields[0], fields[1])
    url = remotes.get("origin") or next(iter(remotes.values()), None)
    return normal_remote(url) if url else None


def attribute(session: Session, person: str, remote: str | None, private: bool) -> Session:
    """The session as its person's, of the repository its remote names (its project that
    repository's name, whatever the folder was called), private or not."""
    session.person = person
    session.repository = remote
    session.private = private
    if remote:
        session.project = project_of_remote(remote)
    return session
