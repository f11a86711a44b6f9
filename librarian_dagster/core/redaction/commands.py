"""Passwords on command lines: `mysql -pX`, `sshpass -p X`, `redis-cli -a X`, `curl -u user:X`.

A flag means "password" only for some commands (`-p` is a port for ssh and docker, "parents"
for mkdir; `mysql -p db` prompts and `db` is a database), so these are read from the words of
the command itself, not matched by a pattern over any text. One literal-first pass finds the
flags that can carry a password (`-p`, `-a`, `-u`, `--user`, `--password`...); only around
those is the command (back to a newline, `|`, `;`, `&`, `<`, `>`, a backtick or a JSON-escaped
newline) split into shell words, and the flags of the command words found there are read.
Looking for each command's name instead cost a full pass per name (~60), 3x the whole scan.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass

from librarian_dagster.core.redaction.checks import (
    DEFAULT_PASSWORDS,
    is_identifier,
    says_placeholder_alone,
)
from librarian_dagster.core.redaction.rules import Raw, decoded, rx

CLI_FAMILY = "cli_password"
_CMD_MAX = 2_000  # bytes of one command read at most
# Around a flag: its command word is looked for this far back, its value this far ahead (a
# long line of prose or JSON is not tokenized whole for every flag in it).
_CMD_BACK = 400
_CMD_AHEAD = 600
_CMD_BREAKS = (b"\n", b"\r", b"\x00", b"|", b";", b"&", b"`", b"<", b">", b"\\n", b"\\r")
_QUOTES = frozenset(b"'\"")
_BLANKS_RE = re.compile(rb"[ \t]*")
# A shell word: plain characters, "..." (with \" inside), '...', or \x. It stops at blanks,
# `|;&<>` and backticks. A quote never runs past the end of its line: an unclosed one (prose,
# a cut-off log) must not swallow the commands on the lines after it.
_WORD_RE = re.compile(
    rb"""(?:[^\s"'\\|;&`<>\x00]+|"(?:[^"\\\x00\n\r]|\\[^\x00\n\r])*"?|'[^'\x00\n\r]*'?"""
    rb"""|\\[^nr\x00\n\r])+"""
)
# The flags worth a look: password flags of any command, and the short flags some commands
# read a password from. Lower-cased text; `-P` / `-U` are told apart in the original. The
# lookbehind, after the literal, drops `one-pass` and `e-mail` in C.
_FLAG_MARK = re.compile(
    rb"-(?<![a-z0-9_]-)(?:-?(?:[a-z0-9]+-)*(?:pass|pwd|user|auth|pw)|[pauwb]|[a-z]b"
    rb"|(?:src|dest|new)?(?:store|key)pass)"
)
# `--password X`, `--db-password=X`, `-storepass X` (keytool), `-passin pass:X` (openssl); not
# `--password-file X` or `--password-stdin`: the name must end at the value.
_PW_FLAG = re.compile(
    rb"--?(?:[a-z0-9]+-)*(?:password|passwd|pass|pwd|passphrase|passin|passout"
    rb"|(?:src|dest|new)?(?:store|key)pass)(?P<sep>=|[ \t]+)"
    rb"""(?P<q>["'`]?)(?P<v>[^\s\x00"'`;|&]{1,256})(?P=q)"""
)
_FLAG_BEFORE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_FLAG_BEFORE_1 = frozenset(bytes([c]) for c in _FLAG_BEFORE)  # as one-byte slices
# The defaults of the clients read here too (keytool's `changeit`, Oracle's `tiger`...).
_CLI_DEFAULTS = DEFAULT_PASSWORDS | {
    "changeit",
    "mongo",
    "foobared",
    "tiger",
    "cassandra",
    "neo4j",
    "xxx",
}
_METAVAR_RE = re.compile(r"^[A-Z][A-Z_]*$")  # PASSWORD, DB_PASS: a help text's metavar


def cli_password_ok(value: str, spaced: bool, quoted: bool) -> bool:
    """A password given on a command line, unless it is a placeholder, reference or prose.

    No entropy test: after `mysql -p` or `sshpass -p` a value IS a password, however weak.
    An unquoted word after a spaced flag may be prose ("pass -p to sshpass"), so words without
    digits are left alone there.
    """
    if len(value) < 4 or value[0] in "$%<{[(*-/~":
        return False  # $VAR, %VAR%, <password>, {{x}}, [REDACTED...], $(cmd), ***, -flag, path
    low = value.lower()
    if low in _CLI_DEFAULTS or "passw" in low or "REDACTED" in value:
        return False
    # The word alone (a non-letter on both sides): beside one only, random letters hold one
    # (hypothesis found `-pXNtwzFETodo+oP6N9o`).
    if says_placeholder_alone(value) or _METAVAR_RE.match(value):
        return False
    return not (spaced and not quoted and is_identifier(value) and not any(map(str.isdigit, value)))


def _words(data: bytes, pos: int, end: int | None = None) -> list[tuple[int, int]]:
    """The shell words of the command from `pos` on, as (start, end) spans with quotes kept."""
    words: list[tuple[int, int]] = []
    n = min(len(data) if end is None else end, pos + _CMD_MAX)
    i = pos
    while True:
        i = _BLANKS_RE.match(data, i, n).end()  # type: ignore[union-attr]  # `*` always matches
        m = _WORD_RE.match(data, i, n)
        if m is None:
            return words
        words.append(m.span())
        i = m.end()


def _unquote(data: bytes, s: int, e: int) -> tuple[int, int, bool]:
    """The value inside quotes ('x', "x" or JSON-escaped \"x\"); prose punctuation dropped."""
    if e - s >= 2 and data[s] in _QUOTES and data[e - 1] == data[s]:
        return s + 1, e - 1, True
    if e - s >= 4 and data[s : s + 2] == b'\\"' and data[e - 2 : e] == b'\\"':
        return s + 2, e - 2, True
    if data[s : s + 1] in (b"'", b'"'):
        s += 1  # the quote closes past the end of the command read: keep the value anyway
    while e > s and data[e - 1] in b".,:)'\"":
        e -= 1  # "run `mysql -pX`." / `-u user:` (an empty password)
    return s, e, False


@dataclass(frozen=True)
class _Cmd:
    """How one family of commands takes a password on its command line."""

    names: tuple[str, ...]  # command words (lower case, without a path or `.exe`)
    spaced: frozenset[bytes] = frozenset()  # `-p X`
    glued: tuple[bytes, ...] = ()  # `-pX`, `--user=X`
    takes: frozenset[bytes] = frozenset()  # other flags with a value (skipped with it)
    wrapper: bool = False  # options end at the first operand (`sshpass -p X ssh -p 22 h`)
    split: bytes = b""  # `user:password` values: only the part after the first `split`
    needs: bytes = b""  # a word the command must have among its first ones (`login`)
    positional: Callable[[bytes, list[tuple[int, int]]], list[tuple[int, int]]] | None = None


def _htpasswd_positional(data: bytes, words: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`htpasswd -b[c] FILE USER PASSWORD`, `htpasswd -nb USER PASSWORD`."""
    letters = b""
    operands: list[tuple[int, int]] = []
    skip = False
    for s, e in words:
        w = data[s:e]
        if skip:
            skip = False
        elif w.startswith(b"-") and not operands:
            letters += w[1:]
            skip = w.endswith(b"C")  # -C COST
        else:
            operands.append((s, e))
    if b"b" not in letters:
        return []
    index = 1 if b"n" in letters else 2
    return operands[index : index + 1]


def _sqlplus_positional(data: bytes, words: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`sqlplus user/password@db` (also rman, expdp, impdp, sqlldr)."""
    for s, e in words:
        if data[s] == 0x2D:  # -s, -L ...
            continue
        w = data[s:e]
        slash = w.find(b"/")
        if slash <= 0:
            return []  # `/ as sysdba`, `/nolog`, a script
        at = w.find(b"@", slash)
        return [(s + slash + 1, s + at if at != -1 else e)]
    return []


def _rabbitmq_positional(data: bytes, words: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """`rabbitmqctl add_user NAME PASSWORD`, `rabbitmqctl change_password NAME PASSWORD`."""
    for i, (s, e) in enumerate(words):
        if data[s:e] in (b"add_user", b"change_password"):
            return words[i + 2 : i + 3]
    return []


_F = frozenset
_MYSQL = (
    "mysql",
    "mysqldump",
    "mysqladmin",
    "mysqlimport",
    "mysqlcheck",
    "mysqlpump",
    "mysqlsh",
    "mysqlshow",
    "mysqlslap",
    "mysqlbinlog",
    "mysql_upgrade",
    "mariadb",
    "mariadb-dump",
    "mariadb-admin",
    "mariadb-import",
    "mariadb-check",
    "mariadb-backup",
    "mariadb-binlog",
    "mariadb-show",
    "mariadb-slap",
    "mariadb-upgrade",
    "mariabackup",
    "xtrabackup",
)
_MONGO = (
    "mongo mongosh mongodump mongorestore mongoexport mongoimport mongostat mongotop mongofiles"
)
_LDAP = "ldapsearch ldapadd ldapmodify ldapdelete ldapmodrdn ldapcompare ldapwhoami ldappasswd"
_CMDS: tuple[_Cmd, ...] = (
    # mysql, mysqldump, mariadb...: only glued; `-p X` prompts and X is the database.
    _Cmd(tuple(_MYSQL), glued=(b"-p",)),
    _Cmd(("7z", "7za", "7zr", "7zz", "unrar", "rar"), glued=(b"-p",)),  # `-p-`: no password
    _Cmd(("zip", "unzip", "zipcloak"), spaced=_F({b"-P"})),
    _Cmd(("sqlcmd", "bcp", "osql", "isql", "tsql", "sqsh"), spaced=_F({b"-P"}), glued=(b"-P",)),
    _Cmd(tuple(_MONGO.split()), spaced=_F({b"-p"}), glued=(b"-p",)),
    _Cmd(("cqlsh", "cypher-shell", "twine", "rdesktop"), spaced=_F({b"-p"})),
    _Cmd(
        ("sshpass",),
        spaced=_F({b"-p"}),
        glued=(b"-p",),
        takes=_F({b"-f", b"-d", b"-P"}),
        wrapper=True,
    ),
    _Cmd(("redis-cli", "valkey-cli", "keydb-cli"), spaced=_F({b"-a", b"--pass"})),
    _Cmd(
        ("curl",),
        spaced=_F({b"-u", b"--user", b"-U", b"--proxy-user"}),
        glued=(b"--user=", b"--proxy-user=", b"-u", b"-U"),
        split=b":",
    ),
    _Cmd(
        ("http", "https", "httpie"), spaced=_F({b"-a", b"--auth"}), glued=(b"--auth=",), split=b":"
    ),
    _Cmd(("lftp",), spaced=_F({b"-u"}), split=b","),
    _Cmd(
        ("smbclient", "rpcclient", "smbcacls", "smbget"),
        spaced=_F({b"-U", b"--user"}),
        glued=(b"--user=", b"-U"),
        split=b"%",
    ),
    _Cmd(tuple(_LDAP.split()), spaced=_F({b"-w"}), glued=(b"-w",)),
    _Cmd(("mosquitto_pub", "mosquitto_sub", "mosquitto_rr"), spaced=_F({b"-P", b"--pw"})),
    _Cmd(
        (
            "docker",
            "podman",
            "nerdctl",
            "finch",
            "helm",
            "oras",
            "skopeo",
            "buildah",
            "crane",
            "regctl",
            "az",
            "oc",
            "cf",
        ),
        spaced=_F({b"-p"}),
        needs=b"login",
    ),
    _Cmd(("htpasswd",), positional=_htpasswd_positional),
    # No flag to find these by: their names are looked for (two passes over the text).
    _Cmd(("sqlplus",), positional=_sqlplus_positional),
    _Cmd(("rabbitmqctl",), positional=_rabbitmq_positional),
)
_CMD_BY_NAME: dict[bytes, _Cmd] = {n.encode(): c for c in _CMDS for n in c.names}
_CMD_BY_NEEDLE = tuple((n.encode(), rx(n + r"(?:\.exe)?[ \t]")) for n in ("sqlplus", "rabbitmqctl"))


def _cmd_name(data: bytes, s: int, e: int) -> _Cmd | None:
    word = data[s:e].lower()
    if len(word) > 40:
        return None
    word = word.rsplit(b"/", 1)[-1].removesuffix(b".exe")
    return _CMD_BY_NAME.get(word)


def _cmd_values(data: bytes, cmd: _Cmd, words: list[tuple[int, int]]) -> Raw:
    if cmd.needs and not any(data[s:e] == cmd.needs for s, e in words[:3]):
        return []
    cands: list[tuple[int, int, bool]] = []
    if cmd.positional is not None:
        cands.extend((s, e, True) for s, e in cmd.positional(data, words))
    i = 0
    while i < len(words):
        s, e = words[i]
        w = data[s:e]
        if w in cmd.spaced:
            if i + 1 < len(words):
                cands.append((*words[i + 1], True))
            i += 2
            continue
        if w in cmd.takes:
            i += 2
            continue
        for g in cmd.glued:
            if w.startswith(g) and len(w) > len(g):
                cands.append((s + len(g), e, False))
                break
        if cmd.wrapper and not w.startswith(b"-"):
            break
        i += 1
    out: Raw = []
    for s, e, spaced in cands:
        vs, ve, quoted = _unquote(data, s, e)
        if cmd.split:
            cut = data.find(cmd.split, vs, ve)
            if cut == -1:
                continue  # `curl -u user`: curl asks for the password
            vs = cut + 1
            quoted = True  # after `user:` it is a password, not prose
        if ve > vs and cli_password_ok(decoded(data, vs, ve), spaced, quoted):
            out.append((vs, ve, CLI_FAMILY, 60))
    return out


def _flag_value(data: bytes, m: re.Match[bytes]) -> Raw:
    """`--password X` and the like, any command: the value unless it is a placeholder."""
    vs, ve = m.span("v")
    value = decoded(data, vs, ve)
    low = value.lower()
    if low.startswith(("env:", "file:", "fd:", "stdin")):
        return []  # openssl's -passin env:VAR / file:PATH
    if low.startswith("pass:"):
        vs += 5
        value = value[5:]
    spaced = m.group("sep") != b"="
    if cli_password_ok(value, spaced, quoted=m.group("q") != b""):
        return [(vs, ve, "generic_password", 41)]
    return []


def _commands(data: bytes, words: list[tuple[int, int]]) -> Raw:
    out: Raw = []
    for i, (ws, we) in enumerate(words):
        cmd = _cmd_name(data, ws, we)
        if cmd is not None:
            out.extend(_cmd_values(data, cmd, words[i + 1 :]))
    return out


# The environment variables clients read a password from, as (prefix, keyword of the generic
# password rule that matches there): `PGPASSWORD=x`, `MYSQL_PWD=x`, `SSHPASS=x`.
_CLIENT_ENV = ((b"pg", b"password"), (b"mysql_", b"pwd"), (b"ssh", b"pass"))


def client_env(low: bytes, start: int) -> bool:
    """Whether the generic password match at `start` is the value of a client's variable: its
    value is a password however weak (the generic rules want entropy)."""
    for prefix, keyword in _CLIENT_ENV:
        at = start - len(prefix)
        end = start + len(keyword)
        if (
            at >= 0
            and low.startswith(prefix + keyword, at)
            and (at == 0 or low[at - 1] not in _FLAG_BEFORE)
            and low[end : end + 1] not in _FLAG_BEFORE_1
        ):
            return True
    return False


def cli_findings(data: bytes, low: bytes) -> Raw:
    out: Raw = []
    done = 0  # end of the last command read: each is read once
    for m in _FLAG_MARK.finditer(low):
        s = m.start()
        if s > 0 and data[s - 1] in _FLAG_BEFORE:
            continue  # one-pass, e-mail, x_user
        pw = _PW_FLAG.match(low, s)
        if pw is not None:
            out.extend(_flag_value(data, pw))
        if s < done:
            continue
        lo = max(0, s - _CMD_BACK)
        start = lo
        for brk in _CMD_BREAKS:
            at = data.rfind(brk, lo, s)
            if at != -1:
                start = max(start, at + len(brk))
        words = _words(data, start, s + _CMD_AHEAD)
        if words:
            done = words[-1][1]
        out.extend(_commands(data, words))
        for ws, we in words:
            # `sh -c "mysql -pX"`, `ssh host 'redis-cli -a X'`, a JSON string: read inside once.
            if (
                data[ws] in _QUOTES
                and we - ws > 4
                and (b" " in data[ws:we] or b"\t" in data[ws:we])
            ):
                inner_end = we - 1 if data[we - 1] == data[ws] else we  # unclosed: to its end
                out.extend(_commands(data, _words(data, ws + 1, inner_end)))
    for needle, pattern in _CMD_BY_NEEDLE:
        if needle in low:
            for m in pattern.finditer(low):
                if m.start() == 0 or data[m.start() - 1] not in _FLAG_BEFORE:
                    cmd = _CMD_BY_NAME[needle]
                    out.extend(_cmd_values(data, cmd, _words(data, m.end())))
    return out
