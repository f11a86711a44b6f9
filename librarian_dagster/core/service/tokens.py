"""The recall server's bearer tokens: a small JSON file of salted hashes and their scopes.

A token is `lbr_` + 32 random bytes (urlsafe base64), shown once when it is made; the file keeps
only a per-token random salt and SHA-256(salt + token), so reading the file does not let anyone
in. A slow password hash (scrypt, argon2) buys nothing here: it slows the guessing of a secret a
person chose, and nobody can guess 256 random bits however fast the hash is; a fast one keeps the
check to microseconds per request (docs/decisions/0016).

Pure and dagster-free: the `librarian token` commands write the file, the MCP server reads it.
"""

import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

READ = "read"
"""The default scope: every memory outside the `private` domain."""
PRIVATE = "private"
"""Also the `private` domain."""
FORGET = "forget"
"""Also forgetting sessions from the recall server's page (and so the private domain: what is
to be taken out must first be seen)."""
SCOPES = (READ, PRIVATE, FORGET)

TOKEN_PREFIX = "lbr_"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A token's, a person's or a machine's name."""
_FORMAT = 1


class TokenFileError(ValueError):
    """The token file cannot be read or a request on it is wrong; the message says which."""


@dataclass(frozen=True)
class TokenEntry:
    name: str
    scopes: tuple[str, ...]
    created: datetime
    salt: bytes
    digest: bytes
    person: str | None = None
    """Whose token it is (`--person`): the person a session it pushes is of, and whose
    private sessions it reads. None: a token of the server's own person."""

    def matches(self, token: str) -> bool:
        # compare_digest: the time taken does not tell how close a guess came.
        return hmac.compare_digest(_hash(self.salt, token), self.digest)

    def to_json(self) -> dict[str, Any]:
        entry = {
            "name": self.name,
            "scopes": list(self.scopes),
            "created": self.created.isoformat(timespec="seconds"),
            "salt": self.salt.hex(),
            "sha256": self.digest.hex(),
        }
        if self.person is not None:
            entry["person"] = self.person
        return entry


def _hash(salt: bytes, token: str) -> bytes:
    return hashlib.sha256(salt + token.encode("utf-8")).digest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def scopes_for(scope: str | None) -> tuple[str, ...]:
    """The scopes a token made with `--scope` gets: `read` always, `private` and `forget` on
    request (`forget` with `private`)."""
    if scope is None or scope == READ:
        return (READ,)
    if scope == PRIVATE:
        return (READ, PRIVATE)
    if scope == FORGET:
        return (READ, PRIVATE, FORGET)
    raise TokenFileError(f"unknown scope {scope!r}: use one of {', '.join(SCOPES)}")


def load(path: Path) -> list[TokenEntry]:
    """The tokens in the file; a missing file is no tokens. Raises TokenFileError if unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise TokenFileError(f"cannot read the token file {path}: {exc.strerror}") from None
    try:
        doc = json.loads(text)
        entries = [
            TokenEntry(
                name=str(t["name"]),
                scopes=tuple(str(s) for s in t["scopes"]),
                created=datetime.fromisoformat(t["created"]),
                salt=bytes.fromhex(t["salt"]),
                digest=bytes.fromhex(t["sha256"]),
                person=str(t["person"]) if t.get("person") is not None else None,
            )
            for t in doc["tokens"]
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise TokenFileError(f"{path} is not a Librarian token file ({exc})") from None
    return entries


def save(path: Path, entries: Sequence[TokenEntry]) -> None:
    """Write the file atomically, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": _FORMAT, "tokens": [e.to_json() for e in entries]}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tokens-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_name(name: str, what: str = "token name") -> str:
    """`name` when it is 1 to 64 letters, digits, '.', '_' or '-' (a token's, a person's, a
    machine's); else TokenFileError saying so."""
    if not NAME.fullmatch(name):
        raise TokenFileError(
            f"bad {what} {name!r}: 1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def add(
    path: Path, name: str, scope: str | None = None, person: str | None = None
) -> tuple[str, TokenEntry]:
    """Make a token called `name`, of `person` (None: of the server's own person); returns it
    (the only time it exists in the clear) and its entry. A name already in use is an error:
    revoke it first."""
    check_name(name)
    if person is not None:
        check_name(person, "person")
    scopes = scopes_for(scope)
    entries = load(path)
    if any(e.name == name for e in entries):
        raise TokenFileError(f"a token named {name!r} exists: revoke it first")
    token = new_token()
    salt = secrets.token_bytes(16)
    entry = TokenEntry(name, scopes, datetime.now(UTC), salt, _hash(salt, token), person)
    save(path, [*entries, entry])
    return token, entry


def revoke(path: Path, name: str) -> None:
    entries = load(path)
    kept = [e for e in entries if e.name != name]
    if len(kept) == len(entries):
        raise TokenFileError(f"no token named {name!r}")
    save(path, kept)


def find(entries: Sequence[TokenEntry], token: str) -> TokenEntry | None:
    """The entry a presented token belongs to, or None. Every entry is compared, match or not,
    so the time taken does not say which entry (or whether any) came close."""
    found: TokenEntry | None = None
    for entry in entries:
        if entry.matches(token) and found is None:
            found = entry
    return found


class TokenFile:
    """The token file as the server sees it: read again whenever it changes on disk, so a
    `librarian token revoke` takes effect on the next request, without a restart."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._entries: list[TokenEntry] = []
        self.entries()  # a broken file is an error at start, not at the first request

    def entries(self) -> list[TokenEntry]:
        try:
            st = self.path.stat()
            seen = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            seen = None
        if seen != self._seen:
            self._entries = load(self.path) if seen is not None else []
            self._seen = seen
        return self._entries

    def find(self, token: str) -> TokenEntry | None:
        return find(self.entries(), token)
