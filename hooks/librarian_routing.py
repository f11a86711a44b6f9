"""Stop-hook logic: route tagged scratch blocks into the library and sync Claude's auto-memory.

Standard library only. Safety rules, in order of importance:

1. Nothing is written outside the library: tag paths are relative, have no `..`, and must still
   resolve inside the library after symlinks; note files are never symlinks.
2. Nothing is lost: a block leaves `.scratch.md` only after its append has been flushed to disk.
3. Nothing is duplicated: every appended entry carries a content-hash marker; a block whose hash is
   already in its target (a crash between append and scratch rewrite) is dropped from scratch
   without a second append. A file lock serialises two sessions' Stop hooks on one library.
"""

import hashlib
import os
import re
import time

import librarian_hooklib as lib

LOCK_NAME = ".librarian.lock"
LOCK_TIMEOUT_S = 20.0
MARKER = "<!-- librarian id={id} {origin} -->"
MARKER_ID_RE = re.compile(r"<!-- librarian id=([0-9a-f]{16})\b")
HEADER_RE = re.compile(
    r"^##\s*\[\s*TAG\s*:\s*(?P<path>[^,\]]*?)\s*(?:,\s*type\s*:\s*(?P<type>[^\]]*?)\s*)?\]\s*$",
    re.IGNORECASE,
)
# A block ends at the next level-1 or level-2 heading; deeper headings belong to the block.
BLOCK_END_RE = re.compile(r"^#{1,2}(\s|\[|$)")
TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
DRIVE_RE = re.compile(r"^[A-Za-z]:")
AUTO_MEMORY_TARGETS = {"feedback": "patterns", "project": "product", "reference": "tech"}
AUTO_MEMORY_WINDOW_S = 2 * 3600

# ---------------------------------------------------------------------------------------------
# File lock: fcntl on Linux/macOS, msvcrt on Windows, picked once at import time.
if os.name == "nt":
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            return True
        except OSError:
            return False

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


class LibraryLock:
    """Exclusive lock on `<library>/.librarian.lock`; raises TimeoutError rather than hang."""

    def __init__(self, library: str, timeout: float = LOCK_TIMEOUT_S):
        self.path = os.path.join(library, LOCK_NAME)
        self.timeout = timeout
        self.fd = -1

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout
        while not _try_lock(self.fd):
            if time.monotonic() > deadline:
                os.close(self.fd)
                raise TimeoutError("library lock busy")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        try:
            _unlock(self.fd)
        finally:
            os.close(self.fd)


# ---------------------------------------------------------------------------------------------
# Paths


class InvalidBlock(ValueError):
    pass


def _inside(base_real: str, candidate: str) -> bool:
    real = os.path.realpath(candidate)
    try:
        return os.path.commonpath([base_real, real]) == base_real
    except ValueError:  # different drives on Windows
        return False


def resolve_target(library: str, tag_path: str, type_name: str):
    """Return (absolute note path, label) for a tag, or raise InvalidBlock with the reason."""
    name = type_name.strip().strip("`'\"")
    if name.lower().endswith(".md"):
        name = name[:-3]
    if not TYPE_RE.match(name):
        raise InvalidBlock(f"type {type_name!r} is not a plain name")
    raw = tag_path.strip().strip("`'\"")
    if not raw:
        raise InvalidBlock("empty path")
    if raw.startswith(("/", "\\", "~")) or DRIVE_RE.match(raw):
        raise InvalidBlock(f"absolute path {raw!r}")
    parts = [p for p in re.split(r"[\\/]+", raw) if p not in ("", ".")]
    if parts in ([], ["global"]):
        parts = []
    if ".." in parts:
        raise InvalidBlock(f"'..' in path {raw!r}")
    if any("\0" in p or ":" in p for p in parts):
        raise InvalidBlock(f"unsafe characters in path {raw!r}")
    folder = os.path.join(library, *parts)
    note = os.path.join(folder, name + ".md")
    base_real = os.path.realpath(library)
    if not _inside(base_real, folder):
        raise InvalidBlock(f"path {raw!r} leaves the library through a symlink")
    if os.path.islink(note):
        raise InvalidBlock(f"note {'/'.join([*parts, name + '.md'])} is a symlink")
    return note, "/".join(parts) or "global"


def _title(name: str, label: str) -> str:
    return f"# {name.replace('-', ' ').replace('_', ' ').capitalize()}: {label}\n"


def _append_entry(library: str, note: str, label: str, entry: str) -> None:
    """Append and fsync; re-check containment after creating folders (they may have raced)."""
    folder = os.path.dirname(note)
    os.makedirs(folder, exist_ok=True)
    if not _inside(os.path.realpath(library), folder):
        raise InvalidBlock("folder left the library after it was created")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(note, flags, 0o644)
    with open(fd, "a", encoding="utf-8", newline="\n") as fh:
        if os.fstat(fd).st_size == 0:
            name = os.path.basename(note)[:-3]
            fh.write(_title(name, label))
        fh.write(entry)
        fh.flush()
        os.fsync(fd)


def _existing_ids(note: str) -> set:
    try:
        with open(note, encoding="utf-8", errors="replace") as fh:
            return set(MARKER_ID_RE.findall(fh.read()))
    except FileNotFoundError:
        return set()


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "replace"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def _normalise(body: str) -> str:
    return "\n".join(line.rstrip() for line in body.strip("\n").splitlines()).strip()


# ---------------------------------------------------------------------------------------------
# Scratch routing


def parse_blocks(text: str):
    """Split scratch text into [(start_line, end_line, match, body)] for each `## [TAG: ...]`."""
    lines = text.splitlines(keepends=True)
    blocks = []
    i = 0
    while i < len(lines):
        m = HEADER_RE.match(lines[i].rstrip("\r\n"))
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not BLOCK_END_RE.match(lines[j]):
            j += 1
        blocks.append((i, j, m, "".join(lines[i + 1 : j])))
        i = j
    return lines, blocks


def _atomic_write(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def route_scratch(library: str) -> dict:
    stats = {"routed": 0, "duplicates": 0, "kept": 0, "invalid": []}
    scratch = os.path.join(library, lib.SCRATCH_NAME)
    try:
        with open(scratch, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except FileNotFoundError:
        return stats
    lines, blocks = parse_blocks(text)
    done = []  # (start, end) of blocks now safely in the library
    date = time.strftime("%Y-%m-%d", time.gmtime())
    for start, end, m, body in blocks:
        type_name = m.group("type")
        content = _normalise(body)
        if not type_name or not content:
            stats["kept"] += 1
            continue
        try:
            note, label = resolve_target(library, m.group("path"), type_name)
            entry_id = _digest("scratch", label, os.path.basename(note), content)
            if entry_id in _existing_ids(note):
                stats["duplicates"] += 1
            else:
                marker = MARKER.format(id=entry_id, origin=f"routed={date}")
                _append_entry(library, note, label, f"\n{marker}\n{content}\n")
                stats["routed"] += 1
        except InvalidBlock as exc:
            stats["invalid"].append(f"line {start + 1}: {exc}")
            continue
        except OSError as exc:
            # This block's note cannot be written (a name too long, a file where a folder
            # should be): it stays in scratch, and the other blocks are still filed.
            stats["invalid"].append(f"line {start + 1}: cannot write its note ({exc.strerror})")
            continue
        done.append((start, end))
    if done:
        _rewrite_scratch(scratch, text, lines, done)
    return stats


def _rewrite_scratch(scratch: str, parsed_text: str, lines: list, done: list) -> None:
    """Remove routed blocks from scratch, keeping anything written to it since we read it.

    The agent appends to scratch with its own tools, which do not take our lock; re-reading just
    before the rename keeps the window in which such an append could be lost to microseconds.
    """
    routed_raw = ["".join(lines[s:e]) for s, e in done]
    with open(scratch, encoding="utf-8", newline="") as fh:
        current = fh.read()
    if current == parsed_text:
        drop = set()
        for s, e in done:
            drop.update(range(s, e))
        remaining = "".join(line for k, line in enumerate(lines) if k not in drop)
    else:
        remaining = current
        for raw in routed_raw:
            remaining = remaining.replace(raw, "", 1)
    _atomic_write(scratch, remaining)


# ---------------------------------------------------------------------------------------------
# Auto-memory sync


def project_slug(path: str) -> str:
    """Claude Code's project folder name: every non-alphanumeric character becomes `-`."""
    return re.sub(r"[^A-Za-z0-9]", "-", path)


def _git_root(start: str):
    current = start
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def memory_dirs(cwd: str, env=None) -> list:
    """Candidate `~/.claude/projects/<slug>/memory/` folders for cwd (and its git root)."""
    env = os.environ if env is None else env
    claude = env.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")
    projects = os.path.join(claude, "projects")
    out, seen = [], set()
    for base in (cwd, _git_root(cwd)):
        if not base:
            continue
        slug = project_slug(base)
        names = [slug]
        if len(slug) > 200:
            # Long names are cut to 200 characters plus a hash we cannot recompute: match prefix.
            try:
                names = [n for n in os.listdir(projects) if n.startswith(slug[:200])]
            except OSError:
                names = []
        for name in names:
            d = os.path.join(projects, name, "memory")
            if d not in seen and os.path.isdir(d):
                seen.add(d)
                out.append(d)
    return out


def parse_frontmatter(text: str):
    """Return (fields, body). `type` may be top-level or under `metadata:`; other keys ignored."""
    if not text.startswith("---"):
        return {}, text
    lines = text.splitlines()
    if lines[0].strip() != "---":
        return {}, text
    fields, in_metadata = {}, False
    for k, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return fields, "\n".join(lines[k + 1 :])
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indented = line[:1] in (" ", "\t")
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip().strip("'\"")
        if not indented:
            in_metadata = key == "metadata" and not value
            fields.setdefault(key, value)
        elif in_metadata:
            fields.setdefault(f"metadata.{key}", value)
    return {}, text  # no closing fence: not frontmatter


def memory_type(fields: dict) -> str:
    return (fields.get("type") or fields.get("metadata.type") or "").strip().lower()


def sync_auto_memory(library: str, cwd: str, now: float, env=None) -> dict:
    stats = {"synced": 0, "skipped": 0}
    for directory in memory_dirs(cwd, env):
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if not entry.name.endswith(".md") or entry.name == "MEMORY.md" or not entry.is_file():
                continue
            if now - entry.stat().st_mtime > AUTO_MEMORY_WINDOW_S:
                continue
            with open(entry.path, encoding="utf-8", errors="replace") as fh:
                fields, body = parse_frontmatter(fh.read())
            target = AUTO_MEMORY_TARGETS.get(memory_type(fields))
            body = _normalise(body)
            if target is None or not body:  # `user` memories are personal: never shared
                stats["skipped"] += 1
                continue
            note = os.path.join(library, target + ".md")
            if os.path.islink(note):
                stats["skipped"] += 1
                continue
            entry_id = _digest("auto-memory", entry.name, body)
            if entry_id in _existing_ids(note):
                continue
            title = fields.get("name") or entry.name[:-3]
            marker = MARKER.format(id=entry_id, origin=f"auto-memory={entry.name}")
            _append_entry(library, note, "global", f"\n{marker}\n### {title}\n{body}\n")
            stats["synced"] += 1
    return stats
