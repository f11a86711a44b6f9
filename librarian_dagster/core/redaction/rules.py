"""The leak-check's rules: what each family of secret looks like, as tables the scan runs.

- `RULES`: one regular expression per token family (found by its literal prefix) or context
  (`password=`, `Bearer `, `--api-key`), each with the needles that decide whether it runs
  (`rules_to_run`: needles sharing a rare character are looked for together, one pass each);
- `PREFIXED_TOKENS`: token families with a separator after a short key, found together by three
  passes (one per separator) instead of one pass each;
- PEM private keys and URL credentials, each with a pass of its own shape.

Every pattern runs on the UTF-8 bytes of the text (see `rx`); findings are byte offsets until
`scan` maps them to characters.
"""

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from librarian_dagster.core.redaction.checks import (
    HEX_RE,
    b64_says_private,
    bearer_ok,
    generic_ok,
    looks_secret,
    url_password_ok,
)


@dataclass(frozen=True)
class Rule:
    family: str
    pattern: re.Pattern[bytes]
    needles: tuple[bytes, ...]  # substrings; the rule runs only if one is present
    group: int | str = 0
    check: Callable[[str], bool] | None = None
    priority: int = 50  # on overlap the higher priority names the family
    lower: bool = False  # needles and pattern apply to the lower-cased text
    left_boundary: bool = False  # the match must not follow a token character


# Token rules put their literal prefix FIRST in the pattern: CPython's `re` then jumps between
# occurrences of that literal instead of trying every position (measured 10-40x faster than a
# leading lookbehind or an alternation). The left boundary is checked afterwards in Python.
TOKEN_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_E = r"(?![A-Za-z0-9])"  # "-"/"_" may follow: a glued token must still match

_PEM_BEGIN = re.compile(
    rb"-----BEGIN ((?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?)-----"
)
_PEM_END = re.compile(rb"-----END [A-Z ]*PRIVATE KEY(?: BLOCK)?-----")
# Key body without an END line (cut-off logs, truncated pastes): base64, whitespace, header
# lines and JSON-escaped newlines.
_PEM_BODY = re.compile(rb"(?:[A-Za-z0-9+/=\s:,\-]|\\+[nrt])*")
PEM_FAMILY = {
    "RSA PRIVATE KEY": "rsa_private_key",
    "EC PRIVATE KEY": "ec_private_key",
    "OPENSSH PRIVATE KEY": "openssh_private_key",
    "DSA PRIVATE KEY": "dsa_private_key",
    "PGP PRIVATE KEY BLOCK": "pgp_private_key",
}
_PEM_MAX = 20_000


def rx(regex: str) -> re.Pattern[bytes]:
    # Rules run on the UTF-8 bytes of the text: bytes.lower() is ASCII-only and keeps every
    # offset (str.lower() took 0.7 s on the corpus and can change lengths), and scans touch one
    # byte per character instead of two or four for text with any non-Latin-1 character.
    return re.compile(regex.encode())


def _tok(family: str, regex: str, *needles: str, check=None, priority: int = 95) -> Rule:
    """A token with a fixed prefix; `regex` must start with that literal prefix."""
    return Rule(family, rx(regex), _enc(needles), 0, check, priority, False, True)


def _ctx(family: str, regex: str, *needles: str, check=None, priority: int = 60) -> Rule:
    """A secret known by its context; runs on the lower-cased text (same positions)."""
    return Rule(family, rx(regex), _enc(needles), "v", check, priority, True, False)


def _enc(needles: tuple[str, ...]) -> tuple[bytes, ...]:
    return tuple(n.encode() for n in needles)


_ASSIGN = r"[\"']?\s*(?::=|=>|=|:)\s*(?P<q>[\"'`]?)(?P<v>[^\s\x00\"'`,;)\]}]{8,256})(?P=q)"
KEY_QUALIFIER = re.compile(
    rb"(?:api|app|access|secret|private|auth|client|master|signing|encryption|license|session"
    rb"|account|service|admin|consumer|webhook|subscription|storage)[_\-]?$"
)

RULES: tuple[Rule, ...] = (
    _tok(
        "aws_access_key_id",
        r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}" + _E,
        *("AKIA", "ASIA", "ABIA", "ACCA"),
        priority=90,
    ),
    _tok("github_pat_fine", r"github_pat_[A-Za-z0-9_]{22,255}", "github_pat_"),
    _tok("github_token", r"gh[pousr]_[A-Za-z0-9]{36,255}" + _E, *(f"gh{c}_" for c in "pousr")),
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
        check=lambda v: looks_secret(v, 20, 3.0),
        priority=96,
    ),
    # Not `_tok`: in API URLs the id follows "bot" (`/bot123:AA...`), so no left boundary.
    Rule(
        "telegram_bot",
        rx(r"(?<![0-9])\d{8,10}:AA[0-9A-Za-z_\-]{33}" + _E),
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
        check=lambda v: b64_says_private(v),
        priority=99,
    ),
    _tok("npm_token", r"npm_[A-Za-z0-9]{36}" + _E, "npm_"),
    _tok("pypi_token", r"pypi-AgE[A-Za-z0-9_\-]{40,}", "pypi-AgE"),
    _tok(
        "huggingface",
        r"hf_[A-Za-z0-9]{30,40}" + _E,
        "hf_",
        check=lambda v: looks_secret(v, 20, 3.0, word_shape=True),
    ),
    _tok("sendgrid", r"SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{30,50}" + _E, "SG."),
    # Token families found by the maintained scanners (benchmarks/leak_scanners.py) whose body
    # has no separator to find them by (see `prefixed_findings` for the others).
    _tok("databricks_token", r"dapi[a-f0-9]{32}(?:-\d)?" + _E, "dapi"),
    _tok("atlassian_api_token", r"ATATT3[A-Za-z0-9_\-=]{186}", "ATATT3"),
    _ctx(
        "aws_secret_access_key",
        r"secret[_\-]?(?:access[_\-]?)?key[\"']?(?:\s*[=:]\s*|\s+)[\"']?"
        r"(?P<v>[a-z0-9/+=]{40})(?![a-z0-9/+=])",
        "secret",
        check=lambda v: not HEX_RE.match(v),
        priority=90,
    ),
    _ctx(
        "azure_storage_key",
        r"accountkey\s*=\s*(?P<v>[a-z0-9+/]{80,90}={0,2})",
        "accountkey",
        priority=95,
    ),
    _ctx("azure_sas_signature", r"sig=(?P<v>[a-z0-9%+/]{30,}(?:%3d|=){0,2})", "sig=", priority=80),
    _ctx("bearer_token", r"bearer\s+(?P<v>[a-z0-9\-._~+/]{16,}=*)", "bearer", check=bearer_ok),
    _ctx(
        "basic_auth",
        r"basic\s+(?P<v>[a-z0-9+/]{12,}={0,2})",
        "basic",
        check=lambda v: looks_secret(v, 12, 3.0),
    ),
    # `Private-Token: x`, `api-key: x`, `auth-token = x`: headers that carry a token bare.
    *(
        _ctx(
            "private_token_header",
            header + r"[\"']?\s*[:=]\s*[\"']?(?P<v>[a-z0-9\-._~+/]{16,})",
            header,
            check=bearer_ok,
        )
        for header in ("private-token", "api-key", "auth-token")
    ),
    _ctx(
        "bearer_token",
        r"authorization[\"']?\s*[:=]\s*[\"']?(?:token|apikey|api-key|key|sso-key)\s+"
        r"(?P<v>[a-z0-9\-._~+/:]{16,}=*)",
        "authorization",
        check=bearer_ok,
    ),
    _ctx(
        "generic_password",
        r"--(?:[a-z0-9]+-)*(?:password|passwd|passphrase|token|secret|apikey"
        r"|(?:api|account|access|secret|private|auth|client|storage|master|app|sas)-?key)"
        r"(?:-[a-z0-9]+)*[ \t]+(?P<q>[\"'`]?)(?P<v>[^\s\x00\"'`,;)\]}]{8,256})(?P=q)",
        "--",
        check=lambda v: generic_ok(v) and not v.startswith("-"),
        priority=41,
    ),
    # `DB_PASS=...`: bare "pass" only with '=' (`--- PASS: TestName` is every Go test log).
    _ctx(
        "generic_password",
        r"pass[\"']?\s*(?::=|=)\s*(?P<q>[\"'`]?)(?P<v>[^\s\x00\"'`,;)\]}]{8,256})(?P=q)",
        "pass",
        check=generic_ok,
        priority=40,
    ),
    # Generic `password=` / `secret:` / `token=` / `api_key=` assignments: one literal-first
    # pattern per keyword (an alternation here cost 12 s on the dev corpus, these cost < 1 s).
    *(
        _ctx(family, keyword + _ASSIGN, needle, check=generic_ok, priority=priority)
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
    for i, rule in enumerate(RULES):
        if rule.lower == lower:
            for n in rule.needles:
                index.setdefault(n, []).append(i)
    return tuple((n, tuple(ids)) for n, ids in index.items())


NEEDLES_EXACT = _needle_index(False)
NEEDLES_LOWER = _needle_index(True)

# The characters least common in what the scan reads (code, logs and prose of agents' sessions,
# measured on the agents corpus), rarest first; then a few lower-case letters and `=`, less
# common than the rest in the lower-cased text. Every other character is common.
_ANCHORS = b"~^QXZJY#K$<zG&@%V>W|?!qj'LFHUB][OM\\N89D7+A5`;6I34E_Px}T{2CR" + b"=kwyvb"
# Needles in most batches of the corpus: a sieve holding one would find something every time,
# and each needle would then be looked for again.
_EVERYWHERE = frozenset(
    {b"key", b"token", b"pass", b"secret", b"credential", b"bearer", b"basic", b"sk-"}
)


@dataclass(frozen=True)
class Sieve:
    """Needles that share a rare character, looked for in one pass: `pattern` finds that
    character and, after it, checks whether one of the needles ends there (the rest of the
    needle, then a lookbehind over all of it). No match: none of them is in the text."""

    pattern: re.Pattern[bytes]
    needles: tuple[tuple[bytes, tuple[int, ...]], ...]


def _sieved(
    index: tuple[tuple[bytes, tuple[int, ...]], ...],
) -> tuple[tuple[tuple[bytes, tuple[int, ...]], ...], tuple[Sieve, ...]]:
    """The needles looked for one by one, and the sieves for the others.

    A needle absent from the text (most token prefixes, on most text) costs a pass over all of
    it: ~1 GB/s for a short one. A pattern that begins with one literal character runs at ~3 GB/s
    in `re`, and one pass answers for every needle holding that character. Needles of 3 bytes or
    more with a rare character are grouped so, greedily (first the character most of them
    share); a long needle left alone in its group is looked for as it is, as fast.
    """
    direct = []
    pending = []
    for needle, ids in index:
        rare = any(c in _ANCHORS for c in needle)
        if len(needle) >= 3 and needle not in _EVERYWHERE and rare:
            pending.append((needle, ids))
        else:
            direct.append((needle, ids))
    sieves = []
    while pending:
        counts: dict[int, int] = {}
        for needle, _ in pending:
            for c in set(needle) & set(_ANCHORS):
                counts[c] = counts.get(c, 0) + 1
        anchor = max(counts, key=lambda c: (counts[c], -_ANCHORS.index(c)))
        members = [(n, ids) for n, ids in pending if anchor in n]
        pending = [(n, ids) for n, ids in pending if anchor not in n]
        if len(members) == 1 and len(members[0][0]) >= 10:
            direct.extend(members)
            continue
        alternatives = b"|".join(
            re.escape(n[n.index(anchor) + 1 :]) + b"(?<=" + re.escape(n) + b")" for n, _ in members
        )
        pattern = re.compile(re.escape(bytes([anchor])) + b"(?:" + alternatives + b")")
        sieves.append(Sieve(pattern, tuple(members)))
    return tuple(direct), tuple(sieves)


_EXACT = _sieved(NEEDLES_EXACT)
_LOWER = _sieved(NEEDLES_LOWER)


def rules_to_run(data: bytes, low: bytes) -> set[int]:
    """The indexes in RULES of the rules whose needles occur in the text (`data`, and `low` its
    lower case): the same as looking for every needle in turn, with fewer passes."""
    todo: set[int] = set()
    for text, (direct, sieves) in ((data, _EXACT), (low, _LOWER)):
        for needle, rule_ids in direct:
            if needle in text:
                todo.update(rule_ids)
        for sieve in sieves:
            if sieve.pattern.search(text) is not None:
                for needle, rule_ids in sieve.needles:
                    if needle in text:
                        todo.update(rule_ids)
    return todo


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
GITHUB_FAMILY = {ord("p"): "github_pat_classic", ord("o"): "github_oauth"}

# Findings before merging: (start, end, family, priority).
Raw = list[tuple[int, int, str, int]]

# Prefixed tokens of the families the maintained scanners know (Kingfisher and Betterleaks
# found them where our rules did not: benchmarks/leak_scanners.py, docs/decisions/0012). Not one
# rule each: ~30 needles would cost ~30 passes over the text. Every one of these has a `_`, `-`
# or `.` followed by 16 token characters, so three literal-first passes find the candidates
# and the letters before that separator (the key) pick the pattern, matched at the token start.
# (family, key, bytes from the token start to the key, pattern from the token start)
PREFIXED_TOKENS: tuple[tuple[str, str, int, str], ...] = (
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
    for family, key, back, pattern in PREFIXED_TOKENS:
        index[key.encode()] = (*index.get(key.encode(), ()), (family, back, pattern))
    return index


@functools.cache
def _prefixed_pattern(pattern: str) -> re.Pattern[bytes]:
    # Compiled on first use: a key is rare, and 35 patterns cost ~50 ms at import.
    return rx(pattern)


_PREFIXED = _prefixed_index()


def _prefix_passes() -> tuple[re.Pattern[bytes], ...]:
    # Per separator: the literal, then 16 token (or base64) characters, then one of the keys
    # just before it (fixed-width lookbehinds): the literal keeps the pass fast, the lookahead
    # rejects most separators in C before any lookbehind runs.
    keys: dict[str, set[str]] = {"_": set(), "-": set(), ".": set()}
    for _f, key, back, pattern in PREFIXED_TOKENS:
        # The first separator of the pattern follows the key (doppler's key follows `dp.`).
        at = {c: pattern.find(lit) for c, lit in (("_", "_"), ("-", "-"), (".", "\\."))}
        sep = "." if back else min((i, c) for c, i in at.items() if i > 0)[1]
        keys[sep].add(key)
    return tuple(
        rx(
            re.escape(sep)
            + r"(?=[A-Za-z0-9_\-+/]{16})(?:"
            + "|".join(f"(?<={re.escape(k + sep)})" for k in sorted(ks))
            + ")"
        )
        for sep, ks in keys.items()
    )


_PREFIX_SEPS = _prefix_passes()


def prefixed_findings(data: bytes) -> Raw:
    out: Raw = []
    for sep in _PREFIX_SEPS:
        done = 0
        for m in sep.finditer(data):
            p = m.start()
            if p < done or p == 0 or data[p - 1] not in TOKEN_CHARS:
                continue
            i, lo = p - 1, max(0, p - _KEY_MAX - 1)
            while i > lo and data[i - 1] in TOKEN_CHARS:
                i -= 1
            rules = _PREFIXED.get(data[i:p])
            if rules is None or (i > 0 and data[i - 1] in TOKEN_CHARS):
                continue  # not a key, or a longer word ending in one (`mysqlpub-`)
            for family, back, pattern in rules:
                start = i - back
                t = _prefixed_pattern(pattern).match(data, start) if start >= 0 else None
                if t is not None and (start == 0 or data[start - 1] not in TOKEN_CHARS):
                    out.append((start, t.end(), family, 95))
                    done = t.end()
                    break
    return out


def decoded(data: bytes, start: int, end: int) -> str:
    return data[start:end].decode("utf-8", "surrogatepass")


def pem_findings(data: bytes) -> Raw:
    out: Raw = []
    for m in _PEM_BEGIN.finditer(data):
        family = PEM_FAMILY.get(m.group(1).decode(), "private_key")
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


def url_findings(data: bytes) -> Raw:
    out: Raw = []
    for m in _URL_CRED.finditer(data):
        start, end = m.span("v")
        if not url_password_ok(decoded(data, start, end)):
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
