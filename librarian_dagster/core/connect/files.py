"""How `librarian connect` changes another program's configuration files, and takes the change
back: never a setting of the user's overwritten, every change shown, the first content of each
file kept aside, so that `--undo` gives back the very bytes it found.

A `Target` is one file and the two things Librarian does to it: `add` its entries to the file's
content (None for a file not there yet) and `remove` them again. Applying a target records, in a
manifest under LIBRARIAN_HOME/connect/, the file's backup (or that there was none) and a hash of
what was written. Undoing restores the backup when the file is still exactly what was written,
and otherwise takes Librarian's entries out of what the user has made of it since.

Standard library only.
"""

import contextlib
import difflib
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Applied",
    "ConfigError",
    "Target",
    "apply",
    "diff",
    "json_add",
    "json_config",
    "json_remove",
    "json_target",
    "pending",
    "sha_of",
    "text_block_add",
    "text_block_remove",
    "undo",
]

Content = bytes | None
"""A file's bytes; None for a file that is not there."""


class ConfigError(ValueError):
    """A configuration file Librarian will not change (not the format it should be); the
    message names the file and why."""


@dataclass(frozen=True)
class Target:
    path: Path
    add: Callable[[Content], bytes]
    """The file's content with Librarian's entries in it (the same content when they are)."""
    remove: Callable[[bytes], Content]
    """The content without Librarian's entries; None when nothing else is left (no file)."""
    notes: list[str] = field(default_factory=list, compare=False)
    """What `add` left as the user had it (a setting of theirs it would have overwritten)."""


@dataclass(frozen=True)
class Applied:
    path: Path
    before: Content
    after: Content
    how: str
    """"added", "unchanged", "restored" (the backup), "taken out" (entries removed)."""


def _read(path: Path) -> Content:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha_of(text: str) -> str:
    return _sha(text.encode("utf-8"))


def _write(path: Path, data: Content) -> None:
    """Whole or not at all (a rename), keeping the file's permissions."""
    if data is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.librarian-{os.getpid()}")
    temporary.write_bytes(data)
    with contextlib.suppress(FileNotFoundError):  # a new file keeps the umask's mode
        os.chmod(temporary, path.stat().st_mode & 0o7777)
    os.replace(temporary, path)


def diff(path: Path, before: Content, after: Content) -> str:
    """A unified diff of the change, for people to read before and after it is made."""
    old = (before or b"").decode("utf-8", "replace").splitlines(keepends=True)
    new = (after or b"").decode("utf-8", "replace").splitlines(keepends=True)
    name = str(path)
    lines = difflib.unified_diff(
        old, new, "/dev/null" if before is None else name, "/dev/null" if after is None else name
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


class _Manifest:
    """{file: {"backup": path or None, "written": sha256}} for one agent's connection."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.path = folder / f"{name}.json"
        try:
            self.entries: dict[str, dict[str, Any]] = json.loads(self.path.read_text("utf-8"))
        except FileNotFoundError:
            self.entries = {}

    def save(self) -> None:
        if self.entries:
            _write(self.path, json.dumps(self.entries, indent=2, sort_keys=True).encode() + b"\n")
        else:
            self.path.unlink(missing_ok=True)

    def backup(self, path: Path, content: Content) -> str | None:
        if content is None:
            return None
        copy = self.folder / "backups" / f"{_sha(str(path).encode())[:16]}-{path.name}"
        _write(copy, content)
        return str(copy)


def pending(targets: Sequence[Target]) -> list[Applied]:
    """What applying would do, file by file, changing nothing."""
    out = []
    for target in targets:
        before = _read(target.path)
        after = target.add(before)
        out.append(Applied(target.path, before, after, "unchanged" if after == before else "added"))
    return out


def apply(targets: Sequence[Target], folder: Path, name: str) -> list[Applied]:
    """Add Librarian's entries to each file; the first time a file is changed, its content is
    kept aside. A second run finds them there and changes nothing."""
    manifest = _Manifest(folder, name)
    done = pending(targets)
    for change in done:
        if change.how == "unchanged":
            continue
        key = str(change.path)
        if key not in manifest.entries:
            manifest.entries[key] = {"backup": manifest.backup(change.path, change.before)}
        _write(change.path, change.after)
        manifest.entries[key]["written"] = _sha(change.after or b"")
        manifest.save()
    return done


def undo(targets: Sequence[Target], folder: Path, name: str) -> list[Applied]:
    """Take Librarian's entries out of every file it changed: the backup, byte for byte, where
    the file is still what was written; else the entries removed from what is there now."""
    manifest = _Manifest(folder, name)
    by_path = {str(t.path): t for t in targets}
    done: list[Applied] = []
    for key in sorted(set(manifest.entries) | set(by_path)):
        path, entry = Path(key), manifest.entries.get(key)
        before = _read(path)
        if before is None:
            manifest.entries.pop(key, None)
            continue
        if entry is not None and _sha(before) == entry.get("written"):
            backup = entry.get("backup")
            after = None if backup is None else Path(backup).read_bytes()
            how = "restored"
        elif key in by_path:
            after, how = by_path[key].remove(before), "taken out"
        else:
            continue
        if after != before:
            _write(path, after)
            done.append(Applied(path, before, after, how))
        if entry is not None and entry.get("backup"):
            Path(entry["backup"]).unlink(missing_ok=True)
        manifest.entries.pop(key, None)
    manifest.save()
    return done


# JSON files: entries are added where the user has none, and removed only where they are still
# exactly Librarian's.


def _load_json(path: Path, content: Content) -> dict[str, Any]:
    if content is None or not content.strip():
        return {}
    try:
        data = json.loads(content)
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON ({exc}); change nothing until it is") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a JSON object; change nothing until it is")
    return data


def _dump_json(data: dict[str, Any]) -> bytes:
    return json.dumps(data, indent=2, ensure_ascii=False).encode("utf-8") + b"\n"


Entry = tuple[tuple[str, ...], Any]
"""A key path and the value Librarian puts there; a path ending in "[]" appends to a list."""


def json_add(path: Path, content: Content, entries: Sequence[Entry], notes: list[str]) -> bytes:
    data = _load_json(path, content)
    changed = False
    for keys, value in entries:
        *parents, last = keys
        node = data
        for key in parents:
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                notes.append(f"{path}: {'.'.join(keys)} left as it is ({key} is not an object)")
                break
            node = child
        else:
            if last == "[]":
                raise ConfigError("a list is appended to through its own key: (..., key, '[]')")
            if last.endswith("[]"):
                items = node.setdefault(last[:-2], [])
                if not isinstance(items, list):
                    notes.append(f"{path}: {'.'.join(keys)} left as it is (not a list)")
                elif value not in items:
                    items.append(value)
                    changed = True
            elif last not in node:
                node[last] = value
                changed = True
            elif node[last] != value:
                notes.append(f"{path}: {'.'.join(keys)} is yours, left as it is")
    if not changed and content is not None:
        return content
    return _dump_json(data)


def json_config(path: Path, unread: str) -> tuple[dict[str, Any], str | None]:
    """What an agent's JSON configuration file holds, as `--check` reads it ({} for a value that
    is no object), and why it cannot say more: the file is not there, or not JSON (`unread`:
    what that means for the agent)."""
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}, f"not connected: there is no {path}"
    except ValueError:
        return {}, f"{path} is not JSON: {unread}"
    return (data if isinstance(data, dict) else {}), None


def json_target(path: Path, entries: Sequence[Entry]) -> Target:
    """A JSON file Librarian adds `entries` to, and takes them out of; its notes are those of the
    latest `add`."""
    notes: list[str] = []

    def add(content: Content) -> bytes:
        notes.clear()
        return json_add(path, content, entries, notes)

    return Target(path, add, lambda content: json_remove(path, content, entries), notes)


def json_remove(path: Path, content: bytes, entries: Sequence[Entry]) -> Content:
    data = _load_json(path, content)
    for keys, value in entries:
        *parents, last = keys
        trail, node = [], data
        for key in parents:
            child = node.get(key) if isinstance(node, dict) else None
            if not isinstance(child, dict):
                break
            trail.append((node, key))
            node = child
        else:
            if last.endswith("[]"):
                items = node.get(last[:-2])
                if isinstance(items, list) and value in items:
                    items.remove(value)
                    if not items:
                        del node[last[:-2]]
            elif node.get(last) == value:
                del node[last]
            for parent, key in reversed(trail):  # containers left empty by the removal
                if parent[key] == {}:
                    del parent[key]
    return _dump_json(data) if data else None


# Text files of another format (TOML): Librarian's lines are one block between two marker lines,
# added at the end and taken out whole.

BLOCK_START = "# >>> librarian connect: added by `librarian connect`; `--undo` takes it out"
BLOCK_END = "# <<< librarian connect"


def _without_block(text: str) -> str:
    start = text.find(BLOCK_START)
    if start < 0:
        return text
    end = text.find(BLOCK_END, start)
    end = len(text) if end < 0 else end + len(BLOCK_END)
    if text[end : end + 1] == "\n":
        end += 1
    head = text[:start]
    if head.endswith("\n\n"):
        head = head[:-1]
    return head + text[end:]


def text_block_add(content: Content, lines: Sequence[str]) -> bytes:
    text = (content or b"").decode("utf-8")
    rest = _without_block(text)
    if not lines:
        return rest.encode("utf-8") if rest != text else (content or b"")
    block = "\n".join([BLOCK_START, *lines, BLOCK_END]) + "\n"
    if rest and not rest.endswith("\n"):
        rest += "\n"
    added = (rest + ("\n" if rest else "") + block).encode("utf-8")
    return content if content is not None and added == content else added


def text_block_remove(content: bytes) -> Content:
    rest = _without_block(content.decode("utf-8"))
    return rest.encode("utf-8") if rest.strip() else None
