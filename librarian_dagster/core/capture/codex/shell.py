"""What a shell command Codex ran did: read files, searched, ran something, or applied a patch.

Decided from the command's text alone (docs/decisions/0037-codex-reads.md says what is counted
and why): a command is a read only when every part of it plainly prints files it names (`cat`,
`nl`, `head`, `tail`, `sed` without `-i`, `less`, `more`, `bat`, or `rg`/`grep` over named
files); a search when its parts only read or list (`ls`, `find`, `rg` over folders); anything
else (a build, a test, a redirect into a file, a glob, a substitution) is a run. Pipelines count
by their first command: `nl -ba f | sed -n 1,80p` reads f.

Standard library only: hooks and the MCP server import this without dagster.
"""

import re
import shlex
from dataclasses import dataclass, field

from librarian_dagster.core.capture.patches import BEGIN, joined
from librarian_dagster.core.capture.session import READ, RUN, SEARCH

__all__ = ["Classified", "apply_patch_in", "classify", "script_of"]

_READERS = frozenset({"cat", "nl", "head", "tail", "sed", "less", "more", "bat"})
_GREPS = frozenset({"rg", "grep", "egrep", "fgrep", "ag"})
_LISTERS = frozenset({"ls", "find", "fd", "tree"})
# Harmless beside a read: they print nothing from a file and change nothing.
_NEUTRAL = frozenset({"echo", "printf", "true", "pwd", ":"})
# After a `|` these only filter what the first command printed.
_FILTERS = frozenset(
    {"head", "tail", "sed", "nl", "grep", "rg", "wc", "sort", "uniq", "cut", "tr", "cat", "less"}
)
_VALUED = frozenset(
    {
        *("-e", "-f", "-g", "-t", "-T", "-A", "-B", "-C", "-m", "-M", "-j", "-d", "-D", "-n"),
        *("-c", "-b", "-h", "-i", "-l", "-s", "-v", "-w", "-r", "-L", "--glob", "--iglob"),
        *("--type", "--type-not", "--max-count", "--context", "--after-context", "--regexp"),
        *("--before-context", "--max-depth", "--file", "--sort", "--max-columns", "--lines"),
        "--line-range",
    }
)
# Options that take no value though their letter takes one in another tool.
_FLAG_ONLY = {
    "rg": frozenset({"-n", "-i", "-l", "-c", "-s", "-v", "-w", "-L", "-h"}),
    "grep": frozenset({"-n", "-i", "-l", "-c", "-s", "-v", "-w", "-L", "-h", "-r", "-b"}),
    "sed": frozenset({"-n", "-i", "-s", "-r"}),
    "cat": frozenset({"-n", "-b", "-s", "-v"}),
    "less": frozenset({"-n", "-i", "-s"}),
}
_GLOB = re.compile(r"[*?\[\]{}$`~]")
# What a command that may be a read or a search can begin with.
_FIRST = _READERS | _GREPS | _LISTERS | _NEUTRAL | {"cd"}
_OPERATORS = frozenset({"&&", "||", ";", "|", "&", ";;"})
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?")


@dataclass
class Classified:
    action: str
    paths: tuple[str, ...] = ()


@dataclass
class _Walk:
    """What the parts of one command line add up to."""

    cwd: str | None
    kinds: set[str] = field(default_factory=set)
    paths: list[str] = field(default_factory=list)


def script_of(command: object) -> str | None:
    """The shell text of a command as Codex logs it: a string, or an argv list whose
    `bash -lc SCRIPT` form gives SCRIPT."""
    if isinstance(command, str):
        return command
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        return None
    if len(command) == 3 and command[1] in ("-lc", "-c") and _name(command[0]) in _SHELLS:
        return command[2]
    return shlex.join(command)


_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "fish", "pwsh", "powershell"})


def _name(word: str) -> str:
    """The program a word names, without its folder (as posixpath.basename, `\\` a `/`)."""
    word = word.replace("\\", "/")
    return word[word.rfind("/") + 1 :]


def apply_patch_in(script: str) -> tuple[str, str | None] | None:
    """The patch of an `apply_patch <<'EOF' ... EOF` command, with the folder a leading
    `cd X &&` moved to; None when the command applies no patch."""
    start = script.find(BEGIN)
    if start < 0:
        return None
    head = script[:start]
    if not re.search(r"(^|[\s;&|(])(apply_patch|applypatch)\b", head):
        return None
    cd = re.match(r"\s*cd\s+(\"[^\"]+\"|'[^']+'|\S+)\s*&&", head)
    folder = cd.group(1).strip("'\"") if cd else None
    return script[start:], folder


def classify(script: str, workdir: str | None = None) -> Classified:
    """Whether the command read files (and which), searched, or ran; `workdir` is where it
    ran when that is not the session's cwd (relative paths are then joined to it)."""
    if "\n" in script.strip() or "$(" in script or "`" in script or _HEREDOC.search(script):
        return Classified(RUN)
    words = script.split(None, 1)
    if not words or ("=" not in words[0] and _name(words[0].strip("'\"")) not in _FIRST):
        # Its first command already makes it a run: spare the tokenizer (most of parse time).
        return Classified(RUN)
    tokens = _tokens(script)
    if tokens is None:
        return Classified(RUN)
    walk = _Walk(workdir)
    for position, words in _commands(tokens):
        kind = _one(words, position, walk)
        if kind is not None:
            walk.kinds.add(kind)
    if not walk.kinds or not walk.kinds <= {READ, SEARCH}:
        return Classified(RUN)
    if walk.kinds == {READ}:
        return Classified(READ, tuple(dict.fromkeys(walk.paths)))
    return Classified(SEARCH)


# The tokens of a command line as shlex (posix, punctuation_chars, whitespace_split) reads them:
# words of unquoted characters, '...', "..." and backslash escapes, and runs of `();<>|&`.
# Outside quotes `#` starts a comment to shlex, even inside a word: such lines go to shlex.
# Atomic groups, never given back, keep both linear on any line. Not possessive quantifiers
# (`*+`), which mean the same: early 3.11 releases match some of them wrongly (Debian 12's
# Python 3.11.2 took a lone `'` for a whole line).
_WORD = r"""(?>(?:(?>[^ \t\r\n();<>|&'"\\#]+)|'(?>[^']*)'|"(?>(?:(?>[^"\\]+)|\\.)*)"|\\.)+)"""
_TOKEN = re.compile(rf"({_WORD})|([();<>|&]+)", re.S)
# What shlex reads without an error or a comment.
_LINE = re.compile(r"""(?>(?:(?>[^'"\\#]+)|'(?>[^']*)'|"(?>(?:(?>[^"\\]+)|\\.)*)"|\\.)*)""", re.S)
_QUOTED = re.compile(r"""['"\\]""")
_PART = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)|([^'"\\]+)""", re.S)
_ESCAPED_IN_DOUBLE = re.compile(r'\\([\\"])')


def _word(text: str) -> str:
    """A word's text without its quotes and escapes, as shlex gives it."""
    out: list[str] = []
    for m in _PART.finditer(text):
        single, double, escaped, plain = m.groups()
        if double is not None:
            # In "...", a backslash escapes only `"` and itself; before anything else it stays.
            out.append(_ESCAPED_IN_DOUBLE.sub(r"\1", double))
        else:
            out.append(next(p for p in (single, escaped, plain) if p is not None))
    return "".join(out)


def _tokens(script: str) -> list[str] | None:
    """The tokens shlex gives for the command line (None where it raises: an open quote, a
    trailing backslash), read by regular expressions: shlex reads a character at a time in
    Python, and was most of the Codex reader's time. A line with `#` outside quotes is still
    given to shlex."""
    if _LINE.fullmatch(script) is None:
        return _shlex_tokens(script)
    return [
        (_word(word) if _QUOTED.search(word) else word) if word else punctuation
        for word, punctuation in _TOKEN.findall(script)
    ]


def _shlex_tokens(script: str) -> list[str] | None:
    try:
        lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError:
        return None


def _commands(tokens: list[str]) -> list[tuple[int, list[str]]]:
    """Simple commands with their place in their pipeline (0 = first); a redirect into a
    file makes its command a run (marked by the word `>`)."""
    out: list[tuple[int, list[str]]] = []
    words: list[str] = []
    position = 0
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in _OPERATORS:
            out.append((position, words))
            position = position + 1 if tok == "|" else 0
            words = []
        elif tok and not tok.strip("<>&"):
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            if words and words[-1].isdigit():
                words.pop()  # the fd of `2>`
            if "<" in tok or not (target == "/dev/null" or target.isdigit()):
                words.append(">")
            i += 1
        else:
            words.append(tok)
        i += 1
    out.append((position, words))
    return [(p, w) for p, w in out if w]


def _one(words: list[str], position: int, walk: _Walk) -> str | None:
    """One simple command's kind (None: neutral); a read adds its files to `walk`."""
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]  # FOO=bar cmd
    if not words or ">" in words:
        return RUN if words else None
    program, args = _name(words[0]), words[1:]
    if program == "cd":
        if len(args) == 1 and not _GLOB.search(args[0]) and args[0] != "-":
            walk.cwd = joined(args[0], walk.cwd)
            return None
        return RUN
    if program in _NEUTRAL or (position > 0 and program in _FILTERS):
        return None
    if position > 0:
        return RUN
    if program in _LISTERS:
        return SEARCH
    files = _read_operands(program, args)
    if files is None:
        return SEARCH if program in _GREPS else RUN
    if not files or any(_GLOB.search(f) for f in files):
        return RUN
    walk.paths.extend(joined(f, walk.cwd) for f in files)
    return READ


def _read_operands(program: str, args: list[str]) -> list[str] | None:
    """The files a reading program prints; None when it is not a plain read of named files
    (not a reader, `sed -i`, `rg` over folders or the cwd)."""
    if program not in _READERS and program not in _GREPS:
        return None
    flags, operands = _split(args, _FLAG_ONLY.get(program, frozenset()))
    if program == "sed":
        if any(f.startswith(("-i", "--in-place")) for f in flags):
            return None
        if not any(f in ("-e", "-f") or f.startswith(("--expression", "--file")) for f in flags):
            operands = operands[1:]  # the script
        return operands
    if program in _GREPS:
        if "--files" in flags or any(f.startswith(("-r", "-R")) for f in flags):
            return None
        if not any(f in ("-e", "-f", "--regexp", "--file") for f in flags):
            operands = operands[1:]  # the pattern
        if not operands or not all(_looks_like_file(o) for o in operands):
            return None
    return operands


def _split(args: list[str], flag_only: frozenset[str]) -> tuple[list[str], list[str]]:
    """Options (each with its value) and operands."""
    flags: list[str] = []
    operands: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            operands.extend(args[i + 1 :])
            break
        if arg.startswith("-") and len(arg) > 1:
            flags.append(arg)
            if arg in _VALUED and arg not in flag_only and "=" not in arg:
                i += 1
        else:
            operands.append(arg)
        i += 1
    return flags, operands


_EXTENSION = re.compile(r".\.[A-Za-z0-9_-]{1,10}$")
_NAMED_FILES = frozenset({"Makefile", "Dockerfile", "LICENSE", "README", "Justfile", "Gemfile"})


def _looks_like_file(path: str) -> bool:
    """Whether an operand of `rg`/`grep` names a file, not a folder: a name with an extension
    (`syncer.go`, `.gitignore`) or a well-known extensionless file."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if path.endswith("/") or name in ("", ".", ".."):
        return False
    return name in _NAMED_FILES or _EXTENSION.search(name) is not None
