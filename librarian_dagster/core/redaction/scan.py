"""Leak-check: find secrets in text and replace them with `[REDACTED:<family>]`.

Rules are our own regular expressions (see docs/decisions/0003-leak-check.md for why they beat
detect-secrets' plugins on the dev corpus). Each rule names a family, a pattern, the group that
holds the secret (the rest of the match is context, kept), and cheap "needles": the rule's regex
only runs when one of its needles occurs in the text, so clean text costs a few substring scans.

Nothing here ever logs, returns or raises with a secret's value: a `Finding` holds the family and
the span in the ORIGINAL text only.

Standard library only.
"""

import base64
import bisect
import functools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
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
    pattern: re.Pattern[bytes]
    needles: tuple[bytes, ...]  # substrings; the rule runs only if one is present
    group: int | str = 0
    check: Callable[[str], bool] | None = None
    priority: int = 50  # on overlap the higher priority names the family
    lower: bool = False  # needles and pattern apply to the lower-cased text
    left_boundary: bool = False  # the match must not follow a token character


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
# A placeholder word counts where it stands as a word: at an end of the value or beside a
# non-letter (`your_api_key`, `sk_test_xxxx`, `MOCK-TOKEN`, `AKIA...EXAMPLE`). Inside a run of
# random letters it is chance: one 32-character token in 5,000 holds a `todo`, `mock`, `null`...
_PLACEHOLDER_RE = re.compile(
    "|".join(
        rf"(?<![a-z]){re.escape(w)}|{re.escape(w)}(?![a-z])" if w.isalpha() else re.escape(w)
        for w in _PLACEHOLDER_WORDS
    )
)
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?$")


def _says_placeholder(value: str) -> bool:
    return _PLACEHOLDER_RE.search(value.lower()) is not None


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
    # Words average 3+ letters (PostHogAPIKey: 3.25); random tokens split into 1-2 letter chunks.
    return _word_length(value) >= 3.0


def _word_length(value: str) -> float:
    """The average length of the words a name splits into (`PostHogAPIKey`: Post Hog API Key)."""
    chunks = _WORD_CHUNK_RE.findall(value)
    return sum(map(len, chunks)) / len(chunks) if chunks else 0.0


def _looks_secret(
    value: str, min_len: int = 8, min_entropy: float = 3.0, *, word_shape: bool = False
) -> bool:
    """A high-entropy value that is not a reference, placeholder or plain identifier.

    `word_shape`: whether a value shaped like camelCase may still be a secret. Some 7% of random
    34-letter tokens have at most two digits and split into chunks of 3+ letters, so a token
    family known by its prefix and length must not be judged by that shape (hypothesis found an
    `hf_` token the leak-check let through this way).
    """
    if len(value) < min_len:
        return False
    if _says_placeholder(value):
        return False
    if value.startswith("$") or (value.startswith("%") and value.endswith("%")):
        return False  # $VAR, %VAR%
    if not word_shape and _is_identifier(value):
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


def _b64_says_private(value: str) -> bool:
    head = value[:120]
    head = head[: len(head) - len(head) % 4]
    try:
        return b"PRIVATE KEY" in base64.b64decode(head)
    except ValueError:
        return False


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


_PATH_RE = re.compile(r"^[\w.\-]*(?:/[\w.\-]+)+/?$")
# Path segments such as `my-app`, `src`, `Users`, `v2`: words, not base64.
_WORDISH_RE = re.compile(r"^[A-Za-z][a-z]*\d{0,2}(?:[-_][A-Za-z0-9][a-z0-9]*)*$")
_HEX_RE = re.compile(r"^[0-9a-fA-F]+$")
_NUMERIC_RE = re.compile(r"^[\d.,:+\-]+[a-zµ%]{0,3}$")


def _generic_ok(value: str) -> bool:
    # Assignments in code: calls, address-of, dereference, numbers with units.
    if "(" in value or value[0] in "&*@!" or _NUMERIC_RE.match(value):
        return False
    if "/" in value and _PATH_RE.match(value):
        # `git show branch:cmd/cli/x.go`: a path of word-like segments, not base64.
        segments = [seg for seg in re.split(r"[/.]", value) if seg]
        if value.startswith(("/", "~/", "./", "../")) or all(
            _is_identifier(seg.replace("-", "_")) or seg.isdigit() or _WORDISH_RE.match(seg)
            for seg in segments
        ):
            return False
    if value.isalnum() and len(value) >= 16 and (len(value) >= 24 or _word_length(value) < 3.5):
        # Under a key named secret, token or key, a long run of letters and digits is not let
        # through for splitting like a name: 0.2% of random 32-character tokens do (hypothesis
        # found `client_secret: EeNQnWrqfMURssdkpmcyaFaxgkReWQNG`), and of 274,000 names in
        # Python sources 0.03% are that long and split less evenly (so would be redacted here).
        return _looks_secret(value, min_len=8, min_entropy=3.0, word_shape=True)
    return _looks_secret(value, min_len=8, min_entropy=3.0)


# --------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------

# Token rules put their literal prefix FIRST in the pattern: CPython's `re` then jumps between
# occurrences of that literal instead of trying every position (measured 10-40x faster than a
# leading lookbehind or an alternation). The left boundary is checked afterwards in Python.
_TOKEN_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_E = r"(?![A-Za-z0-9])"  # "-"/"_" may follow: a glued token must still match

_PEM_BEGIN = re.compile(
    rb"-----BEGIN ((?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?)-----"
)
_PEM_END = re.compile(rb"-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----")
# Key body without an END line (cut-off logs, truncated pastes): base64, whitespace, header
# lines and JSON-escaped newlines.
_PEM_BODY = re.compile(rb"(?:[A-Za-z0-9+/=\s:,\-]|\\+[nrt])*")
_PEM_FAMILY = {
    "RSA PRIVATE KEY": "rsa_private_key",
    "EC PRIVATE KEY": "ec_private_key",
    "OPENSSH PRIVATE KEY": "openssh_private_key",
    "DSA PRIVATE KEY": "dsa_private_key",
    "PGP PRIVATE KEY BLOCK": "pgp_private_key",
}
_PEM_MAX = 20_000


def _rx(regex: str) -> re.Pattern[bytes]:
    # Rules run on the UTF-8 bytes of the text: bytes.lower() is ASCII-only and keeps every
    # offset (str.lower() took 0.7 s on the corpus and can change lengths), and scans touch one
    # byte per character instead of two or four for text with any non-Latin-1 character.
    return re.compile(regex.encode())


def _tok(family: str, regex: str, *needles: str, check=None, priority: int = 95) -> _Rule:
    """A token with a fixed prefix; `regex` must start with that literal prefix."""
    return _Rule(family, _rx(regex), _enc(needles), 0, check, priority, False, True)


def _ctx(family: str, regex: str, *needles: str, check=None, priority: int = 60) -> _Rule:
    """A secret known by its context; runs on the lower-cased text (same positions)."""
    return _Rule(family, _rx(regex), _enc(needles), "v", check, priority, True, False)


def _enc(needles: tuple[str, ...]) -> tuple[bytes, ...]:
    return tuple(n.encode() for n in needles)


_ASSIGN = r"[\"']?\s*(?::=|=>|=|:)\s*(?P<q>[\"'`]?)(?P<v>[^\s\x00\"'`,;)\]}]{8,256})(?P=q)"
_KEY_QUALIFIER = re.compile(
    rb"(?:api|app|access|secret|private|auth|client|master|signing|encryption|license|session"
    rb"|account|service|admin|consumer|webhook|subscription|storage)[_\-]?$"
)

_RULES: tuple[_Rule, ...] = (
    _tok(
        "aws_access_key_id",
        r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}" + _E,
        "A",
        priority=90,
    ),
    _tok("github_pat_fine", r"github_pat_[A-Za-z0-9_]{22,255}", "github_pat_"),
    _tok("github_token", r"gh[pousr]_[A-Za-z0-9]{36,255}" + _E, "gh"),
    _tok(
        "gitlab_pat",
        r"gl(?:pat|dt|rt|ptt|ft|soat|cbt|imt)-[0-9A-Za-z_\-]{20,}(?:\.[0-9A-Za-z_\-]+)*",
        "gl",
    ),
    _tok(
        "slack_webhook",
        r"https://hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}",
        "hooks.slack",
    ),
    _tok("slack_bot", r"xox[baprse]-(?:[0-9A-Za-z]+-){1,4}[0-9A-Za-z]{8,}", "xox"),
    _tok("slack_app_token", r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]{20,}", "xapp-"),
    _tok("stripe_live", r"[sr]k_live_[0-9A-Za-z]{16,247}" + _E, "k_live_"),
    _tok("stripe_test", r"[sr]k_test_[0-9A-Za-z]{16,247}" + _E, "k_test_"),
    _tok("stripe_webhook_secret", r"whsec_[0-9A-Za-z]{24,}" + _E, "whsec_"),
    _tok("google_api_key", r"AIza[0-9A-Za-z_\-]{35}" + _E, "AIza"),
    _tok("google_oauth_secret", r"GOCSPX-[0-9A-Za-z_\-]{24,40}" + _E, "GOCSPX-"),
    _tok("google_oauth_token", r"ya29\.[0-9A-Za-z_\-]{30,}", "ya29."),
    _tok(
        "anthropic",
        r"sk-ant-(?:api|admin|oat|sid)\d{2}-[A-Za-z0-9_\-]{20,}",
        "sk-",
        priority=97,
    ),
    _tok(
        "openai",
        r"sk-(?:proj-|svcacct-|admin-|None-)?(?!ant-)[A-Za-z0-9_\-]{20,}",
        "sk-",
        check=lambda v: _looks_secret(v, 20, 3.0),
        priority=96,
    ),
    # Not `_tok`: in API URLs the id follows "bot" (`/bot123:AA...`), so no left boundary.
    _Rule(
        "telegram_bot",
        _rx(r"(?<![0-9])\d{8,10}:AA[0-9A-Za-z_\-]{33}" + _E),
        (b":AA",),
        priority=95,
    ),
    _tok(
        "jwt",
        r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
        "eyJ",
        priority=92,
    ),
    _tok("twilio_api_key", r"SK[0-9a-f]{32}(?![A-Za-z0-9])", "SK", priority=90),
    # A PEM key stored base64-encoded (Kubernetes secrets, CI variables): "-----BEGIN " encoded.
    _tok(
        "private_key",
        r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{20,}={0,2}",
        "LS0tLS1CRUdJTi",
        check=lambda v: _b64_says_private(v),
        priority=99,
    ),
    _tok("npm_token", r"npm_[A-Za-z0-9]{36}" + _E, "npm_"),
    _tok("pypi_token", r"pypi-AgE[A-Za-z0-9_\-]{40,}", "pypi-AgE"),
    _tok(
        "huggingface",
        r"hf_[A-Za-z0-9]{30,40}" + _E,
        "hf_",
        check=lambda v: _looks_secret(v, 20, 3.0, word_shape=True),
    ),
    _tok("sendgrid", r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{30,50}" + _E, "SG."),
    # Token families found by the maintained scanners (benchmarks/leak_scanners.py) whose body
    # has no separator to find them by (see `_prefixed_findings` for the others).
    _tok("databricks_token", r"dapi[a-f0-9]{32}(?:-\d)?" + _E, "dapi"),
    _tok("atlassian_api_token", r"ATATT3[A-Za-z0-9_\-=]{186}", "ATATT3"),
    _ctx(
        "aws_secret_access_key",
        r"secret[_\-]?(?:access[_\-]?)?key[\"']?(?:\s*[=:]\s*|\s+)[\"']?"
        r"(?P<v>[a-z0-9/+=]{40})(?![a-z0-9/+=])",
        "secret",
        check=lambda v: not _HEX_RE.match(v),
        priority=90,
    ),
    _ctx(
        "azure_storage_key",
        r"accountkey\s*=\s*(?P<v>[a-z0-9+/]{80,90}={0,2})",
        "accountkey",
        priority=95,
    ),
    _ctx("azure_sas_signature", r"sig=(?P<v>[a-z0-9%+/]{30,}(?:%3d|=){0,2})", "sig=", priority=80),
    _ctx("bearer_token", r"bearer\s+(?P<v>[a-z0-9\-._~+/]{16,}=*)", "bearer", check=_bearer_ok),
    _ctx(
        "basic_auth",
        r"basic\s+(?P<v>[a-z0-9+/]{12,}={0,2})",
        "basic",
        check=lambda v: _looks_secret(v, 12, 3.0),
    ),
    _ctx(
        "private_token_header",
        r"private-token[\"']?\s*[:=]\s*[\"']?(?P<v>[a-z0-9\-._~+/]{16,})",
        "private-token",
        check=_bearer_ok,
    ),
    _ctx(
        "private_token_header",
        r"api-key[\"']?\s*[:=]\s*[\"']?(?P<v>[a-z0-9\-._~+/]{16,})",
        "api-key",
        check=_bearer_ok,
    ),
    _ctx(
        "private_token_header",
        r"auth-token[\"']?\s*[:=]\s*[\"']?(?P<v>[a-z0-9\-._~+/]{16,})",
        "auth-token",
        check=_bearer_ok,
    ),
    _ctx(
        "bearer_token",
        r"authorization[\"']?\s*[:=]\s*[\"']?(?:token|apikey|api-key|key|sso-key)\s+"
        r"(?P<v>[a-z0-9\-._~+/:]{16,}=*)",
        "authorization",
        check=_bearer_ok,
    ),
    _ctx(
        "generic_password",
        r"--(?:[a-z0-9]+-)*(?:password|passwd|passphrase|token|secret|apikey"
        r"|(?:api|account|access|secret|private|auth|client|storage|master|app|sas)-?key)"
        r"(?:-[a-z0-9]+)*[ \t]+(?P<q>[\"'`]?)(?P<v>[^\s\x00\"'`,;)\]}]{8,256})(?P=q)",
        "--",
        check=lambda v: _generic_ok(v) and not v.startswith("-"),
        priority=41,
    ),
    # `DB_PASS=...`: bare "pass" only with '=' (`--- PASS: TestName` is every Go test log).
    _ctx(
        "generic_password",
        r"pass[\"']?\s*(?::=|=)\s*(?P<q>[\"'`]?)(?P<v>[^\s\x00\"'`,;)\]}]{8,256})(?P=q)",
        "pass",
        check=_generic_ok,
        priority=40,
    ),
    # Generic `password=` / `secret:` / `token=` / `api_key=` assignments: one literal-first
    # pattern per keyword (an alternation here cost 12 s on the dev corpus, these cost < 1 s).
    *(
        _ctx(family, keyword + _ASSIGN, needle, check=_generic_ok, priority=priority)
        for family, keyword, needle, priority in (
            ("generic_password", r"pass(?:w(?:or)?d|phrase)[a-z0-9_.\-]*", "pass", 40),
            ("generic_password", r"pwd[a-z0-9_.\-]*", "pwd", 40),
            ("generic_secret", r"secret[a-z0-9_.\-]*", "secret", 40),
            ("generic_token", r"token[a-z0-9_.\-]*", "token", 40),
            ("generic_secret", r"credentials?[a-z0-9_.\-]*", "credential", 40),
            ("generic_api_key", r"key[a-z0-9_.\-]*", "key", 39),
        )
    ),
)


def _needle_index(lower: bool) -> tuple[tuple[bytes, tuple[int, ...]], ...]:
    index: dict[bytes, list[int]] = {}
    for i, rule in enumerate(_RULES):
        if rule.lower == lower:
            for n in rule.needles:
                index.setdefault(n, []).append(i)
    return tuple((n, tuple(ids)) for n, ids in index.items())


_NEEDLES_EXACT = _needle_index(False)
_NEEDLES_LOWER = _needle_index(True)

# URL credentials (scheme://user:password@host): one literal-first pattern, family by scheme.
_URL_CRED = re.compile(rb"://[^\s\x00:/@\"'<>]*:(?P<v>[^\s\x00\"'<>/]+)@")
_SCHEME_BEFORE = re.compile(rb"([A-Za-z][A-Za-z0-9+.\-]*)\Z")
_DB_SCHEMES = (
    "mysql",
    "mariadb",
    "mongodb",
    "redis",
    "rediss",
    "amqp",
    "amqps",
    "mssql",
    "sqlserver",
    "clickhouse",
    "cockroachdb",
    "oracle",
    "jdbc",
    "neo4j",
    "cassandra",
    "memcached",
)

# One GitHub rule matches every gh?_ token; the letter names the family.
_GITHUB_FAMILY = {ord("p"): "github_pat_classic", ord("o"): "github_oauth"}

# Findings before merging: (start, end, family, priority).
_Raw = list[tuple[int, int, str, int]]

# Prefixed tokens of the families the maintained scanners know (Kingfisher and Betterleaks
# found them where our rules did not: benchmarks/leak_scanners.py, docs/decisions/0012). Not one
# rule each: ~30 needles would cost ~30 passes over the text. Every one of these has a `_`, `-`
# or `.` followed by 16 token characters, so three literal-first passes find the candidates
# and the letters before that separator (the key) pick the pattern, matched at the token start.
# (family, key, bytes from the token start to the key, pattern from the token start)
_PREFIXED_TOKENS: tuple[tuple[str, str, int, str], ...] = (
    ("dockerhub_pat", "dckr", 0, r"dckr_pat_[A-Za-z0-9_\-]{20,100}"),
    ("vault_token", "hvs", 0, r"hvs\.[A-Za-z0-9_\-]{90,300}"),
    ("vault_token", "hvb", 0, r"hvb\.[A-Za-z0-9_\-]{90,400}"),
    ("grafana_token", "glc", 0, r"glc_[A-Za-z0-9+/]{32,400}={0,2}"),
    ("terraform_cloud_token", "atlasv1", 15, r"[a-z0-9]{14}\.atlasv1\.[A-Za-z0-9_\-=]{60,70}"),
    ("grafana_token", "glsa", 0, r"glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}" + _E),
    ("sentry_token", "sntryu", 0, r"sntryu_[a-f0-9]{64}" + _E),
    ("sentry_token", "sntrys", 0, r"sntrys_eyJ[A-Za-z0-9+/=_\-]{60,400}"),
    ("supabase_token", "sbp", 0, r"sbp_[a-f0-9]{40}" + _E),
    *(("digitalocean_token", k, 0, r"do[opr]_v1_[a-f0-9]{64}" + _E) for k in ("dop", "doo", "dor")),
    *(
        ("shopify_token", k, 0, r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}" + _E)
        for k in ("shpat", "shpss", "shpca", "shppa")
    ),
    ("linear_api_key", "lin", 0, r"lin_api_[A-Za-z0-9]{40}" + _E),
    ("postman_api_key", "PMAK", 0, r"PMAK-[a-fA-F0-9]{24}-[a-fA-F0-9]{34}" + _E),
    ("xai_api_key", "xai", 0, r"xai-[A-Za-z0-9]{80}" + _E),
    ("groq_api_key", "gsk", 0, r"gsk_[A-Za-z0-9]{52}" + _E),
    ("replicate_token", "r8", 0, r"r8_[A-Za-z0-9]{37}" + _E),
    ("perplexity_api_key", "pplx", 0, r"pplx-[A-Za-z0-9]{48}" + _E),
    ("figma_token", "figd", 0, r"figd_[A-Za-z0-9_\-]{40}" + _E),
    ("age_secret_key", "AGE", 0, r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    ("planetscale_password", "pscale", 0, r"pscale_pw_[A-Za-z0-9_.\-]{32,64}"),
    ("square_token", "sq0atp", 0, r"sq0atp-[0-9A-Za-z_\-]{22}" + _E),
    *(
        ("doppler_token", k, 3, r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}" + _E)
        for k in ("pt", "st", "sa", "ct", "scim", "audit")
    ),
    ("pulumi_token", "pul", 0, r"pul-[a-f0-9]{40}" + _E),
    ("langsmith_api_key", "lsv2", 0, r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}" + _E),
    ("sourcegraph_token", "sgp", 0, r"sgp_(?:[a-f0-9]{16}_|local_)?[a-f0-9]{40}" + _E),
    ("dynatrace_token", "dt0c01", 0, r"dt0c01\.[A-Z0-9]{24}\.[A-Z0-9]{64}" + _E),
    ("prefect_api_key", "pnu", 0, r"pnu_[A-Za-z0-9]{36}" + _E),
    ("cloudflare_origin_ca_key", "v1", 0, r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}" + _E),
    ("heroku_api_key", "HRKU", 0, r"HRKU-AA[A-Za-z0-9_\-]{58}" + _E),
    ("notion_token", "ntn", 0, r"ntn_[0-9]{11}[A-Za-z0-9]{35}" + _E),
    ("brevo_api_key", "xkeysib", 0, r"xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}" + _E),
)
_KEY_MAX = 8  # letters of the longest key, and one to spare


def _prefixed_index() -> dict[bytes, tuple[tuple[str, int, str], ...]]:
    index: dict[bytes, tuple[tuple[str, int, str], ...]] = {}
    for family, key, back, pattern in _PREFIXED_TOKENS:
        index[key.encode()] = (*index.get(key.encode(), ()), (family, back, pattern))
    return index


@functools.cache
def _prefixed_pattern(pattern: str) -> re.Pattern[bytes]:
    # Compiled on first use: a key is rare, and 35 patterns cost ~50 ms at import.
    return _rx(pattern)


_PREFIXED = _prefixed_index()


def _prefix_passes() -> tuple[re.Pattern[bytes], ...]:
    # Per separator: the literal, then 16 token (or base64) characters, then one of the keys
    # just before it (fixed-width lookbehinds): the literal keeps the pass fast, the lookahead
    # rejects most separators in C before any lookbehind runs.
    keys: dict[str, set[str]] = {"_": set(), "-": set(), ".": set()}
    for _f, key, back, pattern in _PREFIXED_TOKENS:
        # The first separator of the pattern follows the key (doppler's key follows `dp.`).
        at = {c: pattern.find(lit) for c, lit in (("_", "_"), ("-", "-"), (".", "\\."))}
        sep = "." if back else min((i, c) for c, i in at.items() if i > 0)[1]
        keys[sep].add(key)
    return tuple(
        _rx(
            re.escape(sep)
            + r"(?=[A-Za-z0-9_\-+/]{16})(?:"
            + "|".join(f"(?<={re.escape(k + sep)})" for k in sorted(ks))
            + ")"
        )
        for sep, ks in keys.items()
    )


_PREFIX_SEPS = _prefix_passes()


def _prefixed_findings(data: bytes) -> _Raw:
    out: _Raw = []
    for sep in _PREFIX_SEPS:
        done = 0
        for m in sep.finditer(data):
            p = m.start()
            if p < done or p == 0 or data[p - 1] not in _TOKEN_CHARS:
                continue
            i, lo = p - 1, max(0, p - _KEY_MAX - 1)
            while i > lo and data[i - 1] in _TOKEN_CHARS:
                i -= 1
            rules = _PREFIXED.get(data[i:p])
            if rules is None or (i > 0 and data[i - 1] in _TOKEN_CHARS):
                continue  # not a key, or a longer word ending in one (`mysqlpub-`)
            for family, back, pattern in rules:
                start = i - back
                t = _prefixed_pattern(pattern).match(data, start) if start >= 0 else None
                if t is not None and (start == 0 or data[start - 1] not in _TOKEN_CHARS):
                    out.append((start, t.end(), family, 95))
                    done = t.end()
                    break
    return out


FAMILIES: tuple[str, ...] = tuple(
    sorted(
        {r.family for r in _RULES}
        | {t[0] for t in _PREFIXED_TOKENS}
        | {"cli_password"}
        | set(_GITHUB_FAMILY.values())
        | set(_PEM_FAMILY.values())
        | {"private_key", "postgres_url_password", "database_url_password", "url_password"}
    )
)

_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")


def _value(data: bytes, start: int, end: int) -> str:
    return data[start:end].decode("utf-8", "surrogatepass")


def _pem_findings(data: bytes) -> _Raw:
    out: _Raw = []
    for m in _PEM_BEGIN.finditer(data):
        family = _PEM_FAMILY.get(m.group(1).decode(), "private_key")
        limit = m.end() + _PEM_MAX
        nul = data.find(b"\x00", m.end(), limit)
        # Never look for the END line past a NUL: in a batch that is the next text.
        end_m = _PEM_END.search(data, m.end(), nul if nul != -1 else limit)
        if end_m is not None:
            end = end_m.end()
        else:
            body = _PEM_BODY.match(data, m.end(), m.end() + _PEM_MAX)
            end = body.end() if body else m.end()
            # Keep trailing whitespace out of the span so the text around it stays as it was.
            while end > m.end() and data[end - 1] in b" \t\r\n":
                end -= 1
        out.append((m.start(), end, family, 100))
    return out


def _url_findings(data: bytes) -> _Raw:
    out: _Raw = []
    for m in _URL_CRED.finditer(data):
        start, end = m.span("v")
        if not _url_password_ok(_value(data, start, end)):
            continue
        sm = _SCHEME_BEFORE.search(data, max(0, m.start() - 40), m.start())
        scheme = sm.group(1).decode().lower().split("+")[0] if sm else ""
        if scheme.startswith("postgres"):
            out.append((start, end, "postgres_url_password", 85))
        elif scheme in _DB_SCHEMES:
            out.append((start, end, "database_url_password", 85))
        elif scheme:
            out.append((start, end, "url_password", 70))
    return out


# --------------------------------------------------------------------------------------------
# Passwords on command lines: `mysql -pX`, `sshpass -p X`, `redis-cli -a X`, `curl -u user:X`
# --------------------------------------------------------------------------------------------
# A flag means "password" only for some commands (`-p` is a port for ssh and docker, "parents"
# for mkdir; `mysql -p db` prompts and `db` is a database), so these are read from the words of
# the command itself, not matched by a pattern over any text. One literal-first pass finds the
# flags that can carry a password (`-p`, `-a`, `-u`, `--user`, `--password`...); only around
# those is the command (back to a newline, `|`, `;`, `&`, `<`, `>`, a backtick or a JSON-escaped
# newline) split into shell words, and the flags of the command words found there are read.
# Looking for each command's name instead cost a full pass per name (~60), 3x the whole scan.

_CLI_FAMILY = "cli_password"
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
# Well-known defaults and words written where a password goes (`-ppassword`, `-p root`).
_CLI_DEFAULTS = frozenset(
    {
        "pass",
        "pwd",
        "secret",
        "root",
        "admin",
        "user",
        "guest",
        "test",
        "changeme",
        "changeit",
        "example",
        "mysql",
        "redis",
        "postgres",
        "mongo",
        "foobared",
        "tiger",
        "cassandra",
        "neo4j",
        "xxx",
    }
)
_METAVAR_RE = re.compile(r"^[A-Z][A-Z_]*$")  # PASSWORD, DB_PASS: a help text's metavar


def _cli_password_ok(value: str, spaced: bool, quoted: bool) -> bool:
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
    if _says_placeholder(value) or _METAVAR_RE.match(value):
        return False
    return not (
        spaced and not quoted and _is_identifier(value) and not any(map(str.isdigit, value))
    )


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
_CMD_BY_NEEDLE = tuple(
    (n.encode(), _rx(n + r"(?:\.exe)?[ \t]")) for n in ("sqlplus", "rabbitmqctl")
)


def _cmd_name(data: bytes, s: int, e: int) -> _Cmd | None:
    word = data[s:e].lower()
    if len(word) > 40:
        return None
    word = word.rsplit(b"/", 1)[-1].removesuffix(b".exe")
    return _CMD_BY_NAME.get(word)


def _cmd_values(data: bytes, cmd: _Cmd, words: list[tuple[int, int]]) -> _Raw:
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
    out: _Raw = []
    for s, e, spaced in cands:
        vs, ve, quoted = _unquote(data, s, e)
        if cmd.split:
            cut = data.find(cmd.split, vs, ve)
            if cut == -1:
                continue  # `curl -u user`: curl asks for the password
            vs = cut + 1
            quoted = True  # after `user:` it is a password, not prose
        if ve > vs and _cli_password_ok(_value(data, vs, ve), spaced, quoted):
            out.append((vs, ve, _CLI_FAMILY, 60))
    return out


def _flag_value(data: bytes, m: re.Match[bytes]) -> _Raw:
    """`--password X` and the like, any command: the value unless it is a placeholder."""
    vs, ve = m.span("v")
    value = _value(data, vs, ve)
    low = value.lower()
    if low.startswith(("env:", "file:", "fd:", "stdin")):
        return []  # openssl's -passin env:VAR / file:PATH
    if low.startswith("pass:"):
        vs += 5
        value = value[5:]
    spaced = m.group("sep") != b"="
    if _cli_password_ok(value, spaced, quoted=m.group("q") != b""):
        return [(vs, ve, "generic_password", 41)]
    return []


def _commands(data: bytes, words: list[tuple[int, int]]) -> _Raw:
    out: _Raw = []
    for i, (ws, we) in enumerate(words):
        cmd = _cmd_name(data, ws, we)
        if cmd is not None:
            out.extend(_cmd_values(data, cmd, words[i + 1 :]))
    return out


# The environment variables clients read a password from, as (prefix, keyword of the generic
# password rule that matches there): `PGPASSWORD=x`, `MYSQL_PWD=x`, `SSHPASS=x`.
_CLIENT_ENV = ((b"pg", b"password"), (b"mysql_", b"pwd"), (b"ssh", b"pass"))


def _client_env(low: bytes, start: int) -> bool:
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


def _cli_findings(data: bytes, low: bytes) -> _Raw:
    out: _Raw = []
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


def _to_chars(data: bytes, found: _Raw) -> _Raw:
    """Byte offsets (from the UTF-8 scan) to character offsets in the text."""
    n = len(data)

    def back(o: int) -> int:  # to the first byte of the character holding `o`
        while 0 < o < n and 0x80 <= data[o] < 0xC0:
            o -= 1
        return o

    def forward(o: int) -> int:  # past the last byte of the character holding `o - 1`
        while o < n and 0x80 <= data[o] < 0xC0:
            o += 1
        return o

    found = [(back(s), forward(e), fam, prio) for s, e, fam, prio in found]
    offsets = sorted({o for f in found for o in f[:2]})
    chars: dict[int, int] = {}
    prev_b = prev_c = 0
    for o in offsets:
        prev_c += len(data[prev_b:o].decode("utf-8", "surrogatepass"))
        prev_b = o
        chars[o] = prev_c
    return [(chars[s], chars[e], fam, prio) for s, e, fam, prio in found]


def _raw_findings(text: str) -> _Raw:
    ascii_only = text.isascii()
    data = text.encode("utf-8", "surrogatepass")
    found: _Raw = []
    if b"PRIVATE KEY" in data:
        found.extend(_pem_findings(data))
    if b"://" in data and b"@" in data:
        found.extend(_url_findings(data))
    found.extend(_prefixed_findings(data))
    low = data.lower()
    found.extend(_cli_findings(data, low))
    # One pass over the distinct needles decides which rules run (most run on no text at all).
    todo: set[int] = set()
    for needle, rule_ids in _NEEDLES_EXACT:
        if needle in data:
            todo.update(rule_ids)
    for needle, rule_ids in _NEEDLES_LOWER:
        if needle in low:
            todo.update(rule_ids)
    for idx in sorted(todo):
        rule = _RULES[idx]
        for m in _matches_resuming_at_value(rule, low if rule.lower else data):
            start, end = m.span(rule.group)
            if start < 0 or start == end:
                continue
            if rule.left_boundary and m.start() > 0 and data[m.start() - 1] in _TOKEN_CHARS:
                continue
            if not ascii_only:
                # A bounded class can stop inside a multi-byte character: take all of it.
                while end < len(data) and 0x80 <= data[end] < 0xC0:
                    end += 1
            value = _value(data, start, end)
            if "REDACTED" in value:
                continue
            if rule.family == "generic_api_key" and not _KEY_QUALIFIER.search(
                low, max(0, m.start() - 16), m.start()
            ):
                # Bare `key:` is everywhere in code (cache keys, dict keys, hashes): only
                # qualified keys (api_key, app_key, secret_key, ...) count.
                continue
            if (
                rule.check is not None
                and not rule.check(value)
                and not (
                    rule.family == "generic_password"
                    and _client_env(low, m.start())
                    and _cli_password_ok(value, spaced=False, quoted=True)
                )
            ):
                continue
            family = rule.family
            if family == "github_token":
                family = _GITHUB_FAMILY.get(data[start + 2], family)
            found.append((start, end, family, rule.priority))
    if found and not ascii_only:
        return _to_chars(data, found)
    return found


def _matches_resuming_at_value(rule: _Rule, text: bytes) -> Iterator[re.Match[bytes]]:
    """The rule's matches, each search resuming where the last one's value began, not where it
    ended: in `PASSWD=` + newline + `DB_PASSWORD="..."` the first match takes `DB_PASSWORD=` as
    its value, and a scan resuming after it never saw the real password (found by hypothesis)."""
    pos = 0
    while pos <= len(text):
        m = rule.pattern.search(text, pos)
        if m is None:
            return
        yield m
        value_start = m.start(rule.group)
        pos = value_start if value_start > m.start() else m.end()
        if m.end() == m.start():
            pos += 1


def _merge(raw: list[tuple[int, int, str, int]]) -> list[list]:
    """Union of overlapping spans; the highest-priority rule names the family (a JWT in a bearer
    header reports "jwt", a key inside a generic assignment its own family)."""
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
    return merged


def _apply(text: str, spans: list[list]) -> tuple[str, list[tuple[int, int, int, int]]]:
    """Redacted text and, per marker, (out_start, out_end, orig_start, orig_end)."""
    parts: list[str] = []
    where: list[tuple[int, int, int, int]] = []
    pos = out_len = 0
    for start, end, fam, _ in spans:
        parts.append(text[pos:start])
        out_len += start - pos
        marker = f"{MARKER_PREFIX}{fam}]"
        parts.append(marker)
        where.append((out_len, out_len + len(marker), start, end))
        out_len += len(marker)
        pos = end
    parts.append(text[pos:])
    return "".join(parts), where


def _to_original(pos: int, where: list[tuple[int, int, int, int]], is_end: bool) -> int:
    delta = 0
    for o_start, o_end, start, end in where:
        if pos < o_start:
            break
        if pos < o_end or (is_end and pos == o_end):
            return end if is_end else start
        delta = end - o_end
    return pos + delta


def find_secrets(text: str) -> list[Finding]:
    """Secrets in `text` as non-overlapping findings, sorted by position (values never kept).

    Redacting can expose a match that the original hid (a token glued to a key's last line
    starts matching once `]` replaces the key), so the scan repeats on the redacted text until
    nothing new appears; new spans are mapped back to the original. That makes `redact`
    idempotent by construction.
    """
    if not text:
        return []
    raw = _raw_findings(text)
    if not raw:
        return []
    # A marker already in the text must stay intact (idempotence): drop spans that touch one.
    markers = [m.span() for m in _MARKER_RE.finditer(text)] if MARKER_PREFIX in text else []
    spans = [sp for sp in _merge(raw) if not any(sp[0] < me and ms < sp[1] for ms, me in markers)]
    for _ in range(4):
        if not spans:
            break
        out, where = _apply(text, spans)
        out_markers = [(w[0], w[1]) for w in where] + [m.span() for m in _MARKER_RE.finditer(out)]
        extra = [
            (s, e, fam, prio)
            for s, e, fam, prio in _raw_findings(out)
            if not any(s < me and ms < e for ms, me in out_markers)
        ]
        if not extra:
            break
        mapped = [
            (_to_original(s, where, False), _to_original(e, where, True), fam, prio)
            for s, e, fam, prio in extra
        ]
        spans = _merge([tuple(sp) for sp in spans] + mapped)  # type: ignore[misc]
    return [Finding(fam, start, end) for start, end, fam, _ in spans]


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


# Joins the texts of one session for a single scan. No rule matches across it: NUL is neither a
# token character nor whitespace, and every open-ended value class excludes it.
_SEP = "\x00\n\x00"


_BATCH_CHARS = 1 << 18


def redact_many(texts: list[str]) -> tuple[list[str], list[list[Finding]]]:
    """Redact many texts, a batch of ~256k characters per scan. Same result as `redact` on each.

    A session has ~10^4 small texts: per-call overhead and per-needle scans dominate when they are
    done one by one; batches of bounded size keep the extra memory at a few MB. A text repeated
    in the session (the same file read twice, the same tool output) is scanned once: ~10% of the
    corpus' text.
    """
    index: dict[str, int] = {}
    unique: list[str] = []
    slots: list[int] = []
    for t in texts:
        i = index.get(t)
        if i is None:
            i = index[t] = len(unique)
            unique.append(t)
        slots.append(i)
    outs: list[str] = []
    found: list[list[Finding]] = []
    batch: list[str] = []
    size = 0
    for t in unique:
        if batch and size + len(t) > _BATCH_CHARS:
            o, f = _redact_batch(batch)
            outs.extend(o)
            found.extend(f)
            batch, size = [], 0
        batch.append(t)
        size += len(t) + len(_SEP)
    o, f = _redact_batch(batch)
    outs.extend(o)
    found.extend(f)
    # Each repeat gets its own findings list, so callers may count and modify them freely.
    return [outs[i] for i in slots], [list(found[i]) for i in slots]


def _redact_batch(texts: list[str]) -> tuple[list[str], list[list[Finding]]]:
    if not texts:
        return [], []
    joined = _SEP.join(t.replace("\x00", "") if "\x00" in t else t for t in texts)
    if any("\x00" in t for t in texts):
        # Rare: texts with their own NULs are done one by one (offsets must stay exact).
        pairs = [redact(t) for t in texts]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    findings = find_secrets(joined)
    outs: list[str] = []
    per_text: list[list[Finding]] = [[] for _ in texts]
    if not findings:
        return list(texts), per_text
    # Map each finding to its text by offset.
    bounds: list[int] = []
    pos = 0
    for t in texts:
        bounds.append(pos)
        pos += len(t) + len(_SEP)
    for f in findings:
        i = bisect.bisect_right(bounds, f.start) - 1
        base = bounds[i]
        end = min(f.end - base, len(texts[i]))
        if f.start - base >= len(texts[i]):
            continue  # inside a separator (cannot happen; kept safe)
        per_text[i].append(Finding(f.family, f.start - base, end))
    for t, fs in zip(texts, per_text, strict=True):
        if not fs:
            outs.append(t)
            continue
        parts: list[str] = []
        p = 0
        for f in fs:
            parts.append(t[p : f.start])
            parts.append(f"[REDACTED:{f.family}]")
            p = f.end
        parts.append(t[p:])
        outs.append("".join(parts))
    return outs, per_text


def redact_session(session):  # type: ignore[no-untyped-def]
    """A copy of `session` with every text field redacted, and the counts by family.

    Covers turn text, tool names, summaries, commands and file paths, the title, cwd, branch and
    project. The input session is not modified.
    """
    texts: list[str] = [
        session.title or "",
        session.cwd or "",
        session.git_branch or "",
        session.project or "",
    ]
    for turn in session.turns:
        texts.append(turn.text)
        for tu in turn.tool_uses:
            texts.append(tu.name)
            texts.append(tu.summary)
            texts.append(tu.command or "")
            texts.extend(tu.file_paths)
    outs, per_text = redact_many(texts)
    counts: Counter[str] = Counter(f.family for fs in per_text for f in fs)
    it = iter(outs)
    title, cwd, branch, project = next(it), next(it), next(it), next(it)
    new_turns = []
    for turn in session.turns:
        text = next(it)
        tools = []
        for tu in turn.tool_uses:
            name, summary, command = next(it), next(it), next(it)
            paths = tuple(next(it) for _ in tu.file_paths)
            tools.append(
                type(tu)(
                    name=name,
                    file_paths=paths,
                    command=command if tu.command is not None else None,
                    summary=summary,
                    is_error=tu.is_error,
                    id=tu.id,
                )
            )
        new_turns.append(
            type(turn)(
                role=turn.role,
                kind=turn.kind,
                text=text,
                timestamp=turn.timestamp,
                tool_uses=tuple(tools),
                agent_id=turn.agent_id,
                uuid=turn.uuid,
            )
        )
    new = replace(
        session,
        turns=new_turns,
        title=title if session.title is not None else None,
        cwd=cwd if session.cwd is not None else None,
        git_branch=branch if session.git_branch is not None else None,
        project=project,
    )
    return new, dict(counts)
