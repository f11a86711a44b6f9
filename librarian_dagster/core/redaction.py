"""Leak-check: find secrets in text and replace them with `[REDACTED:<family>]`.

Rules are our own regular expressions (see docs/decisions/0003-leak-check.md for why they beat
detect-secrets' plugins on the dev corpus). Each rule names a family, a pattern, the group that
holds the secret (the rest of the match is context, kept), and cheap "needles": the rule's regex
only runs when one of its needles occurs in the text, so clean text costs a few substring scans.

Nothing here ever logs, returns or raises with a secret's value: a `Finding` holds the family and
the span in the ORIGINAL text only.

Standard library only.
"""

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

__all__ = ["FAMILIES", "Finding", "find_secrets", "redact", "redact_session", "redact_value"]

MARKER_PREFIX = "[REDACTED:"


@dataclass(frozen=True)
class Finding:
    family: str
    start: int
    end: int


@dataclass(frozen=True)
class _Rule:
    family: str
    pattern: re.Pattern[str]
    needles: tuple[str, ...]  # lower-case substrings; the rule runs only if one is present
    group: int | str = 0
    check: Callable[[str], bool] | None = None
    priority: int = 50  # on overlap the higher priority names the family


# --------------------------------------------------------------------------------------------
# Value checks for context rules (generic assignments, bearer tokens, URL passwords)
# --------------------------------------------------------------------------------------------

_PLACEHOLDER_WORDS = (
    "redacted",
    "your",
    "example",
    "placeholder",
    "changeme",
    "change_me",
    "dummy",
    "sample",
    "xxxx",
    "****",
    "...",
    "<",
    ">",
    "{{",
    "}}",
    "${",
    "$(",
    "%(",
    "process.env",
    "os.environ",
    "getenv",
    "env(",
    "env.",
    "secrets.",
    "vault:",
    "none",
    "null",
    "undefined",
    "todo",
    "fixme",
    "foobar",
    "test-",
    "-test",
    "fake",
    "mock",
    "dummy",
    "insert",
    "replace",
)
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?$")


def _entropy(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_WORD_CHUNK_RE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def _is_identifier(value: str) -> bool:
    """snake_case, CONSTANT, camelCase or dotted.names: code that names a secret, not one."""
    if not _IDENT_RE.match(value):
        return False
    if sum(c.isdigit() for c in value) > 2:
        return False
    chunks = _WORD_CHUNK_RE.findall(value)
    # Words average well over 3 letters; random tokens split into many 1-2 letter chunks.
    return bool(chunks) and sum(map(len, chunks)) / len(chunks) >= 3.5


def _looks_secret(value: str, min_len: int = 8, min_entropy: float = 3.0) -> bool:
    """A high-entropy value that is not a reference, placeholder or plain identifier."""
    if len(value) < min_len:
        return False
    low = value.lower()
    if any(w in low for w in _PLACEHOLDER_WORDS):
        return False
    if value.startswith("$") or (value.startswith("%") and value.endswith("%")):
        return False  # $VAR, %VAR%
    if _is_identifier(value):
        return False
    classes = sum(
        (
            any(c.islower() for c in value),
            any(c.isupper() for c in value),
            any(c.isdigit() for c in value),
            any(not c.isalnum() for c in value),
        )
    )
    if classes < 2:
        return False
    if len(set(value)) <= 3:
        return False
    return _entropy(value) >= min_entropy


def _url_password_ok(value: str) -> bool:
    low = value.lower()
    if low in {
        "password",
        "pass",
        "passwd",
        "pwd",
        "secret",
        "postgres",
        "root",
        "admin",
        "user",
        "guest",
        "test",
        "changeme",
        "example",
        "mysql",
        "redis",
        "x",
    }:
        return False
    if value.startswith(("$", "%", "<", "{", "[")) or "***" in value or "REDACTED" in value:
        return False
    return len(value) >= 3


def _bearer_ok(value: str) -> bool:
    return _looks_secret(value, min_len=16, min_entropy=3.2)


def _generic_ok(value: str) -> bool:
    return _looks_secret(value, min_len=8, min_entropy=3.0)


# --------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------

_B = r"(?<![A-Za-z0-9_\-])"  # left boundary that also excludes '-' and '_' (token alphabets)
_E = r"(?![A-Za-z0-9_\-])"

_PEM_BEGIN = re.compile(
    r"-----BEGIN ((?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?)-----"
)
_PEM_END = re.compile(r"-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----")
# Key body without an END line (cut-off logs, truncated pastes): base64, whitespace, header
# lines and JSON-escaped newlines.
_PEM_BODY = re.compile(r"(?:[A-Za-z0-9+/=\s:,\-]|\\[nrt])*")
_PEM_FAMILY = {
    "RSA PRIVATE KEY": "rsa_private_key",
    "EC PRIVATE KEY": "ec_private_key",
    "OPENSSH PRIVATE KEY": "openssh_private_key",
    "DSA PRIVATE KEY": "dsa_private_key",
    "PGP PRIVATE KEY BLOCK": "pgp_private_key",
}
_PEM_MAX = 20_000

_GENERIC_KEYS = (
    r"(?:[A-Za-z0-9]+[_.\-])*"
    r"(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_\-]?key|apikey|access[_\-]?key"
    r"|secret[_\-]?key|private[_\-]?key|auth[_\-]?key|client[_\-]?secret|credentials?"
    r"|auth[_\-]?token|_authtoken)"
    r"(?:[_.\-][A-Za-z0-9]+)*"
)

_RULES: tuple[_Rule, ...] = (
    _Rule(
        "aws_access_key_id",
        re.compile(_B + r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{16}" + _E),
        ("akia", "asia", "abia", "acca", "a3t"),
        priority=90,
    ),
    _Rule(
        "aws_secret_access_key",
        re.compile(
            r"(?i)aws_?secret_?(?:access_?)?key[\"']?\s*[=:]\s*[\"']?"
            r"(?P<v>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
        ("aws",),
        group="v",
        priority=90,
    ),
    _Rule(
        "github_pat_fine",
        re.compile(_B + r"github_pat_[A-Za-z0-9_]{22,255}"),
        ("github_pat_",),
        priority=95,
    ),
    _Rule(
        "github_pat_classic",
        re.compile(_B + r"ghp_[A-Za-z0-9]{36,255}" + _E),
        ("ghp_",),
        priority=95,
    ),
    _Rule("github_oauth", re.compile(_B + r"gho_[A-Za-z0-9]{36,255}" + _E), ("gho_",), priority=95),
    _Rule(
        "github_token",
        re.compile(_B + r"gh[usr]_[A-Za-z0-9]{36,255}" + _E),
        ("ghu_", "ghs_", "ghr_"),
        priority=95,
    ),
    _Rule(
        "gitlab_pat",
        re.compile(_B + r"gl(?:pat|dt|rt|ptt|ft|soat|cbt|imt|agent)-[0-9A-Za-z_\-]{20,}"),
        ("gl",),
        priority=95,
    ),
    _Rule(
        "slack_webhook",
        re.compile(
            r"https://hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/"
            r"[A-Za-z0-9_/\-]{20,}"
        ),
        ("hooks.slack",),
        priority=95,
    ),
    _Rule(
        "slack_bot",
        re.compile(_B + r"xox[baprse]-(?:[0-9A-Za-z]+-){1,4}[0-9A-Za-z]{8,}"),
        ("xox",),
        priority=95,
    ),
    _Rule(
        "slack_app_token",
        re.compile(_B + r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]{20,}"),
        ("xapp-",),
        priority=95,
    ),
    _Rule(
        "stripe_live",
        re.compile(_B + r"(?:sk|rk)_live_[0-9A-Za-z]{16,247}" + _E),
        ("_live_",),
        priority=95,
    ),
    _Rule(
        "stripe_test",
        re.compile(_B + r"(?:sk|rk)_test_[0-9A-Za-z]{16,247}" + _E),
        ("_test_",),
        priority=95,
    ),
    _Rule(
        "stripe_webhook_secret",
        re.compile(_B + r"whsec_[0-9A-Za-z]{24,}" + _E),
        ("whsec_",),
        priority=95,
    ),
    _Rule(
        "google_api_key", re.compile(_B + r"AIza[0-9A-Za-z_\-]{35}" + _E), ("aiza",), priority=95
    ),
    _Rule(
        "google_oauth_secret",
        re.compile(_B + r"GOCSPX-[0-9A-Za-z_\-]{24,40}" + _E),
        ("gocspx-",),
        priority=95,
    ),
    _Rule(
        "google_oauth_token", re.compile(_B + r"ya29\.[0-9A-Za-z_\-]{30,}"), ("ya29.",), priority=95
    ),
    _Rule(
        "anthropic",
        re.compile(_B + r"sk-ant-(?:api|admin|oat|sid)\d{2}-[A-Za-z0-9_\-]{20,}"),
        ("sk-ant-",),
        priority=97,
    ),
    _Rule(
        "openai",
        re.compile(_B + r"sk-(?:proj-|svcacct-|admin-|None-)?(?!ant-)[A-Za-z0-9_\-]{20,}"),
        ("sk-",),
        check=lambda v: _looks_secret(v, 20, 3.0),
        priority=96,
    ),
    _Rule(
        "telegram_bot",
        re.compile(r"(?<![0-9])\d{8,10}:AA[0-9A-Za-z_\-]{33}" + _E),
        (":aa",),
        priority=95,
    ),
    _Rule(
        "jwt",
        re.compile(_B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
        ("eyj",),
        priority=92,
    ),
    _Rule("npm_token", re.compile(_B + r"npm_[A-Za-z0-9]{36}" + _E), ("npm_",), priority=95),
    _Rule("pypi_token", re.compile(_B + r"pypi-AgE[A-Za-z0-9_\-]{40,}"), ("pypi-",), priority=95),
    _Rule(
        "huggingface",
        re.compile(_B + r"hf_[A-Za-z0-9]{30,40}" + _E),
        ("hf_",),
        check=lambda v: _looks_secret(v, 20, 3.0),
        priority=95,
    ),
    _Rule(
        "sendgrid",
        re.compile(_B + r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{30,50}" + _E),
        ("sg.",),
        priority=95,
    ),
    _Rule(
        "azure_storage_key",
        re.compile(r"(?i)AccountKey\s*=\s*(?P<v>[A-Za-z0-9+/]{80,90}={0,2})"),
        ("accountkey",),
        group="v",
        priority=95,
    ),
    _Rule(
        "azure_sas_signature",
        re.compile(r"(?i)[?&;]sig=(?P<v>[A-Za-z0-9%+/]{30,}(?:%3D|=){0,2})"),
        ("sig=",),
        group="v",
        priority=80,
    ),
    _Rule(
        "postgres_url_password",
        re.compile(
            r"(?i)\bpostgres(?:ql)?(?:\+[a-z0-9]+)?://[^\s:/@\"'<>]+:"
            r"(?P<v>[^\s@\"'<>/]+)@"
        ),
        ("postgres",),
        group="v",
        check=_url_password_ok,
        priority=85,
    ),
    _Rule(
        "database_url_password",
        re.compile(
            r"(?i)\b(?:mysql|mariadb|mongodb(?:\+srv)?|redis|rediss|amqps?|mssql"
            r"|sqlserver|clickhouse|cockroachdb)(?:\+[a-z0-9]+)?://[^\s:/@\"'<>]*:"
            r"(?P<v>[^\s@\"'<>/]+)@"
        ),
        ("://",),
        group="v",
        check=_url_password_ok,
        priority=85,
    ),
    _Rule(
        "url_password",
        re.compile(
            r"(?i)\b(?:https?|ftp|sftp|smtps?|ldaps?|git\+https?)://[^\s:/@\"'<>]+:"
            r"(?P<v>[^\s@\"'<>/]+)@"
        ),
        ("://",),
        group="v",
        check=_url_password_ok,
        priority=70,
    ),
    _Rule(
        "bearer_token",
        re.compile(r"(?i)\b(?:bearer|token)\s+(?P<v>[A-Za-z0-9\-._~+/]{16,}=*)"),
        ("bearer", "token "),
        group="v",
        check=_bearer_ok,
        priority=60,
    ),
    _Rule(
        "basic_auth",
        re.compile(
            r"(?i)authorization[\"']?\s*[:=]\s*[\"']?basic\s+(?P<v>[A-Za-z0-9+/]{12,}"
            r"={0,2})"
        ),
        ("basic",),
        group="v",
        check=lambda v: _looks_secret(v, 12, 3.0),
        priority=60,
    ),
    _Rule(
        "private_token_header",
        re.compile(
            r"(?i)\b(?:private-token|x-api-key|api-key|x-auth-token)[\"']?\s*[:=]\s*"
            r"[\"']?(?P<v>[A-Za-z0-9\-._~+/]{16,})"
        ),
        ("token", "api-key"),
        group="v",
        check=_bearer_ok,
        priority=60,
    ),
    _Rule(
        "generic_password",
        re.compile(
            r"(?i)(?<![A-Za-z0-9])[\"']?"
            + _GENERIC_KEYS
            + r"[\"']?\s*(?::=|=>|=|:)\s*(?P<q>[\"'`]?)"
            r"(?P<v>[^\s\"'`,;)\]}]{8,256})(?P=q)"
        ),
        ("pass", "pwd", "secret", "token", "key", "credential"),
        group="v",
        check=_generic_ok,
        priority=40,
    ),
)

FAMILIES: tuple[str, ...] = tuple(
    sorted({r.family for r in _RULES} | set(_PEM_FAMILY.values()) | {"private_key"})
)

_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")


def _pem_findings(text: str) -> list[tuple[int, int, str, int]]:
    out: list[tuple[int, int, str, int]] = []
    for m in _PEM_BEGIN.finditer(text):
        family = _PEM_FAMILY.get(m.group(1), "private_key")
        end_m = _PEM_END.search(text, m.end(), m.end() + _PEM_MAX)
        if end_m is not None:
            end = end_m.end()
        else:
            body = _PEM_BODY.match(text, m.end(), m.end() + _PEM_MAX)
            end = body.end() if body else m.end()
            # Keep trailing whitespace out of the span so the text around it stays as it was.
            while end > m.end() and text[end - 1] in " \t\r\n":
                end -= 1
        out.append((m.start(), end, family, 100))
    return out


def _raw_findings(text: str) -> list[tuple[int, int, str, int]]:
    low = text.lower()
    found: list[tuple[int, int, str, int]] = []
    if "private key" in low:
        found.extend(_pem_findings(text))
    for rule in _RULES:
        if not any(n in low for n in rule.needles):
            continue
        for m in rule.pattern.finditer(text):
            start, end = m.span(rule.group)
            if start < 0 or start == end:
                continue
            value = text[start:end]
            if "REDACTED" in value:
                continue
            if rule.check is not None and not rule.check(value):
                continue
            found.append((start, end, rule.family, rule.priority))
    return found


def find_secrets(text: str) -> list[Finding]:
    """Secrets in `text` as non-overlapping findings, sorted by position (values never kept)."""
    if not text:
        return []
    raw = _raw_findings(text)
    if not raw:
        return []
    # Merge overlapping spans; the family is the highest-priority rule among them, so a JWT in a
    # bearer header reports "jwt", and a key inside a generic assignment its own family.
    raw.sort(key=lambda f: (f[0], -f[1]))
    merged: list[list] = []
    for start, end, fam, prio in raw:
        if merged and start < merged[-1][1]:
            cur = merged[-1]
            cur[1] = max(cur[1], end)
            if prio > cur[3]:
                cur[2], cur[3] = fam, prio
            continue
        merged.append([start, end, fam, prio])
    # A marker already in the text must stay intact (idempotence): drop spans that touch one.
    markers = [m.span() for m in _MARKER_RE.finditer(text)] if MARKER_PREFIX in text else []
    out: list[Finding] = []
    for start, end, fam, _ in merged:
        if any(start < me and ms < end for ms, me in markers):
            continue
        out.append(Finding(fam, start, end))
    return out


def redact(text: str) -> tuple[str, list[Finding]]:
    """Replace each secret with `[REDACTED:<family>]`. Idempotent; findings refer to `text`."""
    findings = find_secrets(text)
    if not findings:
        return text, findings
    parts: list[str] = []
    pos = 0
    for f in findings:
        parts.append(text[pos : f.start])
        parts.append(f"[REDACTED:{f.family}]")
        pos = f.end
    parts.append(text[pos:])
    return "".join(parts), findings


def redact_value(text: str | None, counts: Counter[str]) -> str | None:
    """Redact an optional string, adding the findings to `counts` by family."""
    if not text:
        return text
    out, findings = redact(text)
    for f in findings:
        counts[f.family] += 1
    return out


def redact_session(session):  # type: ignore[no-untyped-def]
    """A copy of `session` with every text field redacted, and the counts by family.

    Covers turn text, tool-use summaries, commands and file paths, the title, cwd, branch and
    project. The input session is not modified.
    """
    counts: Counter[str] = Counter()
    new_turns = []
    for turn in session.turns:
        tools = tuple(
            replace(
                tu,
                summary=redact_value(tu.summary, counts) or "",
                command=redact_value(tu.command, counts),
                file_paths=tuple(redact_value(p, counts) or "" for p in tu.file_paths),
                name=redact_value(tu.name, counts) or "",
            )
            for tu in turn.tool_uses
        )
        new_turns.append(replace(turn, text=redact_value(turn.text, counts) or "", tool_uses=tools))
    new = replace(
        session,
        turns=new_turns,
        title=redact_value(session.title, counts),
        cwd=redact_value(session.cwd, counts),
        git_branch=redact_value(session.git_branch, counts),
        project=redact_value(session.project, counts) or "",
    )
    return new, dict(counts)
