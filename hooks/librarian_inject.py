"""The library's notes in the hooks: the notes for a file before an edit (pre_tool_use.py), and
once per session the reminder to keep notes (user_prompt_submit.py).

Lives in a module rather than in the script because Python caches a module's bytecode but compiles
a script on every run: about 3 ms of a ~15 ms hook.
"""

import json
import os

import librarian_hooklib as lib
import librarian_recurring as recurring

NOTES_HEADER = "Librarian notes for {path} (most specific first):"

DEFAULT_BUDGET = 8000
# Claude Code spills hook output strings above 10,000 characters to a file.
MAX_BUDGET = 10000
MIN_BUDGET = 200
MARKER_PREFIX = "<!-- librarian"
# Past this many characters of names the closing line says "and N more" instead.
MAX_CLOSING_NAMES = 600


def reminder(library: str, root: str) -> str:
    scratch = os.path.join(library, lib.SCRATCH_NAME)
    return (
        f"Librarian: this project keeps notes in {library} (it mirrors the folders of {root}). "
        f"When you learn something worth keeping (a pattern, a pitfall, a decision), append it to "
        f"{scratch} as a block:\n"
        "## [TAG: <folder relative to the project root, or global>, "
        "type: <patterns|tech|product>]\n"
        "- one learning per bullet\n"
        "At the end of each turn the block is filed into "
        f"{lib.LIBRARY_DIRNAME}/<folder>/<type>.md. Blocks without `type:` stay in the "
        "scratch file."
    )


def remind(event: dict, env) -> tuple[str | None, str]:
    """The reminder, once per session, where a library exists (walking up from the cwd, or
    `LIBRARIAN_PATH`)."""
    found = lib.find_library(lib.event_cwd(event, env), env)
    if found is None:
        return None, "no library"
    if not lib.first_time(lib.open_session_state(event, ".reminded", env)):
        return None, "already reminded"
    return reminder(*found), "reminded"


def budget_from(env) -> int:
    try:
        value = int(env.get("LIBRARIAN_CONTEXT_BUDGET", DEFAULT_BUDGET))
    except ValueError:
        value = DEFAULT_BUDGET
    return max(MIN_BUDGET, min(MAX_BUDGET, value))


def target_file(event: dict):
    tool_input = event.get("tool_input")
    if not isinstance(tool_input, dict):
        return None
    path = tool_input.get("file_path") or tool_input.get("notebook_path")
    if not isinstance(path, str) or not path:
        return None
    if not os.path.isabs(path):
        path = os.path.join(lib.event_cwd(event), path)
    return os.path.normpath(path)


def levels(library: str, root: str, file_dir: str):
    """[(label, folder)] from the file's own mirrored folder up to the library root."""
    inside = file_dir == root or file_dir.startswith(root.rstrip(os.sep) + os.sep)
    rel = os.path.relpath(file_dir, root) if inside else os.pardir
    parts = [] if rel == os.curdir or rel.startswith(os.pardir) else rel.split(os.sep)
    out = []
    for i in range(len(parts), -1, -1):
        label = "/".join(parts[:i]) or "global"
        out.append((label, os.path.join(library, *parts[:i])))
    return out


def is_note(entry) -> bool:
    try:
        return entry.name.endswith(".md") and not entry.name.startswith(".") and entry.is_file()
    except OSError:  # a symlink loop, say: not a note, and the folder's other notes still are
        return False


def notes_in(folder: str):
    try:
        entries = [e for e in os.scandir(folder) if is_note(e)]
    except OSError:  # the mirrored folder usually does not exist: most folders have no notes
        return []
    entries.sort(key=lambda e: e.name)
    return entries


def signature(entry):
    """The note's "mtime:size" and size; None when it vanished or cannot be looked at now."""
    try:
        st = entry.stat()
    except OSError:
        return None
    return f"{st.st_mtime_ns}:{st.st_size}", st.st_size


def read_note(path: str, root: str):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:  # removed since the listing, or unreadable: pass over it, keep the others
        return None
    if os.path.basename(path) == recurring.NAME:  # its markers say when a line may be stale
        text = recurring.marked(text, root)
    return clean(text)


def clean(text: str) -> str:
    # Routing markers are bookkeeping for the Stop hook, not knowledge: do not spend budget on them.
    if MARKER_PREFIX in text:
        text = "\n".join(ln for ln in text.splitlines() if not ln.startswith(MARKER_PREFIX))
    return text.strip()


def closing_line(names, budget: int) -> str:
    shown, size = [], 0
    for name in names:
        if size + len(name) > MAX_CLOSING_NAMES:
            break
        shown.append(name)
        size += len(name) + 2
    rest = len(names) - len(shown)
    listed = ", ".join(shown) + (f" and {rest} more" if rest else "")
    return f"\n\nNot shown (over the {budget}-character budget; read them if relevant): {listed}"


def notes(event: dict, path: str, env) -> tuple[str | None, str]:
    """(the notes for an edit of `path` not yet shown in this session, or None; the outcome)."""
    file_dir = os.path.dirname(path)
    found = lib.find_library(file_dir, env)
    if found is None:
        return None, "no library"
    library, root = found
    if path.startswith(library + os.sep):
        return None, "editing the library itself"

    budget = budget_from(env)
    state_path = lib.open_session_state(event, ".notes.json", env)
    state = _load_json(state_path) if state_path else {}
    shown_before = state.get("shown", {})
    named_before = state.get("named", {})

    header = NOTES_HEADER.format(path=os.path.relpath(path, root))
    used = len(header)
    included = []  # (key, sig, section)
    omitted = []  # (key, sig, display name)
    for label, folder in levels(library, root, file_dir):
        for entry in notes_in(folder):
            seen = signature(entry)
            if seen is None:
                continue
            sig, size = seen
            key = entry.path
            if shown_before.get(key) == sig:
                continue
            name = f"{label}/{entry.name}"
            # Bytes bound characters from above: a note this big can never fit, so skip the read.
            if size > 4 * budget:
                omitted.append((key, sig, name))
                continue
            body = read_note(entry.path, root)
            if not body:
                continue
            section = f"\n\n### {name}\n{body}"
            if used + len(section) <= budget:
                included.append((key, sig, section, name))
                used += len(section)
            else:
                omitted.append((key, sig, name))

    closing = ""
    if omitted:
        closing = closing_line([o[2] for o in omitted], budget)
        # Make room for the closing line by dropping the least specific included notes.
        while included and used + len(closing) > budget:
            key, sig, section, name = included.pop()
            used -= len(section)
            omitted.append((key, sig, name))
            closing = closing_line([o[2] for o in omitted], budget)

    new_names = [o for o in omitted if named_before.get(o[0]) != o[1]]
    if not included and not new_names:
        return None, f"nothing new (omitted={len(omitted)})"

    text = header + "".join(s for _, _, s, _ in included) + closing
    if len(text) > budget:  # only when even the closing line alone is too long
        text = text[: budget - 1] + "…"
    if state_path:
        shown_before.update({k: s for k, s, _, _ in included})
        named_before.update({k: s for k, s, _ in omitted})
        _save_json_atomic(state_path, {"shown": shown_before, "named": named_before})
    return text, f"injected={len(included)} omitted={len(omitted)} chars={len(text)}"


def _load_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.loads(fh.read())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_json_atomic(path: str, data: dict) -> None:
    # Write then rename: a reader (or a crash) never sees half a state file.
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(data))
    os.replace(tmp, path)
